// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// A loop that indexes a value through a compound expression (a window's
// o + w, a stride's 2 * o) stays whole. A tile's loop counts from its own
// zero: a split o would read the whole input at the tile's o + w, the wrong
// place. Before, this propagated the split and the program computed wrong
// values with exit 0 (polymesh-run --verify: 12 of 16 elements differ).
// Loops indexed plainly keep their axes. Execution:
// test/Run/verify-indexed-ops.mlir.

polymesh.mesh @m = <["a"=4]>

// The sum over a sliding window of 4: the output's loop is whole, and the
// constraint on the result is met by a reshard after the op.
// CHECK-LABEL: func.func @window_sum
// CHECK: %[[SUM:.*]] = linalg.generic
// CHECK-SAME: polymesh.sharding = #polymesh.sharding<@m, [{}]>
// CHECK: polymesh.reshard %[[SUM]] <@m, [{"a"}]>
func.func @window_sum(%x: tensor<19xf32>) -> tensor<16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %w = tensor.empty() : tensor<4xi1>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0 + d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x, %w : tensor<19xf32>, tensor<4xi1>) outs(%acc : tensor<16xf32>) {
  ^bb0(%in: f32, %unused: i1, %o: f32):
    %s = arith.addf %in, %o : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %c = polymesh.sharding_constraint %r <@m, [{"a"}]> : tensor<16xf32>
  return %c : tensor<16xf32>
}

// -----

polymesh.mesh @m = <["data"=2, "model"=4]>

// 2x2 max pooling with stride 2 (the bridge's reduce_window): batch and
// channels are indexed plainly and keep their axes; the strided rows and
// columns are whole.
// CHECK-LABEL: func.func @max_pool
// CHECK: linalg.generic
// CHECK-SAME: polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}, {}, {"model"}]>
// CHECK-NOT: polymesh.reshard
// CHECK: return
func.func @max_pool(%x: tensor<4x8x8x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}, {}, {"model"}]>})
    -> tensor<4x4x4x16xf32> {
  %low = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<4x4x4x16xf32>
  %acc = linalg.fill ins(%low : f32) outs(%e : tensor<4x4x4x16xf32>) -> tensor<4x4x4x16xf32>
  %w = tensor.empty() : tensor<2x2xi1>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>,
                                        affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>,
                                        affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w : tensor<4x8x8x16xf32>, tensor<2x2xi1>) outs(%acc : tensor<4x4x4x16xf32>) {
  ^bb0(%in: f32, %unused: i1, %o: f32):
    %m = arith.maximumf %in, %o : f32
    linalg.yield %m : f32
  } -> tensor<4x4x4x16xf32>
  return %r : tensor<4x4x4x16xf32>
}

// -----

polymesh.mesh @m = <["data"=2, "model"=4]>

// Upstream's named convolution has the same maps: its batch and output
// channels keep their axes, its width is whole (the input is gathered
// along it, the output computed whole there).
// CHECK-LABEL: func.func @conv_1d
// CHECK: %[[IN:.*]] = polymesh.reshard %arg0 <@m, [{"data"}, {}, {}]>
// CHECK: linalg.conv_1d_nwc_wcf
// CHECK-SAME: polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}, {"model"}]>
// CHECK-SAME: ins(%[[IN]], %arg1
func.func @conv_1d(%x: tensor<4x18x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {"model"}, {}]>},
                   %f: tensor<3x8x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}, {"model"}]>})
    -> tensor<4x16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  %r = linalg.conv_1d_nwc_wcf {dilations = dense<1> : tensor<1xi64>, strides = dense<1> : tensor<1xi64>}
      ins(%x, %f : tensor<4x18x8xf32>, tensor<3x8x16xf32>) outs(%acc : tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  return %r : tensor<4x16x16xf32>
}
