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
// CHECK: llvm.call @polymesh_rt_nccl_check
// CHECK: llvm.call @ncclBroadcast
// CHECK: llvm.call @polymesh_rt_nccl_check
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

// Every NCCL result goes to polymesh_rt_nccl_check with its communicator and
// its name: the runtime's communicators are non-blocking, so ncclInProgress
// is waited out there before the next call.
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_text_ncclSend("ncclSend\00")
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_text_ncclGroupEnd("ncclGroupEnd\00")
// CHECK-LABEL: llvm.func @permute__part0(
// CHECK: %[[NAME:.*]] = llvm.mlir.addressof @__polymesh_text_ncclSend
// CHECK: %[[WORLD:.*]] = llvm.call @polymesh_rt_nccl_comm
// CHECK: llvm.call @ncclGroupStart
// CHECK: %[[SENT:.*]] = llvm.call @ncclSend({{.*}}, %[[WORLD]], {{.*}})
// CHECK: llvm.call @polymesh_rt_nccl_check({{.*}}, %[[WORLD]], %[[SENT]], %[[NAME]])
// CHECK: llvm.call @ncclRecv
// CHECK: llvm.call @polymesh_rt_nccl_check
// CHECK: %[[ENDED:.*]] = llvm.call @ncclGroupEnd
// CHECK: llvm.call @polymesh_rt_nccl_check({{.*}}, %[[WORLD]], %[[ENDED]],
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

// -----

// Data placement: a splat constant is a fill kernel written straight into
// the caller's buffer (f32 1.0 = 0x3F800000), a linalg.fill of a constant
// too (i1 true as one byte), a reshape aliases its operand, and a constant
// that is not a splat is uploaded once from a host image and sliced at the
// offsets partitioning tabulated per position (a strided copy kernel).
polymesh.mesh @m2 = <["x"=2]>

// CHECK-DAG: llvm.mlir.global private constant @place__part0__constant1("\01\00\00\00\02\00\00\00\03\00\00\00\04\00\00\00\05\00\00\00\06\00\00\00\07\00\00\00\08\00\00\00")
// CHECK-DAG: llvm.mlir.global private constant @place__part0__offsets0(dense<{{\[\[}}0, 0], [2, 0]]> : tensor<2x2xi64>)
// CHECK-LABEL: llvm.func @place__part0(
// CHECK-SAME: %[[RT:[^:]*]]: !llvm.ptr, %[[DEV:[^:]*]]: i64, %[[POS:[^:]*]]: i64, %[[A:[^:]*]]: !llvm.ptr, %[[ONES_OUT:[^:]*]]: !llvm.ptr, %[[FLAGS_OUT:[^:]*]]: !llvm.ptr, %[[TABLE_OUT:[^:]*]]: !llvm.ptr, %[[E_OUT:[^:]*]]: !llvm.ptr)
// CHECK-DAG: %[[ONES:.*]] = llvm.mlir.constant(1065353216 : i64) : i64
// CHECK-DAG: %[[IMAGE:.*]] = llvm.mlir.addressof @place__part0__constant1
// CHECK: gpu.launch_func <%{{.*}} : !llvm.ptr> @polymesh_kernels::@fill_u4 {{.*}} args(%[[ONES_OUT]] : !llvm.ptr, %[[ONES]] : i64,
// CHECK: gpu.launch_func <%{{.*}} : !llvm.ptr> @polymesh_kernels::@fill_u1 {{.*}} args(%[[FLAGS_OUT]] : !llvm.ptr,
// CHECK: %[[COPY:.*]] = llvm.call @polymesh_rt_device_alloc
// CHECK: llvm.call @polymesh_rt_device_upload(%[[RT]], %[[DEV]], %[[COPY]], %[[IMAGE]],
// CHECK: gpu.launch_func <%{{.*}} : !llvm.ptr> @polymesh_kernels::@copy_outer1_u1 {{.*}} args(%{{.*}} : !llvm.ptr, %[[TABLE_OUT]] : !llvm.ptr,
// CHECK: llvm.call @polymesh_rt_device_copy(%[[RT]], %[[DEV]], %[[E_OUT]], %[[A]],
// CHECK: llvm.call @polymesh_rt_device_synchronize
// CHECK: llvm.call @polymesh_rt_device_free(%[[RT]], %[[DEV]], %[[COPY]])
// PTX: .visible .entry fill_u4(
// PTX: st.global.b32
// PTX: .visible .entry fill_u1(
func.func @place(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x"}, {}]>})
    -> (tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x"}, {}]>},
        tensor<8xi1> {polymesh.sharding = #polymesh.sharding<@m2, [{"x"}]>},
        tensor<4x2xi32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x"}, {}]>},
        tensor<2x2x6xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x"}, {}, {}]>}) {
  %ones = arith.constant dense<1.0> : tensor<8x4xf32>
  %true = arith.constant true
  %empty = tensor.empty() : tensor<8xi1>
  %flags = linalg.fill ins(%true : i1) outs(%empty : tensor<8xi1>) -> tensor<8xi1>
  %table = arith.constant dense<[[1, 2], [3, 4], [5, 6], [7, 8]]> : tensor<4x2xi32>
  %e = tensor.expand_shape %a [[0, 1], [2]] output_shape [2, 2, 6] : tensor<4x6xf32> into tensor<2x2x6xf32>
  return %ones, %flags, %table, %e : tensor<8x4xf32>, tensor<8xi1>, tensor<4x2xi32>, tensor<2x2x6xf32>
}
