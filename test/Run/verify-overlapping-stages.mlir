// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: %if nccl %{ polymesh-run %s --verify --backend=nccl --simulate-gpus | FileCheck %s %}

// A partial sum over 64 devices (reversed ids) summed twice, onto a 16-device
// mesh and onto a 48-device one, and the first sum broadcast back from the
// 16 devices to the 64 in groups of four: devices outside the 16 go on to
// the broadcasts' communicators while the 16 still run the sums' copies.
// Under mpirun (nccl-processes.test) the groups span processes, and every
// process's GPUs must progress without its host (the differential
// generator's seed 20261208, module 2, @f2_1 hung there until the simulated
// GPUs of each process got a progress thread of their own).

polymesh.mesh @m1 = <["c"=24, "dp"=2], device_ids=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48]>
polymesh.mesh @m2 = <["c"=16]>
polymesh.mesh @m4 = <["z"=32, "dp"=2], device_ids=[63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]>

// CHECK: @sum_twice_then_broadcast: 2 leaves, 1200 bytes moved, {{.*}} on 64 devices, PASS
// CHECK-NEXT: 1 passed, 0 failed
func.func @sum_twice_then_broadcast(%partial: tensor<f32> {polymesh.sharding = #polymesh.sharding<@m4, [], unreduced={"dp", "z"}>})
    -> (tensor<f32> {polymesh.sharding = #polymesh.sharding<@m1, []>}, tensor<f32> {polymesh.sharding = #polymesh.sharding<@m4, []>}) {
  %onto16 = polymesh.reshard %partial <@m2, []> : tensor<f32>
  return %partial, %onto16 : tensor<f32>, tensor<f32>
}
