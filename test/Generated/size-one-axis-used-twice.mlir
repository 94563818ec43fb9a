// Found by utils/gen-programs.py --seed 1 --avoid-known (module 9, compute);
// reduced by hand from @f9_12.
// Failure: opt and loopback: refused: 'polymesh.reshard' op cannot be
// planned: axis "x" is used more than once in the sharding.
// On a mesh axis of size 1, propagation gives the matmul's operand a
// sharding that uses "x" twice (an internal error after propagation); with
// "x"=2 the same function passes.
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu -o /dev/null
// RUN: polymesh-run %s --verify | FileCheck %s
// CHECK: @f: {{.*}}, PASS
// CHECK: 1 passed, 0 failed

polymesh.mesh @m1 = <["x"=1]>

func.func @f(%v1: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"x"}, {}]>}, %v2: tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"x"}, {}]>}) -> tensor<8x4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x4xf32>) -> tensor<8x4xf32>
  %v5 = linalg.matmul ins(%v1, %v2 : tensor<8x4xf32>, tensor<4x4xf32>) outs(%f : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %v5 : tensor<8x4xf32>
}
