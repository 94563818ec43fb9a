// RUN: polymesh-run %s --verify | FileCheck %s

// Programs with Shardy's propagation controls (user priorities, sharding
// groups, barriers) and open declared results, run sharded on the loopback
// devices and compared with the unsharded reference (the controls mean
// nothing there): what they make propagation decide computes the same
// values.

polymesh.mesh @m = <["a"=2, "b"=4]>
polymesh.mesh @m2 = <["c"=4], device_ids=[8, 9, 10, 11]>

// CHECK: @three_rounds: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 8 devices, PASS
func.func @three_rounds(%x: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}p0, {?}]>},
                        %w: tensor<32x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}, {"b"}p1]>},
                        %z: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}p2, {}]>}) -> tensor<16x16xf32> {
  %init = arith.constant dense<0.0> : tensor<16x16xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<16x32xf32>, tensor<32x16xf32>) outs(%init : tensor<16x16xf32>) -> tensor<16x16xf32>
  %r = arith.addf %mm, %z : tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}

// CHECK: @priority_beats_bytes: 1 leaf, 3072 bytes moved, {{.*}} PASS
func.func @priority_beats_bytes(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}p0, {}]>},
                                %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}p1, {}]>}) -> tensor<16x16xf32> {
  %z = arith.addf %x, %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// CHECK: @group_spread: 2 leaves, 0 bytes moved, {{.*}} PASS
func.func @group_spread(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>},
                        %w: tensor<16x16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  %a = math.exp %w : tensor<16x16xf32>
  %b = arith.negf %a : tensor<16x16xf32>
  polymesh.sharding_group %x group_id=0 : tensor<16x16xf32>
  polymesh.sharding_group %a group_id=0 : tensor<16x16xf32>
  return %x, %b : tensor<16x16xf32>, tensor<16x16xf32>
}

// CHECK: @group_conflict: 1 leaf, 1024 bytes moved, {{.*}} PASS
func.func @group_conflict(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                          %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}) -> tensor<16x16xf32> {
  polymesh.sharding_group %x group_id=5 : tensor<16x16xf32>
  polymesh.sharding_group %y group_id=5 : tensor<16x16xf32>
  %z = arith.addf %x, %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// CHECK: @barrier_blocked: 1 leaf, 0 bytes moved, {{.*}} PASS
func.func @barrier_blocked(%x: tensor<16x16xf32>) -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>})
    attributes {polymesh.ambient_mesh = @m} {
  %y = polymesh.propagation_barrier %x allowed_direction=FORWARD : tensor<16x16xf32>
  %z = arith.negf %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// CHECK: @barrier_across_meshes: 1 leaf, 1024 bytes moved, {{.*}} on 12 devices, PASS
func.func @barrier_across_meshes(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"c"}, {}]>}) {
  %n = arith.negf %x : tensor<16x16xf32>
  %y = polymesh.propagation_barrier %n allowed_direction=NONE : tensor<16x16xf32>
  %z = math.exp %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// CHECK: @open_result: 1 leaf, 0 bytes moved, {{.*}} PASS
func.func @open_result(%y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {?}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}, {"b", ?}]>}) {
  %z = arith.negf %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}
// Op priorities: the GELU-like tail takes the declared result's columns
// before the dot proposes its rows.
// CHECK: @op_priorities: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 8 devices, PASS
func.func @op_priorities(%x: tensor<64x96xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", ?}, {?}]>},
                         %w: tensor<96x40xf32>)
    -> (tensor<64x40xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}, {"b", ?}]>}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<64x40xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<64x40xf32>) -> tensor<64x40xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<64x96xf32>, tensor<96x40xf32>) outs(%init : tensor<64x40xf32>) -> tensor<64x40xf32>
  %t = math.tanh %mm : tensor<64x40xf32>
  %r = arith.mulf %t, %mm : tensor<64x40xf32>
  return %r : tensor<64x40xf32>
}
// CHECK: 8 passed, 0 failed
