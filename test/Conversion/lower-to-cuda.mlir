// RUN: polymesh-opt %s --polymesh-pipeline=target=cuda -split-input-file -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: polymesh-translate %t.mlir --polymesh-to-ptx -split-input-file | FileCheck %s --check-prefix=PTX
// RUN: polymesh-translate %t.mlir --mlir-to-llvmir -split-input-file | FileCheck %s --check-prefix=LLVM

// --polymesh-lower-to-cuda: the same tables as the CPU, copy rows launched
// as PTX kernels on the device's stream, NCCL called directly. The PTX is
// checked by ptxas in lower-to-cuda-ptxas.test.

// A broadcast step (the Orbax restore pattern) is one ncclBroadcast per
// step on the members' communicator; the result is written straight into
// the caller's buffer.
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=4, "tp"=2]>

// CHECK-LABEL: llvm.func @restore__part0(
// CHECK-SAME: %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK: %[[STREAM:.*]] = llvm.call @polymesh_rt_cuda_stream
// CHECK: llvm.call @polymesh_rt_nccl_comm
// CHECK: gpu.launch_func <%[[STREAM]] : !llvm.ptr> @polymesh_kernels::@copy_outer1_u16
// CHECK: gpu.launch_func <%[[STREAM]] : !llvm.ptr> @polymesh_kernels::@copy_outer1_u1
// CHECK: llvm.call @ncclBroadcast
// CHECK: llvm.call @ncclBroadcast
// CHECK: llvm.call @polymesh_rt_device_synchronize
// CHECK-NOT: polymesh.
// CHECK: gpu.binary @polymesh_kernels  [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">, properties = {O = 2 : i32}, assembly = "
// PTX: .target sm_90
// PTX: .visible .entry copy_outer1_u16(
// PTX: ld.global.v4.b32
// PTX: .visible .entry copy_outer1_u1(
// LLVM-LABEL: define void @restore__part0(
// LLVM: call ptr @polymesh_rt_cuda_stream(
// LLVM: call ptr @mgpuModuleGetFunction(
// LLVM: call void @mgpuLaunchKernel(
// LLVM: call i32 @ncclBroadcast(
// The PTX is loaded (and JIT-compiled by the driver) by a constructor.
// LLVM: call ptr @mgpuModuleLoadJIT(
func.func @restore(%a: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>}) {
  return %a : tensor<16x32xf32>
}

// -----

// A permutation between disjoint meshes: ncclSend/ncclRecv inside one group,
// straight from the source tile into the destination tile (each box is a
// whole tile): no staging and no kernel.
polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
polymesh.mesh @b = <["x"=2], device_ids=[3, 2]>

// CHECK-LABEL: llvm.func @permute__part0(
// CHECK: llvm.call @ncclGroupStart
// CHECK: llvm.call @ncclSend
// CHECK: llvm.call @ncclRecv
// CHECK: llvm.call @ncclGroupEnd
// CHECK-NOT: llvm.call @ncclBroadcast
// CHECK-NOT: gpu.launch_func
// CHECK-NOT: gpu.binary
// PTX: // no kernels: the module launches none
// LLVM-LABEL: define void @permute__part0(
// LLVM: call i32 @ncclGroupStart()
// LLVM: call i32 @ncclSend(
// LLVM: call i32 @ncclRecv(
// LLVM: call i32 @ncclGroupEnd()
func.func @permute(%x: tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}, {}]>}) {
  return %x : tensor<8x4xi32>
}

// -----

// Partial sums: a bf16 all-reduce is one ncclAllReduce in place
// (ncclBfloat16 = 9, ncclSum = 0) on a copy of the source tile. A
// reduce-scatter of unequal pieces (6 rows over 4 devices) stays
// ncclSend/ncclRecv, the receivers adding in an accumulate kernel (f32
// arithmetic, rounded per addition). collectives-cuda.mlir has the rest.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: llvm.func @sum__part0(
// CHECK: llvm.call @polymesh_rt_device_copy
// CHECK: llvm.call @ncclAllReduce
// CHECK: llvm.call @ncclSend
// CHECK: @polymesh_kernels::@accumulate_outer1_bf16
// PTX: .visible .entry accumulate_outer1_bf16(
// LLVM-LABEL: define void @sum__part0(
// LLVM: call i32 @ncclAllReduce(ptr %{{[0-9]+}}, ptr %{{[0-9]+}}, i64 %{{[0-9]+}}, i32 9, i32 0,
func.func @sum(%p: tensor<4x4xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>},
               %q: tensor<6x4xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<4x4xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>},
        tensor<6x4xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
  return %p, %q : tensor<4x4xbf16>, tensor<6x4xbf16>
}
