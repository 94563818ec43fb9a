// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-lower-to-cuda -split-input-file -verify-diagnostics

// The CUDA target lowers data movement only: an op that computes would
// need kernels of its own, so it is refused rather than run on the host.

polymesh.mesh @m = <["x"=2]>

func.func @computes(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
  // expected-error @+1 {{cannot be lowered to CUDA: the cuda target lowers data movement only for now}}
  %0 = arith.negf %a : tensor<8xf32>
  return %0 : tensor<8xf32>
}
