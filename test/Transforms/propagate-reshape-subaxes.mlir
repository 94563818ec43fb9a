// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// Reshapes split and merge axes into sub-axes (`"a":(m)k`), as Shardy does:
// a dimension's axes fill its factors major to minor; an axis larger than a
// factor is split, and where a factor and an axis share only part of their
// sizes (gcd), the factor takes that part and the rest of the axis stays
// with the tensor (Shardy's overflow axes).

polymesh.mesh @m = <["a"=6, "b"=4]>

// 6 = 2 x 3: the axis of size 6 is split exactly into (1)2 and (2)3, and
// merged back by the collapse: nothing moves.
// CHECK-LABEL: func.func @exact_split
// CHECK: tensor.expand_shape {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a":(1)2}, {"a":(2)3}, {}]>}
// CHECK: tensor.collapse_shape {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}
// CHECK-NOT: polymesh.reshard
// CHECK: return
func.func @exact_split(%v: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> (tensor<2x3x4xf32>, tensor<6x4xf32>) {
  %0 = tensor.expand_shape %v [[0, 1], [2]] output_shape [2, 3, 4] : tensor<6x4xf32> into tensor<2x3x4xf32>
  %1 = tensor.collapse_shape %0 [[0, 1], [2]] : tensor<2x3x4xf32> into tensor<6x4xf32>
  return %0, %1 : tensor<2x3x4xf32>, tensor<6x4xf32>
}

// -----

polymesh.mesh @m = <["a"=6, "b"=4]>

// 96 = 4 x 24 over an axis of 6: the major factor (4) shares 2 with the
// axis, so it takes "a":(1)2; the rest, "a":(2)3, cannot shard the minor
// factor while the major one is not full, and is gathered. Before this rule
// the whole dimension was gathered: 122,880 bytes against 49,152
// (test/Run/verify-reshape-subaxes.mlir).
// CHECK-LABEL: func.func @gcd_split
// CHECK-NEXT: %[[R:.*]] = polymesh.reshard %arg0 <@m, [{"a":(1)2}, {"b"}]>
// CHECK-NEXT: tensor.expand_shape %[[R]] {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a":(1)2}, {}, {"b"}]>}
func.func @gcd_split(%v: tensor<96x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<4x24x64xf32> {
  %0 = tensor.expand_shape %v [[0, 1], [2]] output_shape [4, 24, 64] : tensor<96x64xf32> into tensor<4x24x64xf32>
  return %0 : tensor<4x24x64xf32>
}

// -----

polymesh.mesh @m = <["a"=6, "b"=4]>

// Backward: a result sharded on a sub-axis pair gives the merged axis to the
// collapsed operand.
// CHECK-LABEL: func.func @backward
// CHECK-SAME: %arg0: tensor<12x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK-NOT: polymesh.reshard
// CHECK: return
func.func @backward(%v: tensor<12x8xf32>)
    -> (tensor<2x6x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b":(1)2}, {"b":(2)2}, {}]>}) {
  %0 = tensor.expand_shape %v [[0, 1], [2]] output_shape [2, 6, 8] : tensor<12x8xf32> into tensor<2x6x8xf32>
  return %0 : tensor<2x6x8xf32>
}

// -----

polymesh.mesh @m = <["a"=6, "b"=4]>

// Sizes with no common factor (an axis of 4 over a major factor of 3) give
// the factor nothing: the dimension is gathered, as in Shardy.
// CHECK-LABEL: func.func @coprime
// CHECK-NEXT: polymesh.reshard %arg0 <@m, [{}]>
func.func @coprime(%v: tensor<12xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}]>}) -> tensor<3x4xf32> {
  %0 = tensor.expand_shape %v [[0, 1]] output_shape [3, 4] : tensor<12xf32> into tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
