// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cpu -split-input-file | FileCheck %s --check-prefix=CPU --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-mpi -split-input-file | FileCheck %s --check-prefix=MPI --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cuda -split-input-file | FileCheck %s --check-prefix=CUDA --enable-var-scope

// An exchange of whole tiles (`all_to_all ... tiles`) whose chunks lie in
// a mixed-radix pattern of the ranks is one all-to-all call per device,
// and every device runs the same rows: one block, one comm row, at most
// one looped copy on each side, whatever the number of devices.

// Rows over "x" to columns over "x" on 8 devices. The chunks for ranks
// 0..7 are the 4x6 column blocks of the 4x48 source tile: one copy row
// loops over them (counts [8, 4], strides [24, 192] in the tile and
// [96, 24] in staging) into staging at 0. The chunks from ranks 0..7 are
// the row blocks of the 32x6 destination tile in order: the call writes
// the tile itself. Comm row: kind 6 (all_to_all), offset 0, 96 bytes per
// peer, from staging (space 2) into the destination tile (result space 1,
// offset 0). The local copies are gone: the call brings each device its
// own chunk too.
// CPU-DAG: memref.global "private" constant @__polymesh_transpose__plan0_blocks : memref<1xi64> = dense<0>
// CPU-DAG: memref.global "private" constant @__polymesh_transpose__plan0_staging : memref<1xi64> = dense<768>
// CPU-DAG: memref.global "private" constant @__polymesh_transpose__plan0_comms : memref<1x8xi64> = dense<{{\[}}[6, 0, 0, 96, 0, 2, 1, 0]]>
// CPU-DAG: memref.global "private" constant @__polymesh_transpose__plan0_copies : memref<1x12xi64> = dense<{{\[}}[0, 0, 0, 2, 0, 24, 8, 4, 24, 192, 96, 24]]>
// CPU-LABEL: func.func @transpose__part0(
// CPU: llvm.call @polymesh_rt_all_to_all(
// CPU-NOT: llvm.call @polymesh_rt_send
// CPU: return

// MPI-LABEL: func.func @transpose__part0(
// MPI: llvm.call @polymesh_rt_all_to_all(
// MPI-NOT: mpi.send
// MPI: return

// On GPUs: NCCL's all-to-all as one send and one receive per rank, the
// caller's own included, inside one group on the members' communicator.
// CUDA-LABEL: func.func @transpose__part0(
// CUDA: llvm.call @polymesh_rt_nccl_comm(
// CUDA: %[[COMM:.*]] = llvm.call @polymesh_rt_nccl_comm(
// CUDA: llvm.call @ncclGroupStart()
// CUDA: scf.for
// CUDA: llvm.call @ncclSend({{.*}}, %[[COMM]],
// CUDA: llvm.call @ncclRecv({{.*}}, %[[COMM]],
// CUDA: llvm.call @ncclGroupEnd()
// CUDA-NOT: llvm.call @ncclSend
// CUDA: return

polymesh.mesh @seq = <["x"=8]>

func.func @transpose(%q: tensor<32x48xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{"x"}, {}]>})
    -> (tensor<32x48xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{}, {"x"}]>}) {
  return %q : tensor<32x48xf32>
}

// -----

// Back: the chunks for ranks 0..7 are the 4x48 source tile in order (sent
// from it, space 0, no pack); the chunks from them are the column blocks
// of the destination tile, received into staging at 0 (result space 2)
// and unpacked by one looped row.
// CPU-DAG: memref.global "private" constant @__polymesh_back__plan0_comms : memref<1x8xi64> = dense<{{\[}}[6, 0, 0, 96, 0, 0, 2, 0]]>
// CPU-DAG: memref.global "private" constant @__polymesh_back__plan0_copies : memref<1x12xi64> = dense<{{\[}}[0, 2, 0, 1, 0, 24, 8, 4, 96, 24, 24, 192]]>
// CPU-LABEL: func.func @back__part0(
// CPU: llvm.call @polymesh_rt_all_to_all(

polymesh.mesh @seq = <["x"=8]>

func.func @back(%q: tensor<32x48xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{}, {"x"}]>})
    -> (tensor<32x48xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{"x"}, {}]>}) {
  return %q : tensor<32x48xf32>
}

// -----

// Rows over ("y", "x") to columns over ("x", "y"): in id order the chunk
// sent to rank k is column block k of the 2x24 source tile (packed by a
// row looping 8 times), but the chunk from rank k is row block
// (k % 2) * 4 + k / 2 of the 16x3 destination tile: the unpack row loops
// over the two digits of k (4 x 2; 48 and 24 bytes on in staging, 24 and
// 96 in the tile), so outerDims is 3 and the rows are still one block.
// CPU-DAG: memref.global "private" constant @__polymesh_out_of_id_order__plan0_members : memref<8xi64> = dense<[0, 1, 2, 3, 4, 5, 6, 7]>
// CPU-DAG: memref.global "private" constant @__polymesh_out_of_id_order__plan0_blocks : memref<1xi64> = dense<0>
// CPU-DAG: memref.global "private" constant @__polymesh_out_of_id_order__plan0_comms : memref<1x8xi64> = dense<{{\[}}[6, 0, 0, 24, 0, 2, 2, 192]]>
// CPU-DAG: memref.global "private" constant @__polymesh_out_of_id_order__plan0_copies : memref<2x15xi64> = dense<{{\[}}[0, 0, 0, 2, 0, 12, 1, 8, 2, 0, 12, 96, 0, 24, 12], [0, 2, 192, 1, 0, 24, 1, 4, 2, 0, 48, 24, 0, 24, 96]]>
// CPU-LABEL: func.func @out_of_id_order__part0(
// CPU-NOT: llvm.call @polymesh_rt_send(
// CPU: llvm.call @polymesh_rt_all_to_all(
// CPU-NOT: llvm.call @polymesh_rt_send(
// CPU: return

polymesh.mesh @m = <["x"=4, "y"=2]>

func.func @out_of_id_order(%q: tensor<16x24xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y", "x"}, {}]>})
    -> (tensor<16x24xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"x", "y"}]>}) {
  return %q : tensor<16x24xf32>
}

// -----

// Ids out of position order: in id order the chunks are shuffled, in tile
// order they are not, so the communicator lists the members in tile order
// (7, 3, 11, 0: ids relative to the first). Its ranks are not read off
// positions, so each device's block names its own rank; the rows are the
// same.
// CPU-DAG: memref.global "private" constant @__polymesh_odd_ids__plan0_members : memref<4xi64> = dense<[0, -4, 4, -7]>
// CPU-DAG: memref.global "private" constant @__polymesh_odd_ids__plan0_blocks : memref<4xi64> = dense<[0, 1, 2, 3]>
// CPU-LABEL: func.func @odd_ids__part0(
// CPU-SAME: polymesh.devices = array<i64: 0, 3, 7, 11>
// CPU-NOT: llvm.call @polymesh_rt_send(
// CPU: llvm.call @polymesh_rt_all_to_all(
// CPU-NOT: llvm.call @polymesh_rt_send(
// CPU: return

polymesh.mesh @odd = <["x"=4], device_ids=[7, 3, 11, 0]>

func.func @odd_ids(%q: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@odd, [{"x"}, {}]>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@odd, [{}, {"x"}]>}) {
  return %q : tensor<8x8xf32>
}

// -----

// Ids shuffled between the layouts (the destination mesh swaps devices 0
// and 1): in every order of the members, one side's chunks fit no
// mixed-radix pattern of the ranks. The step stays `tiles` in the plan and
// runs as the send/recv of its transfers (7 per device).
// CPU-DAG: memref.global "private" constant @__polymesh_swapped__plan0_comms : memref<112x8xi64>
// CPU-LABEL: func.func @swapped__part0(
// CPU-NOT: llvm.call @polymesh_rt_all_to_all
// CPU: llvm.call @polymesh_rt_send(
// CPU-NOT: llvm.call @polymesh_rt_all_to_all
// CPU: return

polymesh.mesh @a = <["x"=8]>
polymesh.mesh @b = <["p"=8], device_ids=[1, 0, 2, 3, 4, 5, 6, 7]>

func.func @swapped(%q: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"p"}]>}) {
  %r = polymesh.reshard %q <@b, [{}, {"p"}]> : tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
