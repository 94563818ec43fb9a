// REQUIRES: nccl, gpu
// RUN: polymesh-run %s --verify --backend=nccl | FileCheck %s --check-prefixes=ONE,CHECK

// What the CUDA target runs on a machine with a single GPU: programs on one
// device, whose kernels (fills in every element size), constant uploads and
// device copies run for real there. lit reports it UNSUPPORTED on a machine
// without a GPU or a build without NCCL (lit.cfg.py probes the driver);
// cuda-simulated.test runs this file on simulated GPUs with the same lines.
// CHECK: 3 passed, 0 failed

polymesh.mesh @one = <[], device_ids=[0]>

// ONE: @fills: 3 leaves, 0 bytes moved, reference {{[0-9.]+}} ms, sharded {{[0-9.]+}} ms on 1 device, PASS
func.func @fills() -> (tensor<64x33xf32> {polymesh.sharding = #polymesh.sharding<@one, [{}, {}]>},
                       tensor<7xbf16> {polymesh.sharding = #polymesh.sharding<@one, [{}]>},
                       tensor<5x3xi1> {polymesh.sharding = #polymesh.sharding<@one, [{}, {}]>}) {
  %a = arith.constant 0.75 : f32
  %b = arith.constant -3.0 : bf16
  %e0 = tensor.empty() : tensor<64x33xf32>
  %e1 = tensor.empty() : tensor<7xbf16>
  %f0 = linalg.fill ins(%a : f32) outs(%e0 : tensor<64x33xf32>) -> tensor<64x33xf32>
  %f1 = linalg.fill ins(%b : bf16) outs(%e1 : tensor<7xbf16>) -> tensor<7xbf16>
  %t = arith.constant dense<true> : tensor<5x3xi1>
  return %f0, %f1, %t : tensor<64x33xf32>, tensor<7xbf16>, tensor<5x3xi1>
}

// ONE-NEXT: @table: 1 leaf, 0 bytes moved, reference {{[0-9.]+}} ms, sharded {{[0-9.]+}} ms on 1 device, PASS
func.func @table() -> (tensor<2x3xi64> {polymesh.sharding = #polymesh.sharding<@one, [{}, {}]>}) {
  %c = arith.constant dense<[[1, -2, 3], [40000000000, 5, -6]]> : tensor<2x3xi64>
  return %c : tensor<2x3xi64>
}

// ONE-NEXT: @reshape: 1 leaf, 0 bytes moved, reference {{[0-9.]+}} ms, sharded {{[0-9.]+}} ms on 1 device, PASS
func.func @reshape(%a: tensor<6x4xf16> {polymesh.sharding = #polymesh.sharding<@one, [{}, {}]>}) -> tensor<24xf16> {
  %c = tensor.collapse_shape %a [[0, 1]] : tensor<6x4xf16> into tensor<24xf16>
  return %c : tensor<24xf16>
}
// ONE-NEXT: 3 passed, 0 failed
