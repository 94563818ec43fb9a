// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition -split-input-file -verify-diagnostics

// Partitioning needs tile sizes, allocations and the lowering byte counts:
// a type whose element count or byte size overflows int64 is refused before
// anything is partitioned (docs/limits.md). Propagation places such types
// (test/limits/overflow.mlir); 2^61 f32 elements used to partition and
// lower with byte counts that wrapped around.

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{type 'tensor<2305843009213693952xf32>' is too large: its size in bytes overflows int64}}
func.func @bytes(%a: tensor<2305843009213693952xf32>) -> tensor<2305843009213693952xf32>
    attributes {polymesh.ambient_mesh = @m} {
  return %a : tensor<2305843009213693952xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>
func.func @splat() -> tensor<4xf32> attributes {polymesh.ambient_mesh = @m} {
  %c = arith.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{type 'tensor<4294967296x4294967297xf32>' is too large: its element count overflows int64}}
  %0 = arith.constant dense<1.0> : tensor<4294967296x4294967297xf32>
  return %c : tensor<4xf32>
}
