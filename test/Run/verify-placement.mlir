// RUN: polymesh-run %s --verify | FileCheck %s

// --verify on functions that place data without computing on it: dense
// constants (a splat, and tables partitioning slices per device), fills of a
// constant, and reshapes feeding a transfer. The CPU lowering runs them like
// any op; the CUDA lowering turns them into fill kernels, uploads of a host
// image, strided copies and aliases (cuda-simulated.test runs this file on
// simulated GPUs with the same CHECK lines).

polymesh.mesh @m = <["x"=2]>
polymesh.mesh @m23 = <["x"=2, "y"=3]>

// CHECK: @replicated_table: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 2 devices, PASS
func.func @replicated_table() -> (tensor<2x3xi32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  %c = arith.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>
  return %c : tensor<2x3xi32>
}

// Each device slices its rows out of the whole table.
// CHECK-NEXT: @sharded_table: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 2 devices, PASS
func.func @sharded_table() -> (tensor<4x2xbf16> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}) {
  %c = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.5, -8.0]]> : tensor<4x2xbf16>
  return %c : tensor<4x2xbf16>
}

// A reshaped constant and a reshaped argument, sharded over two axes, the
// constant's tiles strided in three dimensions.
// CHECK-NEXT: @reshaped_table: 2 leaves, 240 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 6 devices, PASS
func.func @reshaped_table(%a: tensor<6x4x5xi8> {polymesh.sharding = #polymesh.sharding<@m23, [{"y"}, {}, {}]>})
    -> (tensor<6x4x5xi8> {polymesh.sharding = #polymesh.sharding<@m23, [{"y"}, {"x"}, {}]>},
        tensor<6x4x5xi8> {polymesh.sharding = #polymesh.sharding<@m23, [{}, {"x"}, {}]>}) {
  %c0 = arith.constant dense<[-50, -43, -36, -29, -22, -15, -8, -1, 6, 13, 20, 27, 34, 41, 48, -45, -38, -31, -24, -17, -10, -3, 4, 11, 18, 25, 32, 39, 46, -47, -40, -33, -26, -19, -12, -5, 2, 9, 16, 23, 30, 37, 44, -49, -42, -35, -28, -21, -14, -7, 0, 7, 14, 21, 28, 35, 42, 49, -44, -37, -30, -23, -16, -9, -2, 5, 12, 19, 26, 33, 40, 47, -46, -39, -32, -25, -18, -11, -4, 3, 10, 17, 24, 31, 38, 45, -48, -41, -34, -27, -20, -13, -6, 1, 8, 15, 22, 29, 36, 43, -50, -43, -36, -29, -22, -15, -8, -1, 6, 13, 20, 27, 34, 41, 48, -45, -38, -31, -24, -17]> : tensor<120xi8>
  %c = tensor.expand_shape %c0 [[0, 1, 2]] output_shape [6, 4, 5] : tensor<120xi8> into tensor<6x4x5xi8>
  return %c, %a : tensor<6x4x5xi8>, tensor<6x4x5xi8>
}

// CHECK-NEXT: @reshape_then_move: 1 leaf, 48 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 2 devices, PASS
func.func @reshape_then_move(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}) -> tensor<2x2x6xf32> {
  %e = tensor.expand_shape %a [[0, 1], [2]] output_shape [2, 2, 6] : tensor<4x6xf32> into tensor<2x2x6xf32>
  %t = polymesh.reshard %e <@m, [{}, {}, {"x"}]> : tensor<2x2x6xf32>
  return %t : tensor<2x2x6xf32>
}

// Fills of constants in every element size; i1 is one byte per element.
// CHECK-NEXT: @fills: 4 leaves, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 2 devices, PASS
func.func @fills() -> (tensor<8xi1> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>},
                       tensor<3x5xf16> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"x"}]>},
                       tensor<4xf64> {polymesh.sharding = #polymesh.sharding<@m, [{}]>},
                       tensor<6x2xi64> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}) {
  %t = arith.constant true
  %h = arith.constant -2.5 : f16
  %d = arith.constant 0.1 : f64
  %e0 = tensor.empty() : tensor<8xi1>
  %e1 = tensor.empty() : tensor<3x5xf16>
  %e2 = tensor.empty() : tensor<4xf64>
  %f0 = linalg.fill ins(%t : i1) outs(%e0 : tensor<8xi1>) -> tensor<8xi1>
  %f1 = linalg.fill ins(%h : f16) outs(%e1 : tensor<3x5xf16>) -> tensor<3x5xf16>
  %f2 = linalg.fill ins(%d : f64) outs(%e2 : tensor<4xf64>) -> tensor<4xf64>
  %big = arith.constant dense<-7> : tensor<6x2xi64>
  return %f0, %f1, %f2, %big : tensor<8xi1>, tensor<3x5xf16>, tensor<4xf64>, tensor<6x2xi64>
}
// CHECK-NEXT: 5 passed, 0 failed
