// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition | FileCheck %s --check-prefix=PART

// scf.for, scf.while, scf.if and scf.index_switch partitioned and run on every device (issue
// 15, items 2-3): loops carry each device's tile, a plan inside a body runs
// on every iteration (the bytes moved below count one run of each plan),
// and every device takes the same decisions. Propagation of the same forms:
// test/Transforms/propagate-control-flow.mlir. Integer elements for the
// loop that carries a sharded matmul: --verify compares values carried
// through a loop exactly, and a float sum split over "y" is reordered.

// CHECK: @scan_dense: 1 leaf, 24576 bytes moved, {{.*}} on 8 devices, PASS
// PART-LABEL: func.func @scan_dense__part0
// PART: scf.for %{{.*}} iter_args(%[[H:.*]] = %{{.*}}) -> (tensor<24x32xf32>)
// PART-NEXT: %[[G:.*]] = polymesh.exchange %[[H]] plan @scan_dense__plan1 on %{{.*}} : !llvm.ptr, tensor<24x32xf32> -> tensor<24x64xf32>
// PART: linalg.matmul ins(%[[G]], %{{.*}} : tensor<24x64xf32>, tensor<64x32xf32>)
// PART-SAME: -> tensor<24x32xf32>
// PART: scf.yield %{{.*}} : tensor<24x32xf32>
// CHECK-NEXT: @while_counter: 1 leaf, 0 bytes moved, {{.*}} on 8 devices, PASS
// PART-LABEL: func.func @while_counter__part0
// PART: scf.while (%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : (i32, tensor<9x4xi32>) -> (i32, tensor<9x4xi32>)
// PART-LABEL: func.func @while_counter__part1
// PART: scf.while (%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : (i32, tensor<6x4xi32>) -> (i32, tensor<6x4xi32>)
// CHECK-NEXT: @if_branches: 1 leaf, 1536 bytes moved, {{.*}} on 8 devices, PASS
// PART-LABEL: func.func @if_branches__part0
// PART: scf.if %{{.*}} -> (tensor<4x16xf32>)
// PART: } else {
// PART: polymesh.exchange %{{.*}} plan @if_branches__plan0 {{.*}} tensor<16x4xf32> -> tensor<4x16xf32>
// CHECK-NEXT: @pipeline_loop: 2 leaves, 480 bytes moved, {{.*}} on 5 devices, PASS
// PART-LABEL: func.func @pipeline_loop__part0
// PART-SAME: polymesh.devices = array<i64: 0, 4, 7>
// PART-LABEL: func.func @pipeline_loop__part1
// PART-SAME: polymesh.devices = array<i64: 2, 5>
// PART: scf.for {{.*}} -> (tensor<6x10xf32>, tensor<0x0xf32>)
// CHECK-NEXT: @nested: 1 leaf, 0 bytes moved, {{.*}} on 8 devices, PASS
// CHECK-NEXT: @init_resharded: 1 leaf, 2048 bytes moved, {{.*}} on 8 devices, PASS
// CHECK-NEXT: @carried_partial_sum: 1 leaf, 2048 bytes moved, {{.*}} on 8 devices, PASS
// CHECK-NEXT: @switch_branches: 1 leaf, 1920 bytes moved, {{.*}} on 8 devices, PASS
// PART-LABEL: func.func @switch_branches__part0
// PART: scf.index_switch %{{.*}} -> tensor<6x10xf32>
// CHECK-NEXT: @counter_from_tile: 1 leaf, 192 bytes moved, {{.*}} on 4 devices, PASS
// CHECK-NEXT: @while_types: 1 leaf, 512 bytes moved, {{.*}} on 8 devices, PASS
// CHECK-NEXT: @deep: 1 leaf, 336 bytes moved, {{.*}} on 8 devices, PASS
// CHECK-NEXT: @invariant_weight: 1 leaf, 7168 bytes moved, {{.*}} on 8 devices, PASS
// CHECK-NEXT: 12 passed, 0 failed

polymesh.mesh @m = <["x"=4, "y"=2]>
polymesh.mesh @stage0 = <["x"=2], device_ids=[5, 2]>
polymesh.mesh @stage1 = <["x"=3], device_ids=[7, 0, 4]>
polymesh.mesh @q = <["x"=4]>

// Four steps of h = tanh(h @ w): the matmul's result is split over "y" but
// the carried h is not, so each step gathers it over "y" inside the loop.
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

// A while loop with a scalar counter beside the tensor it carries.
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

// Branches computed in different shardings: each yield is moved to the
// result's.
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

// Two pipeline stages on meshes with odd device ids: the loop carries one
// value on each, and every step hands stage 0's value to stage 1.
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

// Nested loops, and an index carried beside a tensor.
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
// The result's annotation owns the carried value: the init arrives split
// over "y" and is moved once, before the loop.
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
// A partial sum is never carried: the matmul contracting "y" is reduced
// (and split again over "y") before the yield, so the next step reads whole
// values.
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

// jax.lax.switch inside fori_loop: step k takes case k, so every branch runs
// once; the branches compute in different shardings and each yield is moved
// to the result's (the first case owns it).
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

// A while loop whose counter starts from an element of a sharded tensor:
// propagation gathers the tensor for the extract, so every device decides
// alike.
func.func @counter_from_tile(%a: tensor<16xi32> {polymesh.sharding = #polymesh.sharding<@q, [{"x"}]>}) -> tensor<16xi32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : i32
  %start = tensor.extract %a[%c0] : tensor<16xi32>
  %r:2 = scf.while (%k = %start, %v = %a) : (i32, tensor<16xi32>) -> (i32, tensor<16xi32>) {
    %go = arith.cmpi slt, %k, %c1 : i32
    scf.condition(%go) %k, %v : i32, tensor<16xi32>
  } do {
  ^bb0(%k2: i32, %v2: tensor<16xi32>):
    %twice = arith.addi %v2, %v2 : tensor<16xi32>
    %k3 = arith.addi %k2, %c1 : i32
    scf.yield %k3, %twice : i32, tensor<16xi32>
  }
  return %r#1 : tensor<16xi32>
}

// A while loop whose after region carries other values, in another order,
// than its before region (the condition negates the tensor it passes).
func.func @while_types(%a: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}) -> tensor<8x4xf32> {
  %c0 = arith.constant 0 : i32
  %c3 = arith.constant 3 : i32
  %c1 = arith.constant 1 : i32
  %r:2 = scf.while (%k = %c0, %v = %a) : (i32, tensor<8x4xf32>) -> (tensor<8x4xf32>, i32) {
    %go = arith.cmpi slt, %k, %c3 : i32
    %n = arith.negf %v : tensor<8x4xf32>
    scf.condition(%go) %n, %k : tensor<8x4xf32>, i32
  } do {
  ^bb0(%w: tensor<8x4xf32>, %k2: i32):
    %k3 = arith.addi %k2, %c1 : i32
    %t = polymesh.reshard %w <@m, [{}, {"y"}]> : tensor<8x4xf32>
    %e = math.exp %t : tensor<8x4xf32>
    scf.yield %k3, %e : i32, tensor<8x4xf32>
  }
  return %r#0 : tensor<8x4xf32>
}

// A while loop inside an if inside a for, the if deciding on a flag every
// device holds.
func.func @deep(%a: tensor<6x6xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {"x"}]>}, %f: tensor<i1>) -> tensor<6x6xi32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %z = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %flag = tensor.extract %f[] : tensor<i1>
  %r = scf.for %i = %c0 to %c2 step %c1 iter_args(%acc = %a) -> (tensor<6x6xi32>) {
    %b = scf.if %flag -> (tensor<6x6xi32>) {
      %w:2 = scf.while (%k = %z, %v = %acc) : (i32, tensor<6x6xi32>) -> (i32, tensor<6x6xi32>) {
        %go = arith.cmpi slt, %k, %one : i32
        scf.condition(%go) %k, %v : i32, tensor<6x6xi32>
      } do {
      ^bb0(%k2: i32, %v2: tensor<6x6xi32>):
        %s = arith.addi %v2, %v2 : tensor<6x6xi32>
        %t = polymesh.reshard %s <@m, [{"x"}, {}]> : tensor<6x6xi32>
        %k3 = arith.addi %k2, %one : i32
        scf.yield %k3, %t : i32, tensor<6x6xi32>
      }
      scf.yield %w#1 : tensor<6x6xi32>
    } else {
      %m2 = arith.muli %acc, %acc : tensor<6x6xi32>
      scf.yield %m2 : tensor<6x6xi32>
    }
    scf.yield %b : tensor<6x6xi32>
  }
  return %r : tensor<6x6xi32>
}

// A weight resharded in the body, though defined outside the loop: the
// all-gather is hoisted before the loop and runs once (7,168 bytes).
func.func @invariant_weight(%h0: tensor<32x16xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>},
                            %w: tensor<16x16xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {"x"}]>}) -> tensor<32x16xi32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %zero = arith.constant 0 : i32
  %r = scf.for %i = %c0 to %c5 step %c1 iter_args(%h = %h0) -> (tensor<32x16xi32>) {
    %wr = polymesh.reshard %w <@m, [{}, {}]> : tensor<16x16xi32>
    %e = tensor.empty() : tensor<32x16xi32>
    %z = linalg.fill ins(%zero : i32) outs(%e : tensor<32x16xi32>) -> tensor<32x16xi32>
    %p = linalg.matmul ins(%h, %wr : tensor<32x16xi32>, tensor<16x16xi32>) outs(%z : tensor<32x16xi32>) -> tensor<32x16xi32>
    scf.yield %p : tensor<32x16xi32>
  }
  return %r : tensor<32x16xi32>
}
