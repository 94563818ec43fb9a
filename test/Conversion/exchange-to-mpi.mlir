// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-mpi -split-input-file | FileCheck %s --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-lower-to-cpu=transport=mpi -split-input-file | FileCheck %s --check-prefix=OMPI --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition "--polymesh-lower-to-cpu=transport=mpi mpi-implementation=MPICH" -split-input-file | FileCheck %s --check-prefix=MPICH --enable-var-scope
// RUN: polymesh-opt %s --polymesh-pipeline=target=mpi -split-input-file | FileCheck %s --check-prefix=OMPI --enable-var-scope
// Stage by stage: the intermediate IR reads back in and lowers the same.
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-mpi -split-input-file | polymesh-opt --polymesh-lower-to-cpu -split-input-file | FileCheck %s --check-prefix=OMPI --enable-var-scope
// RUN: not polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-mpi=mpi-implementation=LAM -split-input-file 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-lower-to-cpu=transport=pigeon -split-input-file 2>&1 | FileCheck %s --check-prefix=TRANSPORT

// --polymesh-exchange-to-mpi: --polymesh-exchange-to-cpu's code, except that
// each send/recv row asks the runtime where its message goes; a peer in
// another process is a blocking mpi.send / mpi.recv of a memref<?xi8> view
// on mpi.comm_world, in pieces of at most 1 GiB. Collectives stay runtime
// calls. --polymesh-lower-to-cpu=transport=mpi lowers the mpi ops with
// upstream's MPI-to-LLVM patterns for the implementation the DLTI names.

// UNKNOWN: error: unknown MPI implementation 'LAM': the MPI lowering knows OpenMPI and MPICH
// TRANSPORT: error: unknown transport 'pigeon': use runtime or mpi

// Irregular ids, rows to columns across two meshes: grouped send/recv.
// CHECK: module attributes {dlti.map = #dlti.map<"MPI:Implementation" = "OpenMPI">}
// CHECK-LABEL: func.func @send_recv__part0(
// CHECK-SAME: %[[RT:.*]]: !llvm.ptr, %[[DEV:.*]]: i64,
// CHECK: llvm.call @polymesh_rt_group_start(%[[RT]], %[[DEV]])
// CHECK: scf.for
// CHECK: "llvm.intr.memcpy"
// CHECK: %[[FLAG:.*]] = arith.extui %[[SEND:.*]] : i1 to i32
// CHECK: %[[ROUTE:.*]] = llvm.call @polymesh_rt_mpi_route(%[[RT]], %[[DEV]], %[[PEER:.*]], %[[FLAG]]) : (!llvm.ptr, i64, i64, i32) -> i64
// CHECK: %[[LOCAL:.*]] = arith.cmpi slt, %[[ROUTE]], %{{.*}} : i64
// CHECK: scf.if %[[LOCAL]] {
// CHECK: scf.if %[[SEND]] {
// CHECK-NEXT: llvm.call @polymesh_rt_send(%[[RT]], %[[DEV]], %[[PEER]],
// CHECK: } else {
// CHECK-NEXT: llvm.call @polymesh_rt_recv(%[[RT]], %[[DEV]], %[[PEER]],
// CHECK: } else {
// CHECK: %[[HIGH:.*]] = arith.shrui %[[ROUTE]], %{{.*}} : i64
// CHECK: %[[RANK:.*]] = arith.trunci %[[HIGH]] : i64 to i32
// CHECK: %[[TAG:.*]] = arith.trunci %[[ROUTE]] : i64 to i32
// CHECK: %[[WORLD:.*]] = mpi.comm_world : !mpi.comm
// CHECK: %[[PIECE:.*]] = arith.constant 1073741824 : i64
// CHECK: arith.ceildivsi %{{.*}}, %[[PIECE]] : i64
// CHECK: scf.for
// CHECK: arith.minsi %{{.*}}, %[[PIECE]] : i64
// CHECK: %[[VIEW:.*]] = builtin.unrealized_conversion_cast %{{.*}} : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> to memref<?xi8>
// CHECK: scf.if %[[SEND]] {
// CHECK-NEXT: mpi.send(%[[VIEW]], %[[TAG]], %[[RANK]], %[[WORLD]]) : memref<?xi8>, i32, i32
// CHECK-NEXT: } else {
// CHECK-NEXT: mpi.recv(%[[VIEW]], %[[TAG]], %[[RANK]], %[[WORLD]]) : memref<?xi8>, i32, i32
// CHECK: llvm.call @polymesh_rt_group_end(%[[RT]], %[[DEV]])

// After the LLVM lowering, calls of Open MPI's MPI_Send and MPI_Recv on
// its world communicator and int8 datatype (the JIT binds them to calls
// that wait at most --mpi-timeout), and no mpi op left.
// OMPI: module attributes {dlti.map = #dlti.map<"MPI:Implementation" = "OpenMPI">}
// OMPI-DAG: llvm.func @MPI_Recv(!llvm.ptr, i32, !llvm.ptr, i32, i32, !llvm.ptr, !llvm.ptr) -> i32
// OMPI-DAG: llvm.func @MPI_Send(!llvm.ptr, i32, !llvm.ptr, i32, i32, !llvm.ptr) -> i32
// OMPI-DAG: llvm.mlir.global external @ompi_mpi_comm_world()
// OMPI-DAG: llvm.mlir.global external @ompi_mpi_int8_t()
// OMPI-LABEL: llvm.func @send_recv__part0(
// OMPI: llvm.call @polymesh_rt_mpi_route
// OMPI: llvm.mlir.addressof @ompi_mpi_comm_world
// OMPI: llvm.call @MPI_Send(
// OMPI: llvm.call @MPI_Recv(
// OMPI-NOT: mpi.
// OMPI-NOT: unrealized_conversion_cast
// OMPI-LABEL: llvm.func @send_recv__part1(

// MPICH's handles are constants: MPI_COMM_WORLD is 0x44000000.
// MPICH: module attributes {dlti.map = #dlti.map<"MPI:Implementation" = "MPICH">}
// MPICH-NOT: ompi_mpi
// MPICH-LABEL: llvm.func @send_recv__part0(
// MPICH: llvm.mlir.constant(1140850688 : i64) : i64
// MPICH: llvm.call @MPI_Send(

polymesh.mesh @a = <["x"=3], device_ids=[4, 0, 2]>
polymesh.mesh @b = <["y"=2], device_ids=[5, 1]>

func.func @send_recv(%x: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"y"}]>}) {
  return %x : tensor<8x6xf32>
}

// -----

// An all-gather and an all-reduce: collectives stay calls of the runtime,
// whose backend decides per member what crosses processes; no mpi op.
// CHECK-LABEL: func.func @collectives__part0(
// CHECK-NOT: mpi.
// CHECK: llvm.call @polymesh_rt_all_gather(
// CHECK-NOT: mpi.
// CHECK: llvm.call @polymesh_rt_all_reduce(
// CHECK-NOT: mpi.
// CHECK: return
// OMPI-LABEL: llvm.func @collectives__part0(
// OMPI-NOT: llvm.call @MPI_
// OMPI: llvm.return

polymesh.mesh @m = <["x"=4], device_ids=[7, 1, 5, 3]>

func.func @collectives(%x: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>},
                       %p: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}], unreduced={"x"}>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>},
        tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  return %x, %p : tensor<16x8xf32>, tensor<16x8xf32>
}
