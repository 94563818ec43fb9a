// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-lower-to-cuda -split-input-file -verify-diagnostics
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cuda -split-input-file -verify-diagnostics

// The CUDA target moves and places data (exchanges, dense constants, fills
// of a constant, reshapes); an op that computes would need kernels of its
// own, so it is refused at the op rather than run on the host.

polymesh.mesh @m = <["x"=2]>

func.func @computes(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
  // expected-error @+1 {{cannot be lowered to CUDA: the cuda target moves and places data (exchanges, dense constants, fills of a constant, reshapes) but has no kernels for computation yet}}
  %0 = arith.negf %a : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// A fill whose value is read from a tensor, not a constant: reading it is
// refused (only partitioning's offset tables are read on the host).
polymesh.mesh @m = <["x"=2]>

func.func @fill_of_argument(%a: tensor<f32> {polymesh.sharding = #polymesh.sharding<@m, []>})
    -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) {
  // expected-error @+1 {{cannot be lowered to CUDA}}
  %s = tensor.extract %a[] : tensor<f32>
  %e = tensor.empty() : tensor<8xf32>
  %f = linalg.fill ins(%s : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  return %f : tensor<8xf32>
}

// -----

// A constant used by an op that computes is refused at that op.
polymesh.mesh @m = <["x"=2]>

func.func @constant_feeds_compute(%a: tensor<8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xi32> {
  %c = arith.constant dense<3> : tensor<8xi32>
  // expected-error @+1 {{cannot be lowered to CUDA}}
  %0 = arith.addi %a, %c : tensor<8xi32>
  return %0 : tensor<8xi32>
}
