// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// Control flow (issue 15, item 2): scf.for, scf.while, scf.if and
// scf.index_switch results, region arguments and yields take one sharding
// per carried value, written on the op as `polymesh.sharding` (a list where
// the op has several results, `unit` for a non-tensor one). A body that
// needs another sharding gets a reshard inside the region; an init or a
// yield in another sharding is moved at the boundary (before the loop,
// before the yield). Execution of the same
// forms: test/Run/verify-control-flow.mlir.

polymesh.mesh @m = <["x"=4, "y"=2]>

// The matmul's result is split over "x" and "y"; carrying it so moves no
// more bytes than carrying the init's layout (one gather over "y" per step
// either way), and it is more sharded, as JAX carries it: the init is
// split before the loop (a local slice) and each step gathers the carried
// value for the matmul.
// CHECK-LABEL: func.func @scan_dense
// CHECK-SAME: -> (tensor<96x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>})
// CHECK: %[[INIT:.*]] = polymesh.reshard %arg0 <@m, [{"x"}, {"y"}]>
// CHECK: %[[LOOP:.*]] = scf.for %{{.*}} iter_args(%[[H:.*]] = %[[INIT]])
// CHECK-NEXT: %[[G:.*]] = polymesh.reshard %[[H]] <@m, [{"x"}, {}]>
// CHECK: %[[P:.*]] = linalg.matmul {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>} ins(%[[G]], %arg1
// CHECK-NEXT: %[[T:.*]] = math.tanh %[[P]] {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}
// CHECK-NEXT: scf.yield %[[T]]
// CHECK: } {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}
// CHECK: return %[[LOOP]]
func.func @scan_dense(%h0: tensor<96x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>},
                      %w: tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>}) -> tensor<96x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%h = %h0) -> (tensor<96x64xf32>) {
    %e = tensor.empty() : tensor<96x64xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<96x64xf32>) -> tensor<96x64xf32>
    %p = linalg.matmul ins(%h, %w : tensor<96x64xf32>, tensor<64x64xf32>) outs(%z : tensor<96x64xf32>) -> tensor<96x64xf32>
    %t = math.tanh %p : tensor<96x64xf32>
    scf.yield %t : tensor<96x64xf32>
  }
  return %r : tensor<96x64xf32>
}

// -----

polymesh.mesh @m = <["x"=4, "y"=2]>

// The result's annotation owns the carried value: the init, split over "y",
// is moved once before the loop, not on every step.
// CHECK-LABEL: func.func @init_resharded
// CHECK: %[[INIT:.*]] = polymesh.reshard %arg0 <@m, [{"x"}, {}]>
// CHECK-NEXT: %[[LOOP:.*]] = scf.for %{{.*}} iter_args(%[[H:.*]] = %[[INIT]])
// CHECK-NEXT: math.exp %[[H]] {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK-NOT: polymesh.reshard
// CHECK: } {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
func.func @init_resharded(%h0: tensor<32x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>})
    -> (tensor<32x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%h = %h0) -> (tensor<32x16xf32>) {
    %e = math.exp %h : tensor<32x16xf32>
    scf.yield %e : tensor<32x16xf32>
  }
  return %r : tensor<32x16xf32>
}

// -----

polymesh.mesh @m = <["x"=4, "y"=2]>

// A scalar counter beside the tensor: one list entry per result, `unit` for
// the scalar, which every device computes.
// CHECK-LABEL: func.func @while_counter
// CHECK-SAME: -> (tensor<33x8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>})
// CHECK: scf.while
// CHECK: arith.cmpi slt, %{{.*}} : i32
// CHECK-NOT: polymesh.sharding
// CHECK: scf.condition
// CHECK: arith.addi %{{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>} : tensor<33x8xi32>
// CHECK: } attributes {polymesh.sharding = [unit, #polymesh.sharding<@m, [{"x"}, {"y"}]>]}
func.func @while_counter(%a: tensor<33x8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<33x8xi32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c5 = arith.constant 5 : i32
  %r:2 = scf.while (%k = %c0, %v = %a) : (i32, tensor<33x8xi32>) -> (i32, tensor<33x8xi32>) {
    %go = arith.cmpi slt, %k, %c5 : i32
    scf.condition(%go) %k, %v : i32, tensor<33x8xi32>
  } do {
  ^bb0(%k2: i32, %v2: tensor<33x8xi32>):
    %twice = arith.addi %v2, %v2 : tensor<33x8xi32>
    %k3 = arith.addi %k2, %c1 : i32
    scf.yield %k3, %twice : i32, tensor<33x8xi32>
  }
  return %r#1 : tensor<33x8xi32>
}

// -----

polymesh.mesh @m = <["x"=4, "y"=2]>

// Branches computed in different shardings: the then branch owns the
// result (it is first), the else branch's yield is moved to it.
// CHECK-LABEL: func.func @if_branches
// CHECK-SAME: -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>})
// CHECK: scf.if
// CHECK: %[[S:.*]] = arith.addf %arg0, %arg0 {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK-NEXT: scf.yield %[[S]]
// CHECK: } else {
// CHECK: %[[N:.*]] = arith.negf %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{}, {"x"}]>}
// CHECK-NEXT: %[[M:.*]] = polymesh.reshard %[[N]] <@m, [{"x"}, {}]>
// CHECK-NEXT: scf.yield %[[M]]
// CHECK: } {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
func.func @if_branches(%a: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>},
                       %b: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"x"}]>},
                       %flag: tensor<i1>) -> tensor<16x16xf32> {
  %c = tensor.extract %flag[] : tensor<i1>
  %r = scf.if %c -> (tensor<16x16xf32>) {
    %s = arith.addf %a, %a : tensor<16x16xf32>
    scf.yield %s : tensor<16x16xf32>
  } else {
    %n = arith.negf %b : tensor<16x16xf32>
    scf.yield %n : tensor<16x16xf32>
  }
  return %r : tensor<16x16xf32>
}

// An scf.if without results: its ops are placed as anywhere else.
// CHECK-LABEL: func.func @if_no_results
// CHECK: scf.if %arg1 {
// CHECK-NEXT: arith.negf %arg0 {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}
func.func @if_no_results(%a: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}, %c: i1) {
  scf.if %c {
    %n = arith.negf %a : tensor<16xf32>
  }
  return
}

// -----

polymesh.mesh @stage0 = <["x"=2], device_ids=[5, 2]>
polymesh.mesh @stage1 = <["x"=3], device_ids=[7, 0, 4]>

// Two pipeline stages: each carried value keeps its own mesh, and every
// step hands stage 0's value to stage 1 inside the body. Stage 1's value
// is carried split like the sum that feeds it (its init, replicated, is
// sliced once before the loop), so no step gathers it.
// CHECK-LABEL: func.func @pipeline_loop
// CHECK-SAME: -> (tensor<12x10xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"x"}, {}]>}, tensor<12x10xf32> {polymesh.sharding = #polymesh.sharding<@stage1, [{"x"}, {}]>})
// CHECK: %[[INIT:.*]] = polymesh.reshard %arg1 <@stage1, [{"x"}, {}]>
// CHECK: scf.for %{{.*}} iter_args(%[[X:.*]] = %arg0, %[[Y:.*]] = %[[INIT]])
// CHECK: %[[E:.*]] = math.exp %[[X]] {polymesh.sharding = #polymesh.sharding<@stage0, [{"x"}, {}]>}
// CHECK: %[[MOVED:.*]] = polymesh.reshard %[[E]] <@stage1, [{"x"}, {}]>
// CHECK: %[[YS:.*]] = polymesh.reshard %[[Y]] <@stage1, [{"x"}, {}]>
// CHECK: %[[SUM:.*]] = arith.addf %[[YS]], %[[MOVED]] {polymesh.sharding = #polymesh.sharding<@stage1, [{"x"}, {}]>}
// CHECK-NEXT: scf.yield %[[E]], %[[SUM]]
// CHECK: } {polymesh.sharding = [#polymesh.sharding<@stage0, [{"x"}, {}]>, #polymesh.sharding<@stage1, [{"x"}, {}]>]}
func.func @pipeline_loop(%a: tensor<12x10xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"x"}, {}]>},
                         %b: tensor<12x10xf32> {polymesh.sharding = #polymesh.sharding<@stage1, [{}, {}]>}) -> (tensor<12x10xf32>, tensor<12x10xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r:2 = scf.for %i = %c0 to %c3 step %c1 iter_args(%x = %a, %y = %b) -> (tensor<12x10xf32>, tensor<12x10xf32>) {
    %x2 = math.exp %x : tensor<12x10xf32>
    %moved = polymesh.reshard %x2 <@stage1, [{"x"}, {}]> : tensor<12x10xf32>
    %y2 = arith.addf %y, %moved : tensor<12x10xf32>
    scf.yield %x2, %y2 : tensor<12x10xf32>, tensor<12x10xf32>
  }
  return %r#0, %r#1 : tensor<12x10xf32>, tensor<12x10xf32>
}

// -----

polymesh.mesh @m = <["x"=4, "y"=2]>

// Nested loops, with an index carried beside the tensor.
// CHECK-LABEL: func.func @nested
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.mulf %{{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>}
// CHECK: } {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>}
// CHECK: arith.addi %{{.*}} : index
// CHECK: } {polymesh.sharding = [#polymesh.sharding<@m, [{"y"}, {}]>, unit]}
func.func @nested(%a: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>}) -> tensor<8x6xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %r:2 = scf.for %i = %c0 to %c2 step %c1 iter_args(%v = %a, %n = %c0) -> (tensor<8x6xf32>, index) {
    %inner = scf.for %j = %c0 to %c2 step %c1 iter_args(%w = %v) -> (tensor<8x6xf32>) {
      %s = arith.mulf %w, %w : tensor<8x6xf32>
      scf.yield %s : tensor<8x6xf32>
    }
    %n2 = arith.addi %n, %c1 : index
    scf.yield %inner, %n2 : tensor<8x6xf32>, index
  }
  return %r#0 : tensor<8x6xf32>
}

// -----

polymesh.mesh @m = <["x"=4, "y"=2]>

// A partial sum is never carried: the matmul contracting "y" is reduced
// (and split again over "y") before the yield, so the next step reads whole
// values.
// CHECK-LABEL: func.func @carried_partial_sum
// CHECK: scf.for %{{.*}} iter_args(%[[H:.*]] = %arg0)
// CHECK: linalg.fill {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK: %[[P:.*]] = linalg.matmul {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}], unreduced={"y"}>} ins(%[[H]], %arg1
// CHECK-NEXT: %[[R:.*]] = polymesh.reshard %[[P]] <@m, [{"x"}, {"y"}]>
// CHECK-NEXT: scf.yield %[[R]]
// CHECK: } {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}
func.func @carried_partial_sum(%h0: tensor<32x16xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                               %w: tensor<16x16xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>}) -> tensor<32x16xi32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0 : i32
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%h = %h0) -> (tensor<32x16xi32>) {
    %e = tensor.empty() : tensor<32x16xi32>
    %z = linalg.fill ins(%zero : i32) outs(%e : tensor<32x16xi32>) -> tensor<32x16xi32>
    %p = linalg.matmul ins(%h, %w : tensor<32x16xi32>, tensor<16x16xi32>) outs(%z : tensor<32x16xi32>) -> tensor<32x16xi32>
    scf.yield %p : tensor<32x16xi32>
  }
  return %r : tensor<32x16xi32>
}

// -----

polymesh.mesh @m = <["x"=4, "y"=2]>

// scf.index_switch (jax.lax.switch): the first case owns the result; the
// others' yields are moved to it, and a captured value is moved inside the
// case that reads it.
// CHECK-LABEL: func.func @switch_branches
// CHECK: scf.for %[[K:.*]] = %{{.*}} iter_args(%[[ACC:.*]] = %arg0)
// CHECK: scf.index_switch %[[K]] {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK: case 0 {
// CHECK-NEXT: arith.negf %[[ACC]] {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK: case 1 {
// CHECK-NEXT: %[[E:.*]] = math.exp %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>}
// CHECK-NEXT: %[[EM:.*]] = polymesh.reshard %[[E]] <@m, [{"x"}, {}]>
// CHECK-NEXT: arith.addf %[[EM]], %[[ACC]] {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK: default {
// CHECK-NEXT: %[[BM:.*]] = polymesh.reshard %arg1 <@m, [{"x"}, {}]>
// CHECK-NEXT: arith.mulf %[[ACC]], %[[BM]] {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK: } {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
func.func @switch_branches(%a: tensor<24x10xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>},
                           %b: tensor<24x10xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>}) -> tensor<24x10xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %r = scf.for %k = %c0 to %c3 step %c1 iter_args(%acc = %a) -> (tensor<24x10xf32>) {
    %next = scf.index_switch %k -> tensor<24x10xf32>
    case 0 {
      %n = arith.negf %acc : tensor<24x10xf32>
      scf.yield %n : tensor<24x10xf32>
    }
    case 1 {
      %e = math.exp %b : tensor<24x10xf32>
      %s = arith.addf %e, %acc : tensor<24x10xf32>
      scf.yield %s : tensor<24x10xf32>
    }
    default {
      %m = arith.mulf %acc, %b : tensor<24x10xf32>
      scf.yield %m : tensor<24x10xf32>
    }
    scf.yield %next : tensor<24x10xf32>
  }
  return %r : tensor<24x10xf32>
}

// -----

polymesh.mesh @m = <["x"=4, "y"=2]>

// A reshard of a value defined outside the loop moves the same bytes every
// step: it moves once, before the loop (7,168 bytes instead of 5 x 7,168).
// One inside a branch in the loop stays: the branch may not be taken.
// CHECK-LABEL: func.func @invariant_weight
// CHECK: %[[W:.*]] = polymesh.reshard %arg1 <@m, [{}, {}]>
// CHECK-NEXT: scf.for
// CHECK: linalg.matmul {{.*}} ins(%{{.*}}, %[[W]] :
// CHECK: scf.if
// CHECK-NEXT: polymesh.reshard %arg1 <@m, [{"x"}, {}]>
func.func @invariant_weight(%h0: tensor<32x16xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>},
                            %w: tensor<16x16xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {"x"}]>},
                            %flag: i1) -> (tensor<32x16xi32>, tensor<16x16xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %zero = arith.constant 0 : i32
  %r:2 = scf.for %i = %c0 to %c5 step %c1 iter_args(%h = %h0, %acc = %w) -> (tensor<32x16xi32>, tensor<16x16xi32>) {
    %wr = polymesh.reshard %w <@m, [{}, {}]> : tensor<16x16xi32>
    %e = tensor.empty() : tensor<32x16xi32>
    %z = linalg.fill ins(%zero : i32) outs(%e : tensor<32x16xi32>) -> tensor<32x16xi32>
    %p = linalg.matmul ins(%h, %wr : tensor<32x16xi32>, tensor<16x16xi32>) outs(%z : tensor<32x16xi32>) -> tensor<32x16xi32>
    %b = scf.if %flag -> (tensor<16x16xi32>) {
      %m = polymesh.reshard %w <@m, [{"x"}, {}]> : tensor<16x16xi32>
      %s = arith.addi %m, %acc : tensor<16x16xi32>
      scf.yield %s : tensor<16x16xi32>
    } else {
      scf.yield %acc : tensor<16x16xi32>
    }
    scf.yield %p, %b : tensor<32x16xi32>, tensor<16x16xi32>
  }
  return %r#0, %r#1 : tensor<32x16xi32>, tensor<16x16xi32>
}

// -----

polymesh.mesh @m = <["x"=4, "y"=2]>

// @scan_dense with the loop's sharding written by the user: it is kept
// (the carried value is not switched to the more sharded layout); the
// yield is moved to it instead.
// CHECK-LABEL: func.func @pinned_loop
// CHECK-SAME: -> (tensor<96x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>})
// CHECK: scf.for %{{.*}} iter_args(%{{.*}} = %arg0)
// CHECK: %[[T:.*]] = math.tanh
// CHECK-NEXT: %[[M:.*]] = polymesh.reshard %[[T]] <@m, [{"x"}, {}]>
// CHECK-NEXT: scf.yield %[[M]]
// CHECK: } {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
func.func @pinned_loop(%h0: tensor<96x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>},
                  %w: tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>}) -> tensor<96x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%h = %h0) -> (tensor<96x64xf32>) {
    %e = tensor.empty() : tensor<96x64xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<96x64xf32>) -> tensor<96x64xf32>
    %p = linalg.matmul ins(%h, %w : tensor<96x64xf32>, tensor<64x64xf32>) outs(%z : tensor<96x64xf32>) -> tensor<96x64xf32>
    %t = math.tanh %p : tensor<96x64xf32>
    scf.yield %t : tensor<96x64xf32>
  } {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
  return %r : tensor<96x64xf32>
}
