// RUN: %python -c "import subprocess, sys; sys.exit(0 if subprocess.run(sys.argv[1:]).returncode in (0, 77) else 1)" polymesh-run %s --verify --backend=nccl | FileCheck %s
// RUN: not polymesh-run %s --backend=mpi 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// --backend=nccl runs the same verification on GPUs, one per device. Where
// there is none (or the build has no NCCL), polymesh-run says so and exits
// with 77, automake's "skipped": never a pass it did not check. With one GPU
// the permutation (two devices) is skipped the same way.
// CHECK: {{polymesh-run: skipped: (no CUDA device|this build has no NCCL backend)|1 passed, 0 failed|0 passed, 0 failed, 1 skipped}}
// UNKNOWN: error: unsupported --backend='mpi': use 'loopback' or 'nccl'

polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
polymesh.mesh @b = <["x"=2], device_ids=[1, 0]>

func.func @permute(%x: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}, {}]>}) {
  return %x : tensor<8x4xf32>
}
