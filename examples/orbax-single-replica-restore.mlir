// The Orbax report (shared/seeds/orbax-single-replica-restore-under-active-
// mesh.txt) as Polymesh IR. Training runs on 32 devices, `train`
// (dp=16, tp=2), set as the ambient mesh. One replica (devices 0 and 1)
// reads the checkpoint; `_globalize_single_replica_arrays` then works per
// device (expand_dims of a shard, zeros on a device) and broadcasts the
// replica to all others.

polymesh.mesh @train = <["dp"=16, "tp"=2]>
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @dev0 = <[], device_ids=[0]>
polymesh.mesh @dev5 = <[], device_ids=[5]>

// Per-device work: it must stay on its device, whatever the ambient mesh.
func.func @globalize_single_replica_arrays(
    %shard: tensor<4096x512xf32> {polymesh.sharding = #polymesh.sharding<@dev0, [{}, {}]>})
    -> (tensor<1x4096x512xf32> {polymesh.leaf = "source_device_map[0]"},
        tensor<1x4096x512xf32> {polymesh.leaf = "device_buffers[5]"})
    attributes {polymesh.ambient_mesh = @train} {
  // jnp.expand_dims(s.data, axis=0) on the source device.
  %expanded = tensor.expand_shape %shard [[0, 1], [2]] output_shape [1, 4096, 512]
      : tensor<4096x512xf32> into tensor<1x4096x512xf32>
  // jnp.zeros(slice_shape, device=d) on a non-source device.
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x4096x512xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x4096x512xf32>) -> tensor<1x4096x512xf32>
  %zeros = polymesh.sharding_constraint %fill <@dev5, [{}, {}, {}]> : tensor<1x4096x512xf32>
  return %expanded, %zeros : tensor<1x4096x512xf32>, tensor<1x4096x512xf32>
}

// The restore's broadcast: a parameter read by replica 0, returned on the
// training mesh, replicated over dp and split over tp.
func.func @restore(
    %param: tensor<4096x1024xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<4096x1024xf32> {polymesh.leaf = "params.dense.kernel",
                               polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>})
    attributes {polymesh.ambient_mesh = @train} {
  return %param : tensor<4096x1024xf32>
}
