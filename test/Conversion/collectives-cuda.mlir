// RUN: polymesh-opt %s --polymesh-pipeline=target=cuda -split-input-file -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: polymesh-translate %t.mlir --mlir-to-llvmir -split-input-file | FileCheck %s --check-prefix=LLVM

// The CUDA lowering calls NCCL's collectives in place on the members'
// communicator (polymesh_rt_nccl_comm) where the schedule has them:
// ncclAllGather on bytes (ncclUint8 = 1), ncclAllReduce and
// ncclReduceScatter with the element type (ncclFloat32 = 7,
// ncclBfloat16 = 9, ncclInt32 = 2) and ncclSum (0). Other steps stay
// ncclSend/ncclRecv in a group, with accumulate kernels for sums.

// An all-gather of equal row blocks.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: llvm.func @gather__part0(
// CHECK-DAG: %[[U8:[0-9]+]] = llvm.mlir.constant(1 : i32) : i32
// CHECK: llvm.call @polymesh_rt_nccl_comm
// CHECK: llvm.call @ncclAllGather(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[U8]], %{{[0-9]+}}, %{{[0-9]+}})
// CHECK-NOT: llvm.call @ncclSend
// CHECK: llvm.return
// LLVM-LABEL: define void @gather__part0(
// LLVM: call i32 @ncclAllGather(ptr %{{[0-9]+}}, ptr %{{[0-9]+}}, i64 %{{[0-9]+}}, i32 1,
func.func @gather(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %a : tensor<16x8xf32>
}

// -----

// Partials in f32 and bf16: one ncclAllReduce each, in place in the copy of
// the source tile; no accumulate kernel.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: llvm.func @sum__part0(
// CHECK-DAG: %[[F32:[0-9]+]] = llvm.mlir.constant(7 : i32) : i32
// CHECK-DAG: %[[BF16:[0-9]+]] = llvm.mlir.constant(9 : i32) : i32
// CHECK-DAG: %[[SUM:[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
// CHECK: llvm.call @ncclAllReduce(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[F32]], %[[SUM]], %{{[0-9]+}}, %{{[0-9]+}})
// CHECK: llvm.call @ncclAllReduce(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[BF16]], %[[SUM]], %{{[0-9]+}}, %{{[0-9]+}})
// CHECK-NOT: @polymesh_kernels::@accumulate
// CHECK: llvm.return
// LLVM-LABEL: define void @sum__part0(
// LLVM: call i32 @ncclAllReduce(ptr %{{[0-9]+}}, ptr %{{[0-9]+}}, i64 %{{[0-9]+}}, i32 7, i32 0,
// LLVM: call i32 @ncclAllReduce(ptr %{{[0-9]+}}, ptr %{{[0-9]+}}, i64 %{{[0-9]+}}, i32 9, i32 0,
func.func @sum(%p: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>},
               %q: tensor<8x4xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>},
        tensor<8x4xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %p, %q : tensor<8x4xf32>, tensor<8x4xbf16>
}

// -----

// An i32 reduce-scatter into equal row blocks.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: llvm.func @scatter_i32__part0(
// CHECK-DAG: %[[I32:[0-9]+]] = llvm.mlir.constant(2 : i32) : i32
// CHECK-DAG: %[[SUM:[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
// CHECK: llvm.call @ncclReduceScatter(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[I32]], %[[SUM]], %{{[0-9]+}}, %{{[0-9]+}})
// CHECK-NOT: llvm.call @ncclSend
// CHECK: llvm.return
// LLVM-LABEL: define void @scatter_i32__part0(
// LLVM: call i32 @ncclReduceScatter(ptr %{{[0-9]+}}, ptr %{{[0-9]+}}, i64 %{{[0-9]+}}, i32 2, i32 0,
func.func @scatter_i32(%p: tensor<16x8xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<16x8xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
  return %p : tensor<16x8xi32>
}

// -----

// Unequal pieces (6 rows over 4 devices) and an element type NCCL cannot
// sum (i16) stay ncclSend/ncclRecv with accumulate kernels.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: llvm.func @fallbacks__part0(
// CHECK-NOT: llvm.call @ncclReduceScatter
// CHECK-NOT: llvm.call @ncclAllReduce
// CHECK: llvm.call @ncclSend
// CHECK: @polymesh_kernels::@accumulate_outer1_f32
// CHECK: llvm.call @ncclSend
// CHECK: @polymesh_kernels::@accumulate_outer1_i16
// CHECK-NOT: llvm.call @ncclReduceScatter
// CHECK-NOT: llvm.call @ncclAllReduce
// CHECK: llvm.return
func.func @fallbacks(%p: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>},
                     %q: tensor<4x4xi16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>},
        tensor<4x4xi16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %p, %q : tensor<6x4xf32>, tensor<4x4xi16>
}
