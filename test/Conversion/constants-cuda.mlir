// RUN: polymesh-opt %s --polymesh-pipeline=target=cuda | FileCheck %s

// Data placement in several functions on the CUDA target: host images of
// constants and their offset tables are named per function and numbered in
// program order (the CUDA lowering does not bufferize). test/determinism.test
// runs this file ten times per target; polymesh-run --verify passes it on
// both backends.

// CHECK-DAG: llvm.mlir.global private constant @table__part0__constant1(
// CHECK-DAG: llvm.mlir.global private constant @same_table__part0__constant2(
// CHECK-DAG: llvm.mlir.global private constant @same_table__part1__constant8(
// CHECK-DAG: llvm.mlir.global private constant @reshaped__part0__constant10(
// CHECK-DAG: llvm.mlir.global private constant @moved__part1__constant14(
// CHECK-LABEL: llvm.func @table__part0(
// CHECK-LABEL: llvm.func @same_table__part0(
// CHECK-LABEL: llvm.func @fills__part0(
// CHECK-LABEL: llvm.func @reshaped__part0(
// CHECK-LABEL: llvm.func @moved__part0(

polymesh.mesh @m = <["x"=2]>
polymesh.mesh @n = <["y"=2, "z"=2]>

func.func @table(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>})
    -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>},
        tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) {
  %w = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>
  return %a, %w : tensor<8xf32>, tensor<8xf32>
}

func.func @same_table(%a: tensor<4x4xi32> {polymesh.sharding = #polymesh.sharding<@n, [{"y"}, {"z"}]>})
    -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>},
        tensor<4x4xi32> {polymesh.sharding = #polymesh.sharding<@n, [{}, {"z"}]>},
        tensor<4x4xi32> {polymesh.sharding = #polymesh.sharding<@n, [{"z"}, {"y"}]>}) {
  %w = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>
  %c = arith.constant dense<[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]> : tensor<4x4xi32>
  return %w, %a, %c : tensor<8xf32>, tensor<4x4xi32>, tensor<4x4xi32>
}

func.func @fills() -> (tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@n, [{"y"}, {"z"}]>},
                       tensor<8xi8> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) {
  %ones = arith.constant dense<1.0> : tensor<4x4xf32>
  %seven = arith.constant 7 : i8
  %empty = tensor.empty() : tensor<8xi8>
  %f = linalg.fill ins(%seven : i8) outs(%empty : tensor<8xi8>) -> tensor<8xi8>
  return %ones, %f : tensor<4x4xf32>, tensor<8xi8>
}

func.func @reshaped(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>})
    -> (tensor<2x2x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}, {}]>},
        tensor<4x2xi64> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"x"}]>}) {
  %e = tensor.expand_shape %a [[0, 1], [2]] output_shape [2, 2, 6] : tensor<4x6xf32> into tensor<2x2x6xf32>
  %t = arith.constant dense<[[1, 2], [3, 4], [5, 6], [7, 8]]> : tensor<4x2xi64>
  return %e, %t : tensor<2x2x6xf32>, tensor<4x2xi64>
}

func.func @moved() -> (tensor<8x2xbf16> {polymesh.sharding = #polymesh.sharding<@n, [{"y", "z"}, {}]>}) {
  %c = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [1.5, 2.5], [3.5, 4.5], [5.5, 6.5], [7.5, 8.5]]> : tensor<8x2xbf16>
  %0 = polymesh.sharding_constraint %c <@m, [{"x"}, {}]> : tensor<8x2xbf16>
  return %0 : tensor<8x2xbf16>
}
