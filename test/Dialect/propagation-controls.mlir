// RUN: polymesh-opt %s -split-input-file | FileCheck %s
// RUN: polymesh-opt %s -split-input-file | polymesh-opt -split-input-file | FileCheck %s
// RUN: polymesh-opt %s -split-input-file --mlir-print-op-generic | polymesh-opt -split-input-file | FileCheck %s

// Shardy's propagation controls, as Shardy writes them: per-dimension user
// priorities, sharding groups and propagation barriers. They round-trip in
// the custom and the generic form.

polymesh.mesh @m = <["a"=2, "b"=4, "c"=2]>

// A priority follows a dimension sharding's brace, open or closed, empty or
// not; dimensions without one print without one.
// CHECK-LABEL: func.func @priorities
// CHECK-SAME: #polymesh.sharding<@m, [{"a", "b"}p2, {?}p0]>
// CHECK-SAME: #polymesh.sharding<@m, [{"a", ?}p1, {}p12]>
// CHECK-SAME: #polymesh.sharding<@m, [{"b"}, {"a"}p3]>
// CHECK: polymesh.sharding_constraint %{{.*}} <@m, [{}p1, {"c", ?}]>
func.func @priorities(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", "b"}p2, {?}p0]>},
                      %y: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", ?}p1, {}p12]>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {"a"}p3]>}) {
  %0 = polymesh.sharding_constraint %x <@m, [{}p1, {"c", ?}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// CHECK-LABEL: func.func @barriers
// CHECK: %[[F:.*]] = polymesh.propagation_barrier %arg0 allowed_direction=FORWARD : tensor<4x4xf32>
// CHECK: %[[B:.*]] = polymesh.propagation_barrier %[[F]] allowed_direction=BACKWARD : tensor<4x4xf32>
// CHECK: %[[N:.*]] = polymesh.propagation_barrier %[[B]] allowed_direction=NONE : tensor<4x4xf32>
// CHECK: polymesh.propagation_barrier %[[N]] allowed_direction=BOTH : tensor<4x4xf32>
func.func @barriers(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = polymesh.propagation_barrier %x allowed_direction=FORWARD : tensor<4x4xf32>
  %1 = polymesh.propagation_barrier %0 allowed_direction=BACKWARD : tensor<4x4xf32>
  %2 = polymesh.propagation_barrier %1 allowed_direction=NONE : tensor<4x4xf32>
  %3 = polymesh.propagation_barrier %2 allowed_direction=BOTH : tensor<4x4xf32>
  return %3 : tensor<4x4xf32>
}

// -----

// CHECK-LABEL: func.func @groups
// CHECK: polymesh.sharding_group %arg0 group_id=0 : tensor<4x4xf32>
// CHECK: polymesh.sharding_group %arg1 group_id=0 : tensor<4x4xf32>
// CHECK: polymesh.sharding_group %arg1 group_id=7 : tensor<4x4xf32>
func.func @groups(%x: tensor<4x4xf32>, %y: tensor<4x4xf32>) {
  polymesh.sharding_group %x group_id=0 : tensor<4x4xf32>
  polymesh.sharding_group %y group_id=0 : tensor<4x4xf32>
  polymesh.sharding_group %y group_id=7 : tensor<4x4xf32>
  return
}
