// RUN: polymesh-run %s --verify | FileCheck %s

// Reshapes whose placements use sub-axes (test/Transforms/
// propagate-reshape-subaxes.mlir), run sharded and compared with the
// unsharded reference, bytes moved checked.

polymesh.mesh @m = <["a"=6, "b"=4]>
polymesh.mesh @odd = <["p"=2, "q"=3], device_ids=[31, 7, 19, 2, 40, 11]>

// The gcd split gathers only the (2)3 part of "a": 49,152 bytes where the
// whole dimension (the rule before) took 122,880.
// CHECK: @gcd_split: 1 leaf, 49152 bytes moved, {{.*}} on 24 devices, PASS
func.func @gcd_split(%v: tensor<96x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<4x24x64xf32> {
  %0 = tensor.expand_shape %v [[0, 1], [2]] output_shape [4, 24, 64] : tensor<96x64xf32> into tensor<4x24x64xf32>
  %1 = math.exp %0 : tensor<4x24x64xf32>
  return %1 : tensor<4x24x64xf32>
}

// Heads split out of a hidden dimension sharded over both axes of a mesh
// with arbitrary ids, then merged back: 0 bytes.
// CHECK: @heads: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
func.func @heads(%x: tensor<16x384xf32> {polymesh.sharding = #polymesh.sharding<@odd, [{}, {"p", "q"}]>}) -> tensor<16x384xf32> {
  %0 = tensor.expand_shape %x [[0], [1, 2]] output_shape [16, 12, 32] : tensor<16x384xf32> into tensor<16x12x32xf32>
  %1 = math.tanh %0 : tensor<16x12x32xf32>
  %2 = tensor.collapse_shape %1 [[0], [1, 2]] : tensor<16x12x32xf32> into tensor<16x384xf32>
  return %2 : tensor<16x384xf32>
}

// An axis of 6 split exactly over 2 x 3, then merged.
// CHECK: @exact_split: 2 leaves, 0 bytes moved, {{.*}} on 24 devices, PASS
func.func @exact_split(%v: tensor<6x40xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> (tensor<2x3x40xf32>, tensor<6x40xf32>) {
  %0 = tensor.expand_shape %v [[0, 1], [2]] output_shape [2, 3, 40] : tensor<6x40xf32> into tensor<2x3x40xf32>
  %1 = arith.negf %0 : tensor<2x3x40xf32>
  %2 = tensor.collapse_shape %1 [[0, 1], [2]] : tensor<2x3x40xf32> into tensor<6x40xf32>
  return %1, %2 : tensor<2x3x40xf32>, tensor<6x40xf32>
}
// CHECK: 3 passed, 0 failed
