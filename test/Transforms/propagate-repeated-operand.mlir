// RUN: polymesh-opt %s --polymesh-propagate 2>/dev/null | FileCheck %s
// RUN: polymesh-run %s --verify | FileCheck %s --check-prefix=EXEC

// An op that reads one value twice and is placed away from it: every use is
// rewired to the moved value, not only the first (issue 13, item 1). Before
// the fix the second use kept %arg0 and partition failed on a type mismatch,
// or, where the types happened to agree, computed on the wrong tile.

polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=4], device_ids=[2, 3, 4, 5]>

// CHECK-LABEL: func.func @add_twice_pinned
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@b, [{"y"}, {}]>
// CHECK-NEXT: arith.addf %[[R]], %[[R]] {polymesh.sharding = #polymesh.sharding<@b, [{"y"}, {}]>}
// EXEC: @add_twice_pinned: 1 leaf, 256 bytes moved, {{.*}} on 6 devices, PASS
func.func @add_twice_pinned(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = arith.addf %x, %x {polymesh.sharding = #polymesh.sharding<@b, [{"y"}, {}]>} : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Three uses, two of them the same value, on an op pinned to a 1-D mesh
// over other devices.
// CHECK-LABEL: func.func @select_thrice
// CHECK-DAG: %[[X:.*]] = polymesh.reshard %arg1 <@b, [{"y"}, {}]>
// CHECK-DAG: %[[C:.*]] = polymesh.reshard %arg0 <@b, [{"y"}, {}]>
// CHECK: arith.select %[[C]], %[[X]], %[[X]]
// EXEC: @select_thrice: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} PASS
func.func @select_thrice(%c: tensor<8x8xi1> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>},
                         %x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@a, [{}, {"x"}]>}) -> tensor<8x8xf32> {
  %0 = arith.select %c, %x, %x {polymesh.sharding = #polymesh.sharding<@b, [{"y"}, {}]>} : tensor<8x8xi1>, tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// x @ x where the op sits on the other mesh: both operands move, each to
// the layout its side of the contraction needs.
// CHECK-LABEL: func.func @matmul_self
// CHECK-DAG: %[[L:.*]] = polymesh.reshard %arg0 <@b, [{"y"}, {}]>
// CHECK-DAG: %[[RR:.*]] = polymesh.reshard %arg0 <@b, [{}, {}]>
// CHECK: linalg.matmul {{.*}}ins(%[[L]], %[[RR]] :
// EXEC: @matmul_self: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} PASS
func.func @matmul_self(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %e = tensor.empty() : tensor<8x8xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %0 = linalg.matmul {polymesh.sharding = #polymesh.sharding<@b, [{"y"}, {}]>} ins(%x, %x : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
