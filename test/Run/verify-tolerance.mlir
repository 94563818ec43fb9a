// RUN: polymesh-run %s --verify --entry=sum_sq | FileCheck %s --check-prefix=SUM
// RUN: not polymesh-run %s --verify=exact --entry=sum_sq | FileCheck %s --check-prefix=SUM-EXACT
// RUN: polymesh-run %s --verify --entry=matmul_bf16 | FileCheck %s --check-prefix=BF16
// RUN: not polymesh-run %s --verify=exact --entry=matmul_bf16 | FileCheck %s --check-prefix=BF16-EXACT
// RUN: polymesh-run %s --verify --entry=unreduced_f32 | FileCheck %s --check-prefix=UNREDUCED
// RUN: polymesh-run %s --verify --entry=scaled_sum | FileCheck %s --check-prefix=SCALED
// RUN: not polymesh-run %s --verify=exact --entry=scaled_sum | FileCheck %s --check-prefix=SCALED-EXACT
// RUN: polymesh-run %s --verify --entry=empty | FileCheck %s --check-prefix=EMPTY
// RUN: polymesh-run %s --verify --sharded-path=executor --entry=empty | FileCheck %s --check-prefix=EMPTY
// RUN: polymesh-run --help | FileCheck %s --check-prefix=HELP

// How --verify compares floats (docs/execution.md). A float sum over a
// sharded dimension adds each device's terms, then the partials: another
// order than the reference's loop, so it may round differently. Such a
// result passes within 2 gamma_{n-1} sum|terms| (+ half an ulp for f16 and
// bf16); everything else, and everything under --verify=exact, must match
// bit for bit. The figures are deterministic: fixed inputs, fixed orders.

polymesh.mesh @m42 = <["x"=4, "y"=2]>
polymesh.mesh @m4 = <["x"=4]>
polymesh.mesh @m22 = <["x"=2, "y"=2]>
polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=2], device_ids=[2, 3]>

// sum(x * x) over all of a 64x64 tile grid of a 4x2 mesh: each device sums
// its 16x32 block, the all-reduce adds the 8 partials. 4096 terms up to 64:
// the sum (87412.48) needs more than f32's 24 bits, the orders round
// differently by 43 ulp, 0.79% of the bound (2 gamma_4095 * 87412 = 42.7).
// The result is replicated: all 8 devices' copies differ alike. The moved
// copy of x next to it is still compared bit for bit (not listed).
// SUM:      @sum_sq: 2 leaves, 56 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS (within bound: result #0: max 43 ulp, rel 3.8e-06, 8 of 8 elements differ, largest error 0.79% of its bound)
// SUM-NEXT: 1 passed, 0 failed
// SUM-EXACT:      @sum_sq: 2 leaves, 56 bytes moved, reference {{.*}} FAIL: result #0: device 0: value at []: expected 87412.48 (0x47aaba3d), got 87412.14 (0x47aaba12) (8 of 8 elements differ, in 8 of 8 tiles: device 0 1 of 1, device 1 1 of 1, device 2 1 of 1, device 3 1 of 1, ...)
// SUM-EXACT-NEXT: 0 passed, 1 failed
func.func @sum_sq(%x: tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m42, [{"x"}, {"y"}]>})
    -> (tensor<f32> {polymesh.sharding = #polymesh.sharding<@m42, []>},
        tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m42, [{"x"}, {"y"}]>}) {
  %sq = arith.mulf %x, %x : tensor<64x64xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%sq : tensor<64x64xf32>) outs(%f : tensor<f32>) dimensions = [0, 1]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  return %r, %x : tensor<f32>, tensor<64x64xf32>
}

// bf16 matmul, contracting dimension (64) sharded 4 ways, all-reduced to a
// replicated result. bf16 adds round at 2^-8, so the orders differ in most
// elements, by up to 118 ulp where terms cancel (relative error 0.46 on a
// small element); the bound (2 gamma_63 = 0.65 of sum|a b|) is far away.
// BF16:      @matmul_bf16: 1 leaf, 3072 bytes moved, reference {{.*}} on 4 devices, PASS (within bound: result #0: max 118 ulp, rel 0.46, 880 of 1024 elements differ, largest error 0.43% of its bound)
// BF16-EXACT: @matmul_bf16: {{.*}} FAIL: result #0: device 0: value at [0, 1]: expected 6.59375 (0x40d3), got 6.375 (0x40cc) (880 of 1024 elements differ, in 4 of 4 tiles: device 0 220 of 256, device 1 220 of 256, device 2 220 of 256, device 3 220 of 256)
func.func @matmul_bf16(%a: tensor<16x64xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>},
                       %b: tensor<64x16xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<16x16xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<16x16xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<16x16xbf16>) -> tensor<16x16xbf16>
  %r = linalg.matmul ins(%a, %b : tensor<16x64xbf16>, tensor<64x16xbf16>) outs(%f : tensor<16x16xbf16>) -> tensor<16x16xbf16>
  return %r : tensor<16x16xbf16>
}

// A result left as partial sums: the comparison adds each reduction group's
// partials, so it is a reordered sum too. Here the f32 terms and sums are
// exact, so nothing differs, but the bound was in force.
// UNREDUCED: @unreduced_f32: 1 leaf, 0 bytes moved, reference {{.*}} on 4 devices, PASS (within bound: result #0: max 0 ulp, rel 0, 0 of 64 elements differ, largest error 0% of its bound)
func.func @unreduced_f32(%a: tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>},
                         %b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"y"}, {}]>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>}) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// A reordered sum that feeds more arithmetic: its difference could be
// amplified without limit (here it is only doubled), so no bound holds for
// the result. The lock-step comparison (docs/execution.md) checks the sum
// where it is made, within its bound, and continues the reference from the
// sharded run's sum: the doubled result then matches bit for bit. Compared
// from the inputs alone (--verify=exact, as before lock-step) it differs.
// SCALED: @scaled_sum: 1 leaf, 56 bytes moved, {{.*}} on 8 devices, PASS (within bound: the sum at verify-tolerance.mlir:{{[0-9]+}}:8: max 43 ulp, rel 3.8e-06, 8 of 8 elements differ, largest error 0.79% of its bound)
// SCALED-NEXT: 1 passed, 0 failed
// SCALED-EXACT: @scaled_sum: {{.*}} FAIL: result #0: device 0: value at []: expected 174824.95 (0x482aba3d), got 174824.28 (0x482aba12)
func.func @scaled_sum(%x: tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m42, [{"x"}, {"y"}]>})
    -> (tensor<f32> {polymesh.sharding = #polymesh.sharding<@m42, []>}) {
  %sq = arith.mulf %x, %x : tensor<64x64xf32>
  %z = arith.constant 0.0 : f32
  %two = arith.constant dense<2.0> : tensor<f32>
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.reduce ins(%sq : tensor<64x64xf32>) outs(%f : tensor<f32>) dimensions = [0, 1]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  %d = arith.mulf %r, %two : tensor<f32>
  return %d : tensor<f32>
}

// A zero-size tensor resharded across meshes of different devices: nothing
// moves, and both paths pass (the executor used to refuse its empty plan).
// EMPTY: @empty: 1 leaf, 0 bytes moved, reference {{.*}} on 4 devices, PASS{{$}}
func.func @empty(%x: tensor<0x8xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<0x8xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"y"}]>}) {
  %r = polymesh.reshard %x <@b, [{}, {"y"}]> : tensor<0x8xf32>
  return %r : tensor<0x8xf32>
}

// HELP:      --verify
// HELP:        =exact
