// REQUIRES: nccl, gpus-2
// RUN: polymesh-run %s --verify --backend=nccl | FileCheck %s

// --backend=nccl runs the same verification on GPUs, one per device: a
// permutation of two devices, so it needs two GPUs. lit reports it
// UNSUPPORTED elsewhere (lit.cfg.py probes the driver's device count);
// backend-skips.test checks what polymesh-run says where it cannot run.
// CHECK: @permute: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} PASS
// CHECK: 1 passed, 0 failed

polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
polymesh.mesh @b = <["x"=2], device_ids=[1, 0]>

func.func @permute(%x: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}, {}]>}) {
  return %x : tensor<8x4xf32>
}
