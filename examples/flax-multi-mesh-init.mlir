// The Flax report (shared/seeds/flax-multi-mesh-jit-out-sharding.txt) as
// Polymesh IR: `nnx.jit` of a module init whose three parameters are placed
// on three different meshes, under the ambient mesh `mesh_data`. Flax's
// `do_shard` is `jax.jit(lambda x: x, out_shardings=s)`: a sharding
// constraint. The results carry no sharding of their own: each leaf must come
// back on the mesh its parameter was placed on, whatever the leaf order.

polymesh.mesh @mesh1 = <["a"=2, "b"=4]>
polymesh.mesh @mesh2 = <["x"=2, "y"=2, "z"=2]>
polymesh.mesh @mesh3 = <["c"=8]>
polymesh.mesh @mesh_data = <["data"=4, "context"=2]>

func.func @init_model_nnx_jit()
    -> (tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"},
        tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  // jnp.ones((16, 16)) placed with ("A", "B") -> ("a", "b") on mesh1.
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  // jnp.ones((16, 16, 16)) placed with ("X", "Y", "Z") on mesh2.
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  // jnp.ones((16, 16)) placed with ("C",) on mesh3.
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  return %p1, %p2, %p3 : tensor<16x16xf32>, tensor<16x16x16xf32>, tensor<16x16xf32>
}
