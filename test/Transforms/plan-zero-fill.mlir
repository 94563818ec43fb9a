// RUN: polymesh-opt %s --polymesh-plan -split-input-file | FileCheck %s
// Regression: a zero fill writes its device's destination buffer and reads
// nothing, so the transfer verifier must not ask the device's source tile to
// hold the box (a fresh unreduced axis over a sharded source).
polymesh.mesh @m = <["a"=2, "b"=2]>
// CHECK-LABEL: func.func @fresh_from_sharded
// CHECK: zero_fill chunk 0 devices [2, 3] {2 -> [2], [0] : [8]} {3 -> [3], [0] : [8]}
func.func @fresh_from_sharded(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{}], unreduced={"a"}> : tensor<8xf32>
  return %0 : tensor<8xf32>
}
// -----
polymesh.mesh @m = <["a"=2, "b"=2]>
polymesh.mesh @n = <["c"=2], device_ids=[4, 5]>
// CHECK-LABEL: func.func @fresh_cross_mesh
// CHECK: zero_fill chunk 0 devices [2, 3] {2 -> [2], [0] : [4]} {3 -> [3], [4] : [8]}
func.func @fresh_cross_mesh(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@n, [{}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{"b"}], unreduced={"a"}> : tensor<8xf32>
  return %0 : tensor<8xf32>
}
