// RUN: polymesh-run %s --verify | FileCheck %s

// Two forms Shardy writes, run bit for bit on the loopback backend at the
// lower bound (every destination device receives its tile minus what it
// holds): maximal shardings (`[]` on a mesh without axes, the whole tensor
// on one device) and unannotated values that only reshards place
// (replicated on the reshards' mesh, so that each reshard only slices).

polymesh.mesh @dev5 = <[], device_ids=[5]>
polymesh.mesh @dev2 = <[], device_ids=[2]>
polymesh.mesh @grid = <["x"=2, "y"=3], device_ids=[7, 5, 3, 1, 2, 0]>

// 16x9 f32 is 576 bytes; device 5 (position 1) keeps its 8x3 tile, 96 bytes.
// CHECK: @scatter: 1 leaf, 480 bytes moved, {{.*}} on 6 devices, PASS
func.func @scatter(%x: tensor<16x9xf32> {polymesh.sharding = #polymesh.sharding<@dev5, []>})
    -> (tensor<16x9xf32> {polymesh.sharding = #polymesh.sharding<@grid, [{"x"}, {"y"}]>}) {
  return %x : tensor<16x9xf32>
}

// 7x5x3 i32 is 420 bytes; device 2 (position 4) holds rows 3..5 and column
// 2 of the last dim, 60 bytes.
// CHECK: @gather: 1 leaf, 360 bytes moved, {{.*}} on 6 devices, PASS
func.func @gather(%x: tensor<7x5x3xi32> {polymesh.sharding = #polymesh.sharding<@grid, [{"y"}, {}, {"x"}]>})
    -> (tensor<7x5x3xi32> {polymesh.sharding = #polymesh.sharding<@dev2, []>}) {
  return %x : tensor<7x5x3xi32>
}

// Computation on the one device, then out to the grid and back to another
// single device: (512 - 96) + (512 - 96) bytes.
// CHECK: @compute_then_move: 1 leaf, 832 bytes moved, {{.*}} on 6 devices, PASS
func.func @compute_then_move(%x: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@dev5, []>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@dev2, []>}) {
  %y = arith.addf %x, %x : tensor<16x8xf32>
  %z = polymesh.reshard %y <@grid, [{"x", "y"}, {}]> : tensor<16x8xf32>
  %w = math.exp %z : tensor<16x8xf32>
  return %w : tensor<16x8xf32>
}

// One device to another, a rank-0 tensor and a rank-4 one.
// CHECK: @device_to_device: 2 leaves, 964 bytes moved, {{.*}} on 2 devices, PASS
func.func @device_to_device(%s: tensor<f32> {polymesh.sharding = #polymesh.sharding<@dev5, []>},
                            %t: tensor<2x3x4x5xf64> {polymesh.sharding = #polymesh.sharding<@dev2, []>})
    -> (tensor<f32> {polymesh.sharding = #polymesh.sharding<@dev2, []>},
        tensor<2x3x4x5xf64> {polymesh.sharding = #polymesh.sharding<@dev5, []>}) {
  return %s, %t : tensor<f32>, tensor<2x3x4x5xf64>
}

// A maximal value broadcast to every device of the grid: the five others
// each receive the whole 16x8 f32 tensor.
// CHECK: @replicate: 1 leaf, 2560 bytes moved, {{.*}} on 6 devices, PASS
func.func @replicate(%x: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@dev5, []>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@grid, [{}, {}]>}) {
  return %x : tensor<16x8xf32>
}

// CHECK: @only_resharded: 2 leaves, 0 bytes moved, {{.*}} on 6 devices, PASS
func.func @only_resharded(%x: tensor<16x9xf32>) -> (tensor<16x9xf32>, tensor<16x9xf32>) {
  %n = arith.negf %x : tensor<16x9xf32>
  %a = polymesh.reshard %n <@grid, [{"x"}, {"y"}]> : tensor<16x9xf32>
  %b = polymesh.reshard %n <@grid, [{"y"}, {}]> : tensor<16x9xf32>
  return %a, %b : tensor<16x9xf32>, tensor<16x9xf32>
}
// CHECK: 6 passed, 0 failed
