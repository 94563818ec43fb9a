// RUN: polymesh-opt %s --polymesh-propagate 2>&1 | FileCheck %s
// RUN: polymesh-run %s --verify | FileCheck %s --check-prefix=EXEC

// A planned polymesh.transfer fed back into the pipeline (issue 13, item
// 5): its shardings are fixed. The result is the destination, an operand
// nothing placed is computed in the source sharding, and an operand placed
// otherwise is resharded to the source first. Before, propagation treated
// the transfer as an op without a rule (no warning either) and moved its
// operand to replicated, so the plan read the wrong tiles.

polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=2, "tp"=2]>

// CHECK-NOT: warning
// CHECK-LABEL: func.func @operand_elsewhere
// CHECK-SAME: -> (tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>})
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@replica0, [{}, {"tp"}]>
// CHECK-NEXT: %[[T:.*]] = polymesh.transfer %[[R]] <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]>
// CHECK: arith.negf %[[T]] {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>}
// EXEC: @operand_elsewhere: 1 leaf, 192 bytes moved, {{.*}} on 4 devices, PASS
func.func @operand_elsewhere(%x: tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@train, [{"dp"}, {}]>}) -> tensor<4x8xf32> {
  %0 = polymesh.transfer %x <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [0, 4] : [4, 8]},
    broadcast chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [4, 4]},
    broadcast chunk 0 devices [1, 3] {1 -> [3], [0, 4] : [4, 8]}
  ] : tensor<4x8xf32>
  %1 = arith.negf %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @operand_unplaced
// CHECK-SAME: (%arg0: tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
// CHECK-NOT: polymesh.reshard
// CHECK: polymesh.transfer %arg0
// EXEC-NEXT: @operand_unplaced: 1 leaf, 128 bytes moved, {{.*}} on 4 devices, PASS
func.func @operand_unplaced(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = polymesh.transfer %x <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [0, 4] : [4, 8]},
    broadcast chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [4, 4]},
    broadcast chunk 0 devices [1, 3] {1 -> [3], [0, 4] : [4, 8]}
  ] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// The operand is computed by an op that takes the source sharding
// backwards from the transfer.
// CHECK-LABEL: func.func @producer_placed_backwards
// CHECK: arith.addf %arg0, %arg0 {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>}
// CHECK-NOT: polymesh.reshard
// EXEC-NEXT: @producer_placed_backwards: 1 leaf, 128 bytes moved, {{.*}} PASS
func.func @producer_placed_backwards(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = arith.addf %x, %x : tensor<4x8xf32>
  %0 = polymesh.transfer %a <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [0, 4] : [4, 8]},
    broadcast chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [4, 4]},
    broadcast chunk 0 devices [1, 3] {1 -> [3], [0, 4] : [4, 8]}
  ] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
