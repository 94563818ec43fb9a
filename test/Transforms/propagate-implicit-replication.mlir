// RUN: polymesh-opt %s -split-input-file --polymesh-propagate -verify-diagnostics | FileCheck %s
// RUN: polymesh-opt %s -split-input-file --polymesh-propagate --polymesh-plan -verify-diagnostics | FileCheck %s --check-prefix=PLAN

// A value that nothing annotates and whose every use reshards it onto one
// mesh is replicated on that mesh, as Shardy treats unannotated values; each
// reshard then only slices (0 bytes move). Where its reshards disagree on
// the mesh, it stays an error. An ambient mesh, where there is one, still
// places such a value: the caller's data lives there.

polymesh.mesh @mesh3d = <["x"=2, "y"=2, "z"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>

// CHECK-LABEL: func.func @only_a_reshard
// CHECK-SAME: (%arg0: tensor<16x8x4xf32> {polymesh.sharding = #polymesh.sharding<@mesh3d, [{}, {}, {}]>})
// CHECK-SAME: -> (tensor<16x8x4xf32> {polymesh.sharding = #polymesh.sharding<@mesh3d, [{"x"}, {"y", "z"}, {}]>})
// PLAN-LABEL: func.func @only_a_reshard
// PLAN: polymesh.transfer %arg0 <@mesh3d, [{}, {}, {}]> -> <@mesh3d, [{"x"}, {"y", "z"}, {}]> steps [
// PLAN-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// PLAN-NEXT: ] : tensor<16x8x4xf32>
func.func @only_a_reshard(%arg0: tensor<16x8x4xf32>) -> tensor<16x8x4xf32> {
  %0 = polymesh.reshard %arg0 <@mesh3d, [{"x"}, {"y", "z"}, {}]> : tensor<16x8x4xf32>
  return %0 : tensor<16x8x4xf32>
}

// CHECK-LABEL: func.func @computed_then_resharded
// CHECK-SAME: (%arg0: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@mesh3d, [{}, {}]>})
// CHECK: arith.negf %arg0 {polymesh.sharding = #polymesh.sharding<@mesh3d, [{}, {}]>}
// CHECK: polymesh.reshard %{{.*}} <@mesh3d, [{"x"}, {"y"}]>
// CHECK: polymesh.reshard %{{.*}} <@mesh3d, [{}, {"z"}]>
func.func @computed_then_resharded(%arg0: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %n = arith.negf %arg0 : tensor<16x8xf32>
  %0 = polymesh.reshard %n <@mesh3d, [{"x"}, {"y"}]> : tensor<16x8xf32>
  %1 = polymesh.reshard %n <@mesh3d, [{}, {"z"}]> : tensor<16x8xf32>
  return %0, %1 : tensor<16x8xf32>, tensor<16x8xf32>
}

// -----

polymesh.mesh @mesh3d = <["x"=2, "y"=2, "z"=2]>
polymesh.mesh @other = <["a"=4], device_ids=[9, 8, 10, 11]>

func.func @reshards_disagree(
    // expected-error @+1 {{value is not placed: nothing annotates it or the values it is computed with, and there is no 'polymesh.ambient_mesh' to default to; its reshards go to meshes @mesh3d and @other, so no one mesh is implied}}
    %arg0: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %0 = polymesh.reshard %arg0 <@mesh3d, [{"x"}, {"y"}]> : tensor<16x8xf32>
  %1 = polymesh.reshard %arg0 <@other, [{}, {"a"}]> : tensor<16x8xf32>
  return %0, %1 : tensor<16x8xf32>, tensor<16x8xf32>
}

// -----

polymesh.mesh @mesh3d = <["x"=2, "y"=2, "z"=2]>

// The argument is also returned, so the reshard does not say where it lives.
// expected-error @+1 {{result #1 is not placed: nothing annotates it or the values it is computed from, and there is no 'polymesh.ambient_mesh' to default to}}
func.func @another_use(%arg0: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %0 = polymesh.reshard %arg0 <@mesh3d, [{"x"}, {"y"}]> : tensor<16x8xf32>
  return %0, %arg0 : tensor<16x8xf32>, tensor<16x8xf32>
}

// -----

polymesh.mesh @data = <["d"=4], device_ids=[8, 9, 10, 11]>
polymesh.mesh @mesh3d = <["x"=2, "y"=2, "z"=2]>

// CHECK-LABEL: func.func @ambient_first
// CHECK-SAME: (%arg0: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}]>})
func.func @ambient_first(%arg0: tensor<16x8xf32>) -> tensor<16x8xf32>
    attributes {polymesh.ambient_mesh = @data} {
  %0 = polymesh.reshard %arg0 <@mesh3d, [{"x"}, {"y"}]> : tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}
