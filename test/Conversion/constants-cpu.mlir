// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu | FileCheck %s
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu --mlir-disable-threading | FileCheck %s

// Dense constants in several functions get their globals in program order,
// the same in every run (issue 13, item 13): module bufferization used to
// create them in the order it visited functions, which came from a map
// keyed by address, so their order and `_N` suffixes changed from run to
// run (10 different outputs in 10 runs). A value used in two functions
// (@affine's %w in @scale, its %b in @mixed) has one global. Globals are
// placed at the top of the module as they are made: last made first.
// test/determinism.test runs this file ten times per target.

// CHECK-LABEL: module {
// CHECK-NEXT: llvm.mlir.global private constant @__constant_4x1xindex(dense<{{\[\[}}0], [4], [0], [0]]>
// CHECK-NEXT: llvm.mlir.global private constant @__constant_4x2xindex_3(dense<{{\[\[}}0, 0], [0, 0], [2, 0], [2, 0]]>
// CHECK-NEXT: llvm.mlir.global private constant @__constant_4x4xi32_2(dense<{{\[\[}}4, 3, 2, 1],
// CHECK-NEXT: llvm.mlir.global private constant @__constant_8xf32_1(dense<[8.000000e+00,
// CHECK-NEXT: llvm.mlir.global private constant @__constant_4x2xindex(dense<{{\[\[}}0, 0], [0, 2], [2, 0], [2, 2]]>
// CHECK-NEXT: llvm.mlir.global private constant @__constant_4x4xi32(dense<{{\[\[}}1, 2, 3, 4],
// CHECK-NEXT: llvm.mlir.global private constant @__constant_2x2xi32(dense<3>
// CHECK-NEXT: llvm.mlir.global private constant @__constant_8xf32_0(dense<[1.000000e+00,
// CHECK-NEXT: llvm.mlir.global private constant @__constant_2x1xindex(dense<{{\[\[}}0], [4]]>
// CHECK-NEXT: llvm.mlir.global private constant @__constant_8xf32(dense<[5.000000e-01,
// CHECK-NOT: @__constant_
// CHECK-LABEL: llvm.func @affine__part0(
// CHECK: llvm.mlir.addressof @__constant_8xf32 :
// CHECK: llvm.mlir.addressof @__constant_2x1xindex :
// CHECK: llvm.mlir.addressof @__constant_8xf32_0 :
// CHECK-LABEL: llvm.func @scale__part0(
// CHECK: llvm.mlir.addressof @__constant_8xf32_0 :
// CHECK-LABEL: llvm.func @integers__part0(
// CHECK: llvm.mlir.addressof @__constant_4x4xi32 :
// CHECK-LABEL: llvm.func @tosa__part0(
// CHECK: llvm.mlir.addressof @__constant_8xf32_1 :
// CHECK-LABEL: llvm.func @mixed__part0(
// CHECK: llvm.mlir.addressof @__constant_4x4xi32_2 :
// CHECK: llvm.mlir.addressof @__constant_8xf32 :

polymesh.mesh @m = <["x"=2]>
polymesh.mesh @n = <["y"=2, "z"=2]>

// Two constants, one of them also in @scale (one global for both).
func.func @affine(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>})
    -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) {
  %w = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>
  %b = arith.constant dense<[0.5, 0.25, 0.125, 1.5, 2.5, 3.5, 4.5, 5.5]> : tensor<8xf32>
  %0 = arith.mulf %a, %w : tensor<8xf32>
  %1 = arith.addf %0, %b : tensor<8xf32>
  return %1 : tensor<8xf32>
}

func.func @scale(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>})
    -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) {
  %w = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>
  %0 = arith.mulf %a, %w : tensor<8xf32>
  return %0 : tensor<8xf32>
}

func.func @integers(%a: tensor<4x4xi32> {polymesh.sharding = #polymesh.sharding<@n, [{"y"}, {"z"}]>})
    -> (tensor<4x4xi32> {polymesh.sharding = #polymesh.sharding<@n, [{}, {"z"}]>}) {
  %c = arith.constant dense<[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]> : tensor<4x4xi32>
  %s = arith.constant dense<3> : tensor<4x4xi32>
  %0 = arith.addi %a, %c : tensor<4x4xi32>
  %1 = arith.muli %0, %s : tensor<4x4xi32>
  return %1 : tensor<4x4xi32>
}

func.func @tosa(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>})
    -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>}) {
  %c = "tosa.const"() {values = dense<[8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]> : tensor<8xf32>} : () -> tensor<8xf32>
  %0 = tosa.add %a, %c : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

func.func @mixed(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>},
                 %i: tensor<4x4xi32> {polymesh.sharding = #polymesh.sharding<@n, [{"y"}, {}]>})
    -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>},
        tensor<4x4xi32> {polymesh.sharding = #polymesh.sharding<@n, [{"y"}, {}]>}) {
  %b = arith.constant dense<[0.5, 0.25, 0.125, 1.5, 2.5, 3.5, 4.5, 5.5]> : tensor<8xf32>
  %c = arith.constant dense<[[4, 3, 2, 1], [8, 7, 6, 5], [12, 11, 10, 9], [16, 15, 14, 13]]> : tensor<4x4xi32>
  %0 = arith.subf %a, %b : tensor<8xf32>
  %1 = arith.subi %i, %c : tensor<4x4xi32>
  return %0, %1 : tensor<8xf32>, tensor<4x4xi32>
}
