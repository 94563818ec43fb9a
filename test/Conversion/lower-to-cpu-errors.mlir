// RUN: polymesh-opt %s --polymesh-lower-to-cpu -split-input-file -verify-diagnostics
// RUN: echo "" | not polymesh-opt --polymesh-pipeline=target=rocm 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: error: polymesh-pipeline: target 'rocm' is not supported; use target=cpu or target=cuda

// --polymesh-lower-to-cpu needs partitioned programs.

polymesh.mesh @m = <["x"=2]>

func.func @unpartitioned(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{cannot be lowered to the CPU; run --polymesh-partition first}}
  %0 = polymesh.reshard %a <@m, [{"x"}]> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func private @not_a_plan(%x: tensor<4xf32>) -> tensor<4xf32>

func.func @f__part0(%rt: !llvm.ptr, %d: i64, %p: index, %a: tensor<2xf32>) -> tensor<2xf32> attributes {polymesh.partition_of = "f", polymesh.devices = array<i64: 0, 1>} {
  // expected-error @+1 {{plan @not_a_plan does not name a function marked 'polymesh.plan' whose body is one polymesh.transfer}}
  %0 = polymesh.exchange %a plan @not_a_plan on %rt, %d, %p : !llvm.ptr, tensor<2xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
