// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cuda -split-input-file | FileCheck %s --enable-var-scope

// --polymesh-exchange-to-cuda: the first stage of --polymesh-lower-to-cuda
// on its own, a dialect conversion whose output is checked here before
// LLVM. Each partitioned function becomes a host function over device
// pointers (tiles are !llvm.ptr), with the device's stream and world
// communicator in its prologue; each polymesh.exchange its device's share
// of the plan: loads from the plan's tables, copy rows as gpu.launch_func
// of generated kernels on the stream, and NCCL calls, each result checked.
// One case per kind of communication, regular and irregular groups,
// same-mesh and cross-mesh, and the placement ops.

// An all-gather over a mesh with odd ids (an irregular group: 4 blocks).
// CHECK-DAG: memref.global "private" constant @__polymesh_all_gather__part0_devices : memref<4xi64> = dense<[0, 1, 2, 3]>
// CHECK-DAG: memref.global "private" constant @__polymesh_all_gather__plan0_members : memref<4xi64> = dense<[0, 1, 2, 3]>
// CHECK-LABEL: func.func @all_gather__part0(
// CHECK-SAME: %[[RT:[^:]*]]: !llvm.ptr, %[[DEV:[^:]*]]: i64, %[[POS:[^:]*]]: index, %[[IN:[^:]*]]: !llvm.ptr, %[[OUT:[^:]*]]: !llvm.ptr)
// CHECK-SAME: attributes {llvm.emit_c_interface
// CHECK: %[[GROUP:.*]] = llvm.alloca %{{.*}} x i64 {alignment = 8 : i64, polymesh.group_buffer}
// CHECK: %[[STREAM:.*]] = llvm.call @polymesh_rt_cuda_stream(%[[RT]], %[[DEV]])
// CHECK: %[[TOKEN:.*]] = builtin.unrealized_conversion_cast %[[STREAM]] : !llvm.ptr to !gpu.async.token
// CHECK: memref.get_global @__polymesh_all_gather__part0_devices
// CHECK: llvm.call @polymesh_rt_nccl_comm(%[[RT]], %[[DEV]], %{{.*}}, %{{.*}})
// CHECK: llvm.ptrtoint %[[IN]]
// CHECK: llvm.ptrtoint %[[OUT]]
// CHECK: %[[BLOCKS:.*]] = memref.get_global @__polymesh_all_gather__plan0_blocks
// CHECK: memref.load %[[BLOCKS]][%[[POS]]]
// CHECK: %[[STAGING:.*]] = llvm.call @polymesh_rt_device_alloc(%[[RT]], %[[DEV]], %{{.*}})
// CHECK: scf.for
// CHECK: gpu.launch_func async [%[[TOKEN]]] @polymesh_kernels::@copy_outer1_u16
// CHECK: gpu.launch_func async [%[[TOKEN]]] @polymesh_kernels::@copy_outer1_u1
// The caller's group, written out as device ids, then one call per row.
// CHECK: llvm.store %{{.*}}, %{{.*}} : i64, !llvm.ptr
// CHECK: %[[COMM:.*]] = llvm.call @polymesh_rt_nccl_comm(%[[RT]], %[[DEV]], %[[GROUP]], %{{.*}})
// CHECK: %[[GATHERED:.*]] = llvm.call @ncclAllGather(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[COMM]], %[[STREAM]])
// CHECK: llvm.call @polymesh_rt_nccl_check(%[[RT]], %[[DEV]], %[[COMM]], %[[GATHERED]], %{{.*}})
// CHECK: llvm.call @polymesh_rt_device_free(%[[RT]], %[[DEV]], %[[STAGING]])
// The result was made in the caller's buffer: nothing to copy at the end.
// CHECK-NOT: polymesh_rt_device_copy
// CHECK: llvm.call @polymesh_rt_device_synchronize(%[[RT]], %[[DEV]])
// CHECK-NEXT: return{{$}}
// The plan stays for the later stages; the kernels are gpu.funcs.
// CHECK-LABEL: func.func private @all_gather__plan0(
// CHECK: polymesh.transfer
// CHECK: gpu.module @polymesh_kernels [#nvvm.target<chip = "sm_90", features = "+ptx80">]
// CHECK: gpu.func @copy_outer1_u16(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64) kernel
// CHECK: gpu.func @copy_outer1_u1(
// CHECK-NOT: polymesh.exchange

polymesh.mesh @m = <["x"=4], device_ids=[3, 0, 2, 1]>

func.func @all_gather(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  return %a : tensor<16x8xf32>
}

// -----

// Cross-mesh, one replica to all (the Orbax restore): ncclBroadcast in
// place, the root's index in the group from the communication row.
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=4, "tp"=2]>

// CHECK-LABEL: func.func @restore__part0(
// CHECK-SAME: %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: i64, %{{[^:]*}}: index, %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: !llvm.ptr)
// CHECK: %[[STREAM:.*]] = llvm.call @polymesh_rt_cuda_stream
// CHECK: %[[WORLD:.*]] = llvm.call @polymesh_rt_nccl_comm
// CHECK: %[[COMM:.*]] = llvm.call @polymesh_rt_nccl_comm(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK: %[[ROOT:.*]] = arith.trunci %{{.*}} : i64 to i32
// CHECK: llvm.call @ncclBroadcast(%[[AT:[^,]*]], %[[AT]], %{{.*}}, %{{.*}}, %[[ROOT]], %[[COMM]], %[[STREAM]])
// CHECK-NOT: llvm.call @ncclSend
// CHECK: return

func.func @restore(%a: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>}) {
  return %a : tensor<16x32xf32>
}

// -----

// Cross-mesh between disjoint meshes with permuted ids: ncclSend/ncclRecv in
// one group on the world communicator, the peer's rank relative to the
// caller's position; no staging kernel (whole tiles move in place).
polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
polymesh.mesh @b = <["x"=2], device_ids=[3, 2]>

// CHECK-LABEL: func.func @permute__part0(
// CHECK-SAME: %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: i64, %[[POS:[^:]*]]: index,
// CHECK: %[[STREAM:.*]] = llvm.call @polymesh_rt_cuda_stream
// CHECK: %[[WORLD:.*]] = llvm.call @polymesh_rt_nccl_comm
// CHECK: llvm.call @ncclGroupStart()
// CHECK: %[[P:.*]] = arith.index_cast %[[POS]] : index to i64
// CHECK: %[[RANK64:.*]] = arith.addi %[[P]], %{{.*}} : i64
// CHECK: %[[RANK:.*]] = arith.trunci %[[RANK64]] : i64 to i32
// CHECK: llvm.call @ncclSend(%{{.*}}, %{{.*}}, %{{.*}}, %[[RANK]], %[[WORLD]], %[[STREAM]])
// CHECK: llvm.call @ncclRecv(%{{.*}}, %{{.*}}, %{{.*}}, %[[RANK]], %[[WORLD]], %[[STREAM]])
// CHECK: llvm.call @ncclGroupEnd()
// CHECK-NOT: gpu.launch_func
// CHECK: return
// CHECK-NOT: gpu.module

func.func @permute(%x: tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}, {}]>}) {
  return %x : tensor<8x4xi32>
}

// -----

// Same-mesh sums: an f32 all-reduce and an i32 reduce-scatter, each from
// the caller's source tile straight into its result tile (NCCL's
// out-of-place forms: the plan's copy of the sums to the result is the
// call's), with the element type and ncclSum. The source is not written,
// so it is not copied first; no accumulate kernel, no copy kernel.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: func.func @sums__part0(
// CHECK-SAME: %[[RT:[^:]*]]: !llvm.ptr, %[[DEV:[^:]*]]: i64, %{{[^:]*}}: index, %[[P:[^:]*]]: !llvm.ptr, %[[Q:[^:]*]]: !llvm.ptr,
// CHECK-NOT: llvm.call @polymesh_rt_device_copy
// CHECK: %[[F32:.*]] = arith.constant 7 : i32
// CHECK: %[[SUM:.*]] = arith.constant 0 : i32
// CHECK: llvm.call @ncclAllReduce(%{{[^,]*}}, %{{[^,]*}}, %{{.*}}, %[[F32]], %[[SUM]], %{{.*}}, %{{.*}})
// CHECK-NOT: llvm.call @polymesh_rt_device_copy
// CHECK: %[[I32:.*]] = arith.constant 2 : i32
// CHECK: llvm.call @ncclReduceScatter(%{{.*}}, %{{.*}}, %{{.*}}, %[[I32]], %{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NOT: gpu.launch_func
// CHECK: return

func.func @sums(%p: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>},
                %q: tensor<16x8xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>},
        tensor<16x8xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
  return %p, %q : tensor<8x4xf32>, tensor<16x8xi32>
}

// -----

// Placement: a splat constant is a fill kernel straight into the caller's
// buffer (f32 1.0 = 0x3F800000); a linalg.fill of a constant too, its
// tensor.empty needing no memory (a null pointer); a constant that is not a
// splat is uploaded once and sliced at the offsets partitioning tabulated
// per position (the table is an i64 memref.global, read at the position);
// a reshape is the same pointer, copied into the caller's buffer at the
// return.
polymesh.mesh @m2 = <["x"=2]>

// CHECK-DAG: llvm.mlir.global private constant @place__part0__constant1("\01\00\00\00\02\00\00\00\03\00\00\00\04\00\00\00\05\00\00\00\06\00\00\00\07\00\00\00\08\00\00\00")
// CHECK-DAG: memref.global "private" constant @place__part0__offsets0 : memref<2x2xi64> = dense<{{\[\[}}0, 0], [2, 0]]>
// CHECK-LABEL: func.func @place__part0(
// CHECK-SAME: %[[RT:[^:]*]]: !llvm.ptr, %[[DEV:[^:]*]]: i64, %[[POS:[^:]*]]: index, %[[A:[^:]*]]: !llvm.ptr, %[[ONES_OUT:[^:]*]]: !llvm.ptr, %[[FLAGS_OUT:[^:]*]]: !llvm.ptr, %[[TABLE_OUT:[^:]*]]: !llvm.ptr, %[[E_OUT:[^:]*]]: !llvm.ptr)
// CHECK: %[[TOKEN:.*]] = builtin.unrealized_conversion_cast
// CHECK: %[[ONES:.*]] = arith.constant 1065353216 : i64
// CHECK: gpu.launch_func async [%[[TOKEN]]] @polymesh_kernels::@fill_u4 {{.*}} args(%[[ONES_OUT]] : !llvm.ptr, %[[ONES]] : i64,
// CHECK: llvm.mlir.zero : !llvm.ptr
// CHECK: gpu.launch_func async [%[[TOKEN]]] @polymesh_kernels::@fill_u1 {{.*}} args(%[[FLAGS_OUT]] : !llvm.ptr,
// CHECK: %[[OFFSETS:.*]] = memref.get_global @place__part0__offsets0 : memref<2x2xi64>
// CHECK: %[[COPY:.*]] = llvm.call @polymesh_rt_device_alloc
// CHECK: %[[IMAGE:.*]] = llvm.mlir.addressof @place__part0__constant1
// CHECK: llvm.call @polymesh_rt_device_upload(%[[RT]], %[[DEV]], %[[COPY]], %[[IMAGE]],
// CHECK: memref.load %[[OFFSETS]][%[[POS]], %{{.*}}] : memref<2x2xi64>
// CHECK: llvm.ptrtoint %[[COPY]]
// CHECK: gpu.launch_func async [%[[TOKEN]]] @polymesh_kernels::@copy_outer1_u1 {{.*}} args(%{{.*}} : !llvm.ptr, %[[TABLE_OUT]] : !llvm.ptr,
// CHECK: llvm.call @polymesh_rt_device_copy(%[[RT]], %[[DEV]], %[[E_OUT]], %[[A]],
// CHECK: llvm.call @polymesh_rt_device_synchronize
// CHECK: llvm.call @polymesh_rt_device_free(%[[RT]], %[[DEV]], %[[COPY]])
// CHECK-NEXT: return
// CHECK: gpu.func @fill_u4(%{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64) kernel
// CHECK: gpu.func @fill_u1(
// CHECK: gpu.func @copy_outer1_u1(

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
