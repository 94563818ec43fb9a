// RUN: polymesh-opt %s "--polymesh-pipeline=target=cpu devices=2,3,4" -split-input-file | FileCheck %s --check-prefixes=CHECK,CPU --enable-var-scope
// RUN: polymesh-opt %s "--polymesh-pipeline=target=cuda devices=2,3,4" -split-input-file | FileCheck %s --check-prefixes=CHECK,CUDA --enable-var-scope
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu -split-input-file --mlir-print-elementsattrs-with-hex-if-larger=-1 | FileCheck %s --check-prefix=ALL --enable-var-scope

// Lowering for one process's devices (devices=..., docs/multi-process.md):
// the tables hold rows for those devices only. Every other position maps
// to block -1: another process runs it, and its module has the rows. (The
// `blocks` table repeats: position p reads entry p % its size, so
// [-1, -1, 0, 0, 0, -1] covers 8 positions.) Positions still count every device of the function's meshes, and
// a collective's group still names every member (its shape, relative to
// the first member).

// The Orbax restore on 8 devices as the process that owns devices 2-4:
// devices 2, 3 and 4 receive the broadcasts in groups [0, 2, 4, 6] and
// [1, 3, 5, 7] (one shape, relative ids 0, 2, 4, 6), each its rank
// (position / 2) % 4 read off its position, the root's rank (0) in the
// row: one block for the three. The roots' class (devices 0 and 1) is
// not built.
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=4, "tp"=2]>

// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_blocks(dense<[-1, -1, 0, 0, 0, -1]> : tensor<6xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_members(dense<[0, 2, 4, 6]> : tensor<4xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_ranks(dense<{{\[\[}}2, 4, 1]]> : tensor<1x3xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_comms(dense<{{\[\[}}2, 0, 0, 1024, 0, 1, -1, 0]]> : tensor<1x8xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_staging(dense<0> : tensor<1xi64>)
// The NCCL world communicator still spans the function's 8 devices.
// CUDA-DAG: llvm.mlir.global private constant @__polymesh_restore__part1_devices(dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi64>)
// CHECK-NOT: llvm.func @restore__part0(
// CHECK-LABEL: llvm.func @restore__part1(
// CPU: llvm.call @polymesh_rt_broadcast
// CUDA: llvm.call @polymesh_rt_nccl_comm
// CHECK-NOT: llvm.func @restore__part

// ALL-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_blocks(dense<[0, 1, 1, 1]> : tensor<4xi64>)
// ALL-LABEL: llvm.func @restore__part0(
// ALL-LABEL: llvm.func @restore__part1(
func.func @restore(%a: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>}) {
  return %a : tensor<16x32xf32>
}

// -----

// Uneven rows on odd ids to columns on reversed ids: positions count the
// devices [0, 1, 2, 4, 5]. Device 2 (2 rows, position 2) and device 4 (3
// rows, position 3) send their rows' halves to devices 5 and 1, packed
// (not one run of a row tile); their two blocks are the rows the full
// lowering gives them, whose tables have five blocks.
polymesh.mesh @a = <["x"=3], device_ids=[4, 0, 2]>
polymesh.mesh @b = <["y"=2], device_ids=[5, 1]>

// CHECK-DAG: llvm.mlir.global private constant @__polymesh_f__plan0_blocks(dense<[-1, -1, 0, 1]> : tensor<4xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_f__plan0_staging(dense<[48, 72]> : tensor<2xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_f__plan0_comms(dense<{{\[\[}}0, 3, 0, 24, 2, 2, 0, 1], [0, -1, 24, 24, -1, 2, 1, 2], [0, 1, 0, 36, 1, 2, 0, 1], [0, -3, 36, 36, -2, 2, 1, 2]]> : tensor<4x8xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_f__plan0_copies(dense<{{\[\[}}0, 0, 0, 2, 0, 12, 2, 24, 12], [0, 0, 12, 2, 24, 12, 2, 24, 12], [0, 0, 0, 2, 0, 12, 3, 24, 12], [0, 0, 12, 2, 36, 12, 3, 24, 12]]> : tensor<4x9xi64>)
// CUDA-DAG: llvm.mlir.global private constant @__polymesh_f__part0_devices(dense<[0, 1, 2, 4, 5]> : tensor<5xi64>)
// CHECK-LABEL: llvm.func @f__part0(
// CHECK-NOT: llvm.func @f__part1(
// CHECK-LABEL: llvm.func @f__part2(

// ALL-DAG: llvm.mlir.global private constant @__polymesh_f__plan0_blocks(dense<[0, 1, 2, 3, 4]> : tensor<5xi64>)
// ALL-DAG: llvm.mlir.global private constant @__polymesh_f__plan0_staging(dense<[72, 0, 48, 72, 0]> : tensor<5xi64>)
// ALL-DAG: llvm.mlir.global private constant @__polymesh_f__plan0_comms(dense<{{\[\[}}0, 5, 0, 36, 4, 2, 0, 1], [0, 1, 36, 36, 1, 2, 1, 2], [1, 3, 0, 36, 2, 1, 0, 0], [1, -1, 36, 36, -1, 1, 0, 0], [1, 1, 72, 24, 1, 1, 0, 0], [0, 3, 0, 24, 2, 2, 0, 1], [0, -1, 24, 24, -1, 2, 1, 2], [0, 1, 0, 36, 1, 2, 0, 1], [0, -3, 36, 36, -2, 2, 1, 2], [1, -1, 0, 36, -1, 1, 0, 0], [1, -5, 36, 36, -4, 1, 0, 0], [1, -3, 72, 24, -2, 1, 0, 0]]> : tensor<12x8xi64>)
// ALL-LABEL: llvm.func @f__part1(
func.func @f(%x: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"y"}]>}) {
  %1 = polymesh.reshard %x <@b, [{}, {"y"}]> : tensor<8x6xf32>
  return %1 : tensor<8x6xf32>
}

// -----

// A plan whose collective (the all-reduce of the "z" partials on devices 0
// and 1) lies wholly in another process: this process's devices (3 and 4)
// only receive. Its module has no group to join, so no collective call,
// only the send/recv group (this crashed the CPU and CUDA lowerings; found
// by gen-programs.py under mpirun, seed 20261207).
// CHECK: llvm.mlir.global private constant @__polymesh_reduced_elsewhere__plan0_blocks(dense<[-1, 0]> : tensor<2xi64>)
// CHECK-LABEL: func @reduced_elsewhere__part1(
// CPU-NOT: polymesh_rt_all_reduce
// CPU: llvm.call @polymesh_rt_group_start
// CPU: llvm.call @polymesh_rt_recv
// CUDA-NOT: ncclAllReduce
// CUDA: llvm.call @ncclGroupStart
// CUDA: llvm.call @ncclRecv
// ALL-LABEL: func @reduced_elsewhere__part0(
// ALL: llvm.call @polymesh_rt_all_reduce
polymesh.mesh @pair = <["z"=2], device_ids=[0, 1]>
polymesh.mesh @far = <["b"=2], device_ids=[3, 4]>

func.func @reduced_elsewhere(%p: tensor<12xi8> {polymesh.sharding = #polymesh.sharding<@pair, [{}], unreduced={"z"}>})
    -> (tensor<12xi8> {polymesh.sharding = #polymesh.sharding<@far, [{"b"}]>}) {
  return %p : tensor<12xi8>
}
