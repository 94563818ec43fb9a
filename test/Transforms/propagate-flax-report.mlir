// RUN: polymesh-opt %s --polymesh-propagate | FileCheck %s
// RUN: polymesh-opt %s --polymesh-propagate | polymesh-opt --polymesh-propagate | FileCheck %s

// The Flax report (shared/seeds/flax-multi-mesh-jit-out-sharding.txt): three
// parameters placed on three meshes under the ambient mesh @mesh_data come
// back each on its own mesh, in every order of the leaves. No reshard is
// needed and nothing lands on the ambient mesh.

polymesh.mesh @mesh1 = <["a"=2, "b"=4]>
polymesh.mesh @mesh2 = <["x"=2, "y"=2, "z"=2]>
polymesh.mesh @mesh3 = <["c"=8]>
polymesh.mesh @mesh_data = <["data"=4, "context"=2]>

// CHECK-LABEL: func.func @init_order_123()
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear1.value", polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>}
// CHECK-SAME: tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value", polymesh.sharding = #polymesh.sharding<@mesh2, [{"x"}, {"y"}, {"z"}]>}
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear3.value", polymesh.sharding = #polymesh.sharding<@mesh3, [{"c"}, {}]>}
// CHECK-NOT: polymesh.reshard
// CHECK-NOT: @mesh_data,
// CHECK: return
func.func @init_order_123()
    -> (tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"},
        tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  return %p1, %p2, %p3 : tensor<16x16xf32>, tensor<16x16x16xf32>, tensor<16x16xf32>
}

// CHECK-LABEL: func.func @init_order_132()
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear1.value", polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>}
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear3.value", polymesh.sharding = #polymesh.sharding<@mesh3, [{"c"}, {}]>}
// CHECK-SAME: tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value", polymesh.sharding = #polymesh.sharding<@mesh2, [{"x"}, {"y"}, {"z"}]>}
// CHECK-NOT: polymesh.reshard
// CHECK-NOT: @mesh_data,
// CHECK: return
func.func @init_order_132()
    -> (tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"},
        tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  return %p1, %p3, %p2 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16x16xf32>
}

// CHECK-LABEL: func.func @init_order_213()
// CHECK-SAME: tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value", polymesh.sharding = #polymesh.sharding<@mesh2, [{"x"}, {"y"}, {"z"}]>}
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear1.value", polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>}
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear3.value", polymesh.sharding = #polymesh.sharding<@mesh3, [{"c"}, {}]>}
// CHECK-NOT: polymesh.reshard
// CHECK-NOT: @mesh_data,
// CHECK: return
func.func @init_order_213()
    -> (tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  return %p2, %p1, %p3 : tensor<16x16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>
}

// CHECK-LABEL: func.func @init_order_231()
// CHECK-SAME: tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value", polymesh.sharding = #polymesh.sharding<@mesh2, [{"x"}, {"y"}, {"z"}]>}
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear3.value", polymesh.sharding = #polymesh.sharding<@mesh3, [{"c"}, {}]>}
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear1.value", polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>}
// CHECK-NOT: polymesh.reshard
// CHECK-NOT: @mesh_data,
// CHECK: return
func.func @init_order_231()
    -> (tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  return %p2, %p3, %p1 : tensor<16x16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>
}

// CHECK-LABEL: func.func @init_order_312()
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear3.value", polymesh.sharding = #polymesh.sharding<@mesh3, [{"c"}, {}]>}
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear1.value", polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>}
// CHECK-SAME: tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value", polymesh.sharding = #polymesh.sharding<@mesh2, [{"x"}, {"y"}, {"z"}]>}
// CHECK-NOT: polymesh.reshard
// CHECK-NOT: @mesh_data,
// CHECK: return
func.func @init_order_312()
    -> (tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"},
        tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  return %p3, %p1, %p2 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16x16xf32>
}

// CHECK-LABEL: func.func @init_order_321()
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear3.value", polymesh.sharding = #polymesh.sharding<@mesh3, [{"c"}, {}]>}
// CHECK-SAME: tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value", polymesh.sharding = #polymesh.sharding<@mesh2, [{"x"}, {"y"}, {"z"}]>}
// CHECK-SAME: tensor<16x16xf32> {polymesh.leaf = "small_linear1.value", polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>}
// CHECK-NOT: polymesh.reshard
// CHECK-NOT: @mesh_data,
// CHECK: return
func.func @init_order_321()
    -> (tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"},
        tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  return %p3, %p2, %p1 : tensor<16x16xf32>, tensor<16x16x16xf32>, tensor<16x16xf32>
}
