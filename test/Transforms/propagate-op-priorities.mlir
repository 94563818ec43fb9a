// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// Op priorities, as Shardy's: within each sweep, pass-through ops
// (elementwise ops, sharding constraints, barriers, groups) propagate to a
// fixed point before the others, so an elementwise chain takes the sharding
// of its elementwise neighbours (here the declared result's) before a dot
// proposes its own. Where the dot then conflicts, the fewest bytes decide
// (docs/propagation.md, section 8 and "Where Polymesh and Shardy differ").

polymesh.mesh @mesh = <["a"=2, "b"=2]>

// The adds take the result's [{?}, {"a", ?}] backward; the dot keeps its
// operand's rows and its result is resharded once (Shardy instead gathers
// %arg0: more bytes).
// CHECK-LABEL: func.func @element_wise_over_dot
// CHECK: %[[DOT:.*]] = linalg.matmul {polymesh.sharding = #polymesh.sharding<@mesh, [{"a"}, {}]>}
// CHECK-NEXT: %[[R:.*]] = polymesh.reshard %[[DOT]] <@mesh, [{?}, {"a", ?}]>
// CHECK-NEXT: %[[A1:.*]] = arith.addf %[[R]], %[[R]] {polymesh.sharding = #polymesh.sharding<@mesh, [{?}, {"a", ?}]>}
// CHECK-NEXT: %[[A2:.*]] = arith.addf %[[A1]], %[[A1]] {polymesh.sharding = #polymesh.sharding<@mesh, [{?}, {"a", ?}]>}
// CHECK-NEXT: return %[[A2]]
func.func @element_wise_over_dot(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{"a", ?}, {?}]>}, %arg1: tensor<8x8xf32>)
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{?}, {"a", ?}]>}) {
  %z = arith.constant dense<0.0> : tensor<8x8xf32>
  %0 = linalg.matmul ins(%arg0, %arg1 : tensor<8x8xf32>, tensor<8x8xf32>) outs(%z : tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = arith.addf %0, %0 : tensor<8x8xf32>
  %2 = arith.addf %1, %1 : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}

// -----

polymesh.mesh @mesh = <["a"=2, "b"=2]>

// A sharding constraint is pass-through too: it reaches the adds before the
// dot does.
// CHECK-LABEL: func.func @constraint
// CHECK: linalg.matmul {polymesh.sharding = #polymesh.sharding<@mesh, [{"a"}, {}]>}
// CHECK-NEXT: polymesh.reshard %{{.*}} <@mesh, [{?}, {"a", ?}]>
// CHECK-COUNT-2: arith.addf {{.*}} {polymesh.sharding = #polymesh.sharding<@mesh, [{?}, {"a", ?}]>}
// CHECK-NEXT: polymesh.sharding_constraint
func.func @constraint(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{"a", ?}, {?}]>}, %arg1: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %z = arith.constant dense<0.0> : tensor<8x8xf32>
  %0 = linalg.matmul ins(%arg0, %arg1 : tensor<8x8xf32>, tensor<8x8xf32>) outs(%z : tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = arith.addf %0, %0 : tensor<8x8xf32>
  %2 = arith.addf %1, %1 : tensor<8x8xf32>
  %3 = polymesh.sharding_constraint %2 <@mesh, [{?}, {"a", ?}]> : tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}

// -----

polymesh.mesh @mesh = <["a"=2, "b"=2]>

// Dots still propagate after the pass-through ops: the first dot's rows
// follow %arg0 into the second.
// CHECK-LABEL: func.func @chained_dots
// CHECK: %[[D1:.*]] = linalg.matmul {polymesh.sharding = #polymesh.sharding<@mesh, [{"a"}, {}]>} ins(%arg0, %arg1
// CHECK: linalg.matmul {polymesh.sharding = #polymesh.sharding<@mesh, [{"a"}, {}]>} ins(%[[D1]],
// CHECK: polymesh.reshard %{{.*}} <@mesh, [{?}, {"a", ?}]>
// CHECK-COUNT-2: arith.addf {{.*}} {polymesh.sharding = #polymesh.sharding<@mesh, [{?}, {"a", ?}]>}
func.func @chained_dots(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{"a", ?}, {?}]>}, %arg1: tensor<8x8xf32>)
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{?}, {"a", ?}]>}) {
  %z = arith.constant dense<0.0> : tensor<8x8xf32>
  %0 = linalg.matmul ins(%arg0, %arg1 : tensor<8x8xf32>, tensor<8x8xf32>) outs(%z : tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = linalg.matmul ins(%0, %0 : tensor<8x8xf32>, tensor<8x8xf32>) outs(%z : tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = arith.addf %1, %1 : tensor<8x8xf32>
  %3 = arith.addf %2, %2 : tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}

// -----

polymesh.mesh @mesh = <["a"=2, "b"=2]>

// The dot is the last op: the adds keep their arguments' shardings, the dot
// follows %0's rows (its result is resharded to the declared columns).
// CHECK-LABEL: func.func @dot_last
// CHECK: arith.addf %arg0, %arg0 {polymesh.sharding = #polymesh.sharding<@mesh, [{"a", ?}, {?}]>}
// CHECK: %[[D:.*]] = linalg.matmul {polymesh.sharding = #polymesh.sharding<@mesh, [{"a"}, {}]>}
// CHECK-NEXT: %[[R:.*]] = polymesh.reshard %[[D]] <@mesh, [{?}, {"a", ?}]>
// CHECK-NEXT: return %[[R]]
func.func @dot_last(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{"a", ?}, {?}]>}, %arg1: tensor<8x8xf32>)
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{?}, {"a", ?}]>}) {
  %z = arith.constant dense<0.0> : tensor<8x8xf32>
  %0 = arith.addf %arg0, %arg0 : tensor<8x8xf32>
  %1 = arith.addf %arg1, %arg1 : tensor<8x8xf32>
  %2 = linalg.matmul ins(%0, %1 : tensor<8x8xf32>, tensor<8x8xf32>) outs(%z : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}
