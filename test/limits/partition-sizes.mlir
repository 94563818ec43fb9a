// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition -split-input-file -verify-diagnostics

// The local code allocates its tiles and the lowering counts their bytes:
// a local type whose byte size overflows int64 is refused at the end of
// partitioning (docs/limits.md). Here every device of @m holds all 2^61
// f32 elements, 2^63 bytes, which used to partition and lower with byte
// counts that wrapped around. Global types may be larger when their tiles
// are not (test/limits/partition-huge-mesh.mlir: 2^64 bytes over 2^20
// devices); element counts that overflow are refused by the layouts.

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{type 'tensor<2305843009213693952xf32>' is too large: its size in bytes overflows int64}}
func.func @bytes(%a: tensor<2305843009213693952xf32>) -> tensor<2305843009213693952xf32>
    attributes {polymesh.ambient_mesh = @m} {
  return %a : tensor<2305843009213693952xf32>
}
