// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cpu -split-input-file | FileCheck %s --check-prefix=DIRECT --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition "--polymesh-exchange-to-cpu=direct-collectives=false" -split-input-file | FileCheck %s --check-prefix=IN-PLACE --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cuda -split-input-file | FileCheck %s --check-prefix=CUDA-DIRECT --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition "--polymesh-exchange-to-cuda=direct-collectives=false" -split-input-file | FileCheck %s --check-prefix=CUDA-IN-PLACE --enable-var-scope

// direct-collectives (default true) lets a collective go straight from the
// source tile to the destination tile (NCCL's out-of-place forms);
// direct-collectives=false keeps every collective in place, as the plan's
// steps are: a sum in the source tile, which is then copied first, and the
// plan's local copy of the result afterwards.

// A data-parallel gradient sum over 8 devices. Direct: the all-reduce row
// sends the source tile (space 0) and receives into the result tile
// (result space 1, offset 0); nothing is copied. In place: the result
// column is -1, the source tile is copied into a scratch buffer first and
// the sum copied to the result after (one copy row).
// DIRECT-DAG: memref.global "private" constant @__polymesh_grad_sum__plan0_comms : memref<1x8xi64> = dense<{{\[}}[4, 0, 0, 4096, 0, 0, 1, 0]]>
// DIRECT-DAG: memref.global "private" constant @__polymesh_grad_sum__plan0_blocks : memref<1xi64> = dense<0>
// DIRECT-LABEL: func.func @grad_sum__part0(
// DIRECT-NOT: llvm.call @malloc
// DIRECT-NOT: "llvm.intr.memcpy"
// DIRECT: llvm.call @polymesh_rt_all_reduce(
// DIRECT-NOT: "llvm.intr.memcpy"
// DIRECT: bufferization.to_tensor

// IN-PLACE-DAG: memref.global "private" constant @__polymesh_grad_sum__plan0_comms : memref<1x8xi64> = dense<{{\[}}[4, 0, 0, 4096, 0, 0, -1, 0]]>
// IN-PLACE-DAG: memref.global "private" constant @__polymesh_grad_sum__plan0_copies : memref<1x9xi64> = dense<{{\[}}[0, 0, 0, 1, 0, 4096, 1, 0, 0]]>
// IN-PLACE-LABEL: func.func @grad_sum__part0(
// IN-PLACE: %[[COPY:.*]] = llvm.call @malloc(
// IN-PLACE: "llvm.intr.memcpy"(%[[COPY]],
// IN-PLACE: llvm.call @polymesh_rt_all_reduce(
// IN-PLACE: "llvm.intr.memcpy"
// IN-PLACE: llvm.call @free(%[[COPY]])

// CUDA-DIRECT-LABEL: func.func @grad_sum__part0(
// CUDA-DIRECT-NOT: llvm.call @polymesh_rt_device_copy
// CUDA-DIRECT: llvm.call @ncclAllReduce(
// CUDA-DIRECT-NOT: gpu.launch_func
// CUDA-DIRECT: return

// CUDA-IN-PLACE-LABEL: func.func @grad_sum__part0(
// CUDA-IN-PLACE: llvm.call @polymesh_rt_device_copy(
// CUDA-IN-PLACE: llvm.call @ncclAllReduce(
// CUDA-IN-PLACE: gpu.launch_func
// CUDA-IN-PLACE: return

polymesh.mesh @data = <["x"=8]>

func.func @grad_sum(%g: tensor<16x64xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}], unreduced={"x"}>})
    -> (tensor<16x64xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}]>}) {
  return %g : tensor<16x64xf32>
}

// -----

// An FSDP parameter gather over "fsdp" of a 2 x 4 mesh: each member's rows
// in rank order are the whole gathered tile. Direct: one all-gather from
// the source tile into the result tile, no staging (0 bytes), no copies
// (the local copy of the member's own rows goes too). In place: each
// member copies its rows to its own place in the result, packs them into
// staging at rank * chunk, gathers, and unpacks the other three chunks.
// DIRECT-DAG: memref.global "private" constant @__polymesh_gather__plan0_staging : memref<1xi64> = dense<0>
// DIRECT-DAG: memref.global "private" constant @__polymesh_gather__plan0_comms : memref<1x8xi64> = dense<{{\[}}[3, 0, 0, 512, 0, 0, 1, 0]]>
// DIRECT-DAG: memref.global "private" constant @__polymesh_gather__plan0_ranks : memref<1x3xi64> = dense<{{\[}}[1, 4, 1]]>
// DIRECT-DAG: memref.global "private" constant @__polymesh_gather__plan0_blocks : memref<1xi64> = dense<0>
// DIRECT-LABEL: func.func @gather__part0(
// DIRECT-NOT: "llvm.intr.memcpy"
// DIRECT: llvm.call @polymesh_rt_all_gather(
// DIRECT-NOT: "llvm.intr.memcpy"
// DIRECT: bufferization.to_tensor

// IN-PLACE-DAG: memref.global "private" constant @__polymesh_gather__plan0_staging : memref<4xi64> = dense<2048>
// IN-PLACE-DAG: memref.global "private" constant @__polymesh_gather__plan0_blocks : memref<4xi64> = dense<[0, 1, 2, 3]>
// IN-PLACE-LABEL: func.func @gather__part0(
// IN-PLACE: "llvm.intr.memcpy"
// IN-PLACE: llvm.call @polymesh_rt_all_gather(
// IN-PLACE: "llvm.intr.memcpy"

polymesh.mesh @pod = <["dp"=2, "fsdp"=4]>

func.func @gather(%w: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"fsdp"}, {}]>})
    -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{}, {}]>}) {
  return %w : tensor<16x32xf32>
}
