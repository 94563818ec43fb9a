// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// The Orbax report (shared/seeds/orbax-single-replica-restore-under-active-
// mesh.txt). Under the ambient 32-device @train mesh, the per-device work of
// `_globalize_single_replica_arrays` stays on its device: no reshard, no
// error, nothing placed on @train.

polymesh.mesh @train = <["dp"=16, "tp"=2]>
polymesh.mesh @dev0 = <[], device_ids=[0]>
polymesh.mesh @dev5 = <[], device_ids=[5]>

// CHECK-LABEL: func.func @globalize_single_replica_arrays
// CHECK-SAME: %arg0: tensor<4096x512xf32> {polymesh.sharding = #polymesh.sharding<@dev0, [{}, {}]>}
// CHECK-SAME: -> (tensor<1x4096x512xf32> {polymesh.leaf = "source_device_map[0]", polymesh.sharding = #polymesh.sharding<@dev0, [{}, {}, {}]>},
// CHECK-SAME: tensor<1x4096x512xf32> {polymesh.leaf = "device_buffers[5]", polymesh.sharding = #polymesh.sharding<@dev5, [{}, {}, {}]>})
// CHECK-NOT: polymesh.reshard
// CHECK-NOT: <@train
// CHECK: tensor.expand_shape %arg0 {{.*}} {polymesh.sharding = #polymesh.sharding<@dev0, [{}, {}, {}]>}
// CHECK: tensor.empty() {polymesh.sharding = #polymesh.sharding<@dev5, [{}, {}, {}]>}
// CHECK: linalg.fill {polymesh.sharding = #polymesh.sharding<@dev5, [{}, {}, {}]>}
// CHECK-NOT: polymesh.reshard
// CHECK: return
func.func @globalize_single_replica_arrays(
    %shard: tensor<4096x512xf32> {polymesh.sharding = #polymesh.sharding<@dev0, [{}, {}]>})
    -> (tensor<1x4096x512xf32> {polymesh.leaf = "source_device_map[0]"},
        tensor<1x4096x512xf32> {polymesh.leaf = "device_buffers[5]"})
    attributes {polymesh.ambient_mesh = @train} {
  %expanded = tensor.expand_shape %shard [[0, 1], [2]] output_shape [1, 4096, 512]
      : tensor<4096x512xf32> into tensor<1x4096x512xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x4096x512xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x4096x512xf32>) -> tensor<1x4096x512xf32>
  %zeros = polymesh.sharding_constraint %fill <@dev5, [{}, {}, {}]> : tensor<1x4096x512xf32>
  return %expanded, %zeros : tensor<1x4096x512xf32>, tensor<1x4096x512xf32>
}

// -----

// The restore's broadcast: the replica on devices 0 and 1 returned on the
// training mesh is an explicit cross-mesh reshard before the return.

polymesh.mesh @train = <["dp"=16, "tp"=2]>
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>

// CHECK-LABEL: func.func @restore
// CHECK-SAME: -> (tensor<4096x1024xf32> {polymesh.leaf = "params.dense.kernel", polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>})
// CHECK: %[[B:.*]] = polymesh.reshard %arg0 <@train, [{}, {"tp"}]> : tensor<4096x1024xf32>
// CHECK-NEXT: return %[[B]]
func.func @restore(
    %param: tensor<4096x1024xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<4096x1024xf32> {polymesh.leaf = "params.dense.kernel",
                               polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>})
    attributes {polymesh.ambient_mesh = @train} {
  return %param : tensor<4096x1024xf32>
}

// -----

// Values that nothing places take the ambient mesh, replicated; values
// computed from a pinned value stay pinned even when mixed with unplaced ones.

polymesh.mesh @train = <["dp"=16, "tp"=2]>
polymesh.mesh @dev7 = <[], device_ids=[7]>

// CHECK-LABEL: func.func @ambient_default
// CHECK-SAME: -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}]>},
// CHECK-SAME: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@dev7, [{}]>})
// CHECK-NOT: polymesh.reshard
func.func @ambient_default(%pinned: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@dev7, [{}]>})
    -> (tensor<8xf32>, tensor<8xf32>) attributes {polymesh.ambient_mesh = @train} {
  %c = arith.constant dense<3.0> : tensor<8xf32>
  %free = math.sqrt %c : tensor<8xf32>
  %k = arith.constant dense<2.0> : tensor<8xf32>
  %scaled = arith.mulf %pinned, %k : tensor<8xf32>
  return %free, %scaled : tensor<8xf32>, tensor<8xf32>
}

// -----

// The ambient mesh may sit on the module.

// CHECK-LABEL: func.func @module_ambient
// CHECK-SAME: -> (tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {}]>})
module attributes {polymesh.ambient_mesh = @train} {
  polymesh.mesh @train = <["dp"=16, "tp"=2]>
  func.func @module_ambient() -> tensor<4x4xf32> {
    %c = arith.constant dense<1.0> : tensor<4x4xf32>
    return %c : tensor<4x4xf32>
  }
}
