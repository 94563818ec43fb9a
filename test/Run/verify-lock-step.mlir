// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: not polymesh-run %s --verify=exact --entry=sgd_step | FileCheck %s --check-prefix=EXACT

// Reordered float sums that feed more arithmetic: a data-parallel SGD step
// (the gradient is summed over the batch, split over "data", then applied),
// a Megatron MLP with its residual add (the second matmul contracts the
// split hidden dimension) and two sums in a chain. --verify checks each sum
// where it is made, within its rounding bound, and continues the reference
// from the sharded run's sums, so that every result after them matches bit
// for bit (docs/execution.md, "lock-step"). Compared from the inputs alone
// (--verify=exact) the SGD step's weights differ by an ulp or so. Eight
// devices with odd ids; "model" splits 24 features 12/12 and 6 columns 3/3.
// The execution unit test ShardedRunnerTest.LockStepContinuesFromTheShardedSums
// injects a wrong sum and disagreeing copies and sees both fail.

// CHECK: @sgd_step: 2 leaves, 5040 bytes moved, {{.*}} on 8 devices, PASS (within bound: the sum at verify-lock-step.mlir:{{[0-9]+}}:8: max 512 ulp, rel 5e-05, 440 of 576 elements differ, largest error 3.3% of its bound; the sum at verify-lock-step.mlir:{{[0-9]+}}:12: max 1 ulp, rel 6.1e-08, 8 of 8 elements differ, largest error 0.13% of its bound)
// CHECK-NEXT: @megatron_mlp_residual: 1 leaf, 3072 bytes moved, {{.*}} on 8 devices, PASS (within bound: the sum at verify-lock-step.mlir:{{[0-9]+}}:8: max 120 ulp, rel 1.3e-05, 502 of 768 elements differ, largest error 2.7% of its bound)
// CHECK-NEXT: @chained_sums: 1 leaf, 15360 bytes moved, {{.*}} on 8 devices, PASS (within bound: the sum at verify-lock-step.mlir:{{[0-9]+}}:9: max 0 ulp, rel 0, 0 of 2048 elements differ, largest error 0% of its bound; the sum at verify-lock-step.mlir:{{[0-9]+}}:8: max 32 ulp, rel 2.6e-06, 136 of 768 elements differ, largest error 1.7% of its bound)
// CHECK-NEXT: 3 passed, 0 failed

// EXACT: @sgd_step: {{.*}} FAIL: result #0 (leaf "w"): device 0: value at [0, 0]: expected 35.804317 (0x420f379f), got 35.80431 (0x420f379d)

polymesh.mesh @m = <["data"=4, "model"=2], device_ids=[9, 3, 14, 1, 6, 11, 0, 5]>

// Linear regression: pred = x w, err = pred - y, g = x^T err (a sum over the
// 64 examples, 16 per "data" row), w' = w - g / 16, loss = sum(err^2) / 512.
func.func @sgd_step(%x: tensor<64x24xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>},
                    %y: tensor<64x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>},
                    %w: tensor<24x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"model"}]>})
    -> (tensor<24x6xf32> {polymesh.leaf = "w", polymesh.sharding = #polymesh.sharding<@m, [{}, {"model"}]>},
        tensor<f32> {polymesh.leaf = "loss"}) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x6xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<64x6xf32>) -> tensor<64x6xf32>
  %pred = linalg.matmul ins(%x, %w : tensor<64x24xf32>, tensor<24x6xf32>) outs(%f : tensor<64x6xf32>) -> tensor<64x6xf32>
  %err = arith.subf %pred, %y : tensor<64x6xf32>
  %ge = tensor.empty() : tensor<24x6xf32>
  %gf = linalg.fill ins(%zero : f32) outs(%ge : tensor<24x6xf32>) -> tensor<24x6xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(i, j, b) -> (b, i)>, affine_map<(i, j, b) -> (b, j)>, affine_map<(i, j, b) -> (i, j)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %err : tensor<64x24xf32>, tensor<64x6xf32>) outs(%gf : tensor<24x6xf32>) {
  ^bb0(%xv: f32, %ev: f32, %acc: f32):
    %p = arith.mulf %xv, %ev : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<24x6xf32>
  %rate = arith.constant dense<0.0625> : tensor<24x6xf32>
  %step = arith.mulf %g, %rate : tensor<24x6xf32>
  %w2 = arith.subf %w, %step : tensor<24x6xf32>
  %sq = arith.mulf %err, %err : tensor<64x6xf32>
  %le = tensor.empty() : tensor<f32>
  %lf = linalg.fill ins(%zero : f32) outs(%le : tensor<f32>) -> tensor<f32>
  %total = linalg.reduce ins(%sq : tensor<64x6xf32>) outs(%lf : tensor<f32>) dimensions = [0, 1]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  %scale = arith.constant dense<0.001953125> : tensor<f32>
  %loss = arith.mulf %total, %scale : tensor<f32>
  return %w2, %loss : tensor<24x6xf32>, tensor<f32>
}

// Megatron's MLP: the hidden layer is split over "model" by columns, the
// output matmul sums over it (partials per device), then the residual.
func.func @megatron_mlp_residual(%x: tensor<16x24xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>},
                                 %w1: tensor<24x48xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"model"}]>},
                                 %w2: tensor<48x24xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"model"}, {}]>})
    -> (tensor<16x24xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>}) {
  %zero = arith.constant 0.0 : f32
  %he = tensor.empty() : tensor<16x48xf32>
  %hf = linalg.fill ins(%zero : f32) outs(%he : tensor<16x48xf32>) -> tensor<16x48xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<16x24xf32>, tensor<24x48xf32>) outs(%hf : tensor<16x48xf32>) -> tensor<16x48xf32>
  %zeros = arith.constant dense<0.0> : tensor<16x48xf32>
  %relu = arith.maximumf %h, %zeros : tensor<16x48xf32>
  %ye = tensor.empty() : tensor<16x24xf32>
  %yf = linalg.fill ins(%zero : f32) outs(%ye : tensor<16x24xf32>) -> tensor<16x24xf32>
  %y = linalg.matmul ins(%relu, %w2 : tensor<16x48xf32>, tensor<48x24xf32>) outs(%yf : tensor<16x24xf32>) -> tensor<16x24xf32>
  %out = arith.addf %x, %y : tensor<16x24xf32>
  return %out : tensor<16x24xf32>
}

// Two sums in a chain, both over split dimensions: the second is checked
// against a reference that made it from the first one's sharded value.
func.func @chained_sums(%a: tensor<16x24xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"data"}]>},
                        %b: tensor<24x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>},
                        %c: tensor<16x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"model"}, {}]>})
    -> (tensor<16x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<16x16xf32>
  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<16x16xf32>) -> tensor<16x16xf32>
  %ab = linalg.matmul ins(%a, %b : tensor<16x24xf32>, tensor<24x16xf32>) outs(%f1 : tensor<16x16xf32>) -> tensor<16x16xf32>
  %t = math.tanh %ab : tensor<16x16xf32>
  %e2 = tensor.empty() : tensor<16x6xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<16x6xf32>) -> tensor<16x6xf32>
  %r = linalg.matmul ins(%t, %c : tensor<16x16xf32>, tensor<16x6xf32>) outs(%f2 : tensor<16x6xf32>) -> tensor<16x6xf32>
  %r2 = arith.mulf %r, %r : tensor<16x6xf32>
  return %r2 : tensor<16x6xf32>
}
