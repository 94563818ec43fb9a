// RUN: polymesh-opt %s --polymesh-lower-to-cuda -split-input-file -verify-diagnostics

// --polymesh-lower-to-cuda needs partitioned programs, and says which target
// refused the op (it used to say "the CPU").

polymesh.mesh @m = <["x"=2]>

func.func @unpartitioned(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{cannot be lowered to CUDA; run --polymesh-partition first}}
  %0 = polymesh.reshard %a <@m, [{"x"}]> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["x"=2]>

func.func @constraint(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{cannot be lowered to CUDA; run --polymesh-partition first}}
  %0 = polymesh.sharding_constraint %a <@m, [{}]> : tensor<4xf32>
  return %0 : tensor<4xf32>
}
