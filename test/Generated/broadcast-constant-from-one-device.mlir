// Found by utils/gen-programs.py --seed 7 (module 2, compute); shrunk, then
// reduced by hand to the constant the folded `subi %x, %x` becomes.
// Failure: loopback: crash: exit -11 in polymesh::runtime::LoopbackState::post
// (memcpy in LoopbackBackend::broadcast, from polymesh_rt_broadcast).
// A dense constant placed on the one-device mesh @m1 and returned replicated
// on @m0: the CPU-lowered broadcast from device 6 segfaults; the NCCL path
// (--backend=nccl --simulate-gpus) passes. The shrunk module is the second
// function.
// RUN: polymesh-run %s --verify | FileCheck %s
// CHECK: @constant: {{.*}}, PASS
// CHECK: @folded_sub: {{.*}}, PASS
// CHECK: 2 passed, 0 failed

polymesh.mesh @m0 = <["dp"=2]>
polymesh.mesh @m1 = <[], device_ids=[6]>

func.func @constant() -> (tensor<2xi32> {polymesh.sharding = #polymesh.sharding<@m0, [{}]>}) {
  %c = arith.constant dense<0> : tensor<2xi32>
  %v1 = polymesh.sharding_constraint %c <@m1, [{}]> : tensor<2xi32>
  return %v1 : tensor<2xi32>
}

func.func @folded_sub(%v0: tensor<i32> {polymesh.sharding = #polymesh.sharding<@m1, []>}) -> (tensor<i32> {polymesh.sharding = #polymesh.sharding<@m0, []>}) {
  %v1 = arith.subi %v0, %v0 : tensor<i32>
  return %v1 : tensor<i32>
}
