// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// Propagation barriers (`polymesh.propagation_barrier`, as Shardy's
// `sdy.propagation_barrier`): a sharding crosses only in the allowed
// direction. A side that the barrier keeps from being placed is replicated
// on the other side's mesh (the barrier stops axes, not the mesh a value
// lives on). After propagation the barrier is gone: its operand, or a
// reshard where the two sides differ.

polymesh.mesh @m = <["a"=2, "b"=4]>

// FORWARD: the argument's sharding reaches the computation after it.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: polymesh.propagation_barrier
// CHECK: arith.negf %arg0 {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}
func.func @forward(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<16x16xf32> {
  %y = polymesh.propagation_barrier %x allowed_direction=FORWARD : tensor<16x16xf32>
  %z = arith.negf %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// BACKWARD does not let it through: what follows is replicated on @m, and
// the barrier becomes the reshard that replicates it.
// CHECK-LABEL: func.func @forward_blocked
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@m, [{}, {}]>
// CHECK: arith.negf %[[R]] {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}
func.func @forward_blocked(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<16x16xf32> {
  %y = polymesh.propagation_barrier %x allowed_direction=BACKWARD : tensor<16x16xf32>
  %z = arith.negf %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// BACKWARD: the declared result reaches the unannotated argument.
// CHECK-LABEL: func.func @backward
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>}
// CHECK-NOT: polymesh.reshard
// CHECK: arith.negf %arg0 {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>}
func.func @backward(%x: tensor<16x16xf32>) -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>}) {
  %y = polymesh.propagation_barrier %x allowed_direction=BACKWARD : tensor<16x16xf32>
  %z = arith.negf %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// FORWARD does not let it back: the argument is replicated, and the
// barrier becomes the reshard that splits it.
// CHECK-LABEL: func.func @backward_blocked
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@m, [{}, {"b"}]>
// CHECK: arith.negf %[[R]]
func.func @backward_blocked(%x: tensor<16x16xf32>) -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>}) {
  %y = polymesh.propagation_barrier %x allowed_direction=FORWARD : tensor<16x16xf32>
  %z = arith.negf %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// -----

polymesh.mesh @m1 = <["a"=2, "b"=4]>
polymesh.mesh @m2 = <["c"=4], device_ids=[8, 9, 10, 11]>

// NONE between two annotated sides: each keeps its own, and the barrier
// becomes the reshard between them (here across meshes).
// CHECK-LABEL: func.func @none
// CHECK: arith.negf %arg0 {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>}
// CHECK: %[[R:.*]] = polymesh.reshard %{{.*}} <@m2, [{"c"}, {}]>
// CHECK: math.exp %[[R]] {polymesh.sharding = #polymesh.sharding<@m2, [{"c"}, {}]>}
func.func @none(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"c"}, {}]>}) {
  %n = arith.negf %x : tensor<16x16xf32>
  %y = polymesh.propagation_barrier %n allowed_direction=NONE : tensor<16x16xf32>
  %z = math.exp %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// BOTH is no barrier: both sides' shardings flow through it, and the
// value moves once, where it moves without the barrier (before the exp,
// the declared result pulling it there).
// CHECK-LABEL: func.func @both
// CHECK: arith.negf %arg0 {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>}
// CHECK: %[[R:.*]] = polymesh.reshard %{{.*}} <@m2, [{"c"}, {}]>
// CHECK: math.exp %[[R]] {polymesh.sharding = #polymesh.sharding<@m2, [{"c"}, {}]>}
// CHECK-NEXT: return
func.func @both(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"c"}, {}]>}) {
  %n = arith.negf %x : tensor<16x16xf32>
  %y = polymesh.propagation_barrier %n allowed_direction=BOTH : tensor<16x16xf32>
  %z = math.exp %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}
