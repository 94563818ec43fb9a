// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cpu -split-input-file | FileCheck %s --enable-var-scope

// --polymesh-exchange-to-cpu: the first stage of --polymesh-lower-to-cpu on
// its own. Each polymesh.exchange becomes its device's share of the plan
// (an OpConversionPattern): loads from the plan's tables (memref.global,
// indexed by the device's block), scf loops of memcpy runs, and calls of
// the loopback runtime, between a to_buffer of the input tile and a
// to_tensor of the result. One case per kind of communication.

// An all-gather over a mesh with odd ids: ranks (sorted ids) are not the
// rows' order, so each device packs its rows at rank * 128 bytes of
// staging, gathers in place (result space -1) and unpacks: 4 blocks,
// which differ in their copy rows only. The group is stored once, as ids
// relative to its first member; each block's range row ends with (members
// begin, end, constant rank 0, rank digits [0, 1)): the rank is read off
// the position, (position / 1) % 4.
// CHECK-DAG: memref.global "private" constant @__polymesh_all_gather__plan0_blocks : memref<4xi64> = dense<[0, 1, 2, 3]>
// CHECK-DAG: memref.global "private" constant @__polymesh_all_gather__plan0_members : memref<4xi64> = dense<[0, 1, 2, 3]>
// CHECK-DAG: memref.global "private" constant @__polymesh_all_gather__plan0_ranks : memref<1x3xi64> = dense<{{\[\[}}1, 4, 1]]>
// CHECK-DAG: memref.global "private" constant @__polymesh_all_gather__plan0_ranges : memref<8x12xi64> = dense<{{\[\[}}0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0], [5, 5, 1, 1, 5, 6, 5, 0, 0, 0, 0, 0], [10, 10, 2, 2, 10, 11, 10, 0, 0, 0, 0, 0], [15, 15, 3, 3, 15, 16, 15, 0, 0, 0, 0, 0], [1, 2, 0, 1, 2, 5, 1, 0, 4, 0, 0, 1], [6, 7, 1, 2, 7, 10, 6, 0, 4, 0, 0, 1], [11, 12, 2, 3, 12, 15, 11, 0, 4, 0, 0, 1], [16, 17, 3, 4, 17, 20, 16, 0, 4, 0, 0, 1]]>
// CHECK-DAG: memref.global "private" constant @__polymesh_all_gather__plan0_comms : memref<4x8xi64> = dense<{{\[\[}}3, 0, 0, 128, 0, 2, -1, 0], [3, 0, 0, 128, 0, 2, -1, 0], [3, 0, 0, 128, 0, 2, -1, 0], [3, 0, 0, 128, 0, 2, -1, 0]]>
// CHECK-LABEL: func.func @all_gather__part0(
// CHECK-SAME: %[[RT:.*]]: !llvm.ptr, %[[DEV:.*]]: i64, %[[POS:.*]]: index, %[[IN:.*]]: tensor<4x8xf32>) -> tensor<16x8xf32>
// CHECK: %[[GROUP:.*]] = llvm.alloca %{{.*}} x i64 {alignment = 8 : i64, polymesh.group_buffer}
// CHECK: bufferization.to_buffer %[[IN]] read_only : tensor<4x8xf32> to memref<4x8xf32>
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<16x8xf32>
// CHECK: %[[BLOCKS:.*]] = memref.get_global @__polymesh_all_gather__plan0_blocks
// CHECK: memref.load %[[BLOCKS]][%[[POS]]]
// CHECK: llvm.call @polymesh_rt_staging(%[[RT]], %[[DEV]], %{{.*}})
// CHECK: "llvm.intr.memcpy"
// The caller's group, written out as device ids, then one call per row.
// CHECK: llvm.store %{{.*}}, %{{.*}} : i64, !llvm.ptr
// CHECK: scf.for
// CHECK: llvm.call @polymesh_rt_all_gather(%[[RT]], %[[DEV]], %[[GROUP]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK: bufferization.to_tensor %[[OUT]] restrict : memref<16x8xf32> to tensor<16x8xf32>
// The plan stays for the later stages.
// CHECK-LABEL: func.func private @all_gather__plan0(
// CHECK: polymesh.transfer
// CHECK-NOT: polymesh.exchange

polymesh.mesh @m = <["x"=4], device_ids=[3, 0, 2, 1]>

func.func @all_gather(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  return %a : tensor<16x8xf32>
}

// -----

// A sum over "y" in two groups side by side ({0, 1} and {2, 3}): the
// devices differ by rank only, which is read off their position
// ((position / 1) % 2), so 1 block. The sum goes from the source tile to
// the result tile (result space 1): the source is not written, so it is
// not copied first.
// CHECK-DAG: memref.global "private" constant @__polymesh_all_reduce__plan0_blocks : memref<1xi64> = dense<0>
// CHECK-DAG: memref.global "private" constant @__polymesh_all_reduce__plan0_members : memref<2xi64> = dense<[0, 1]>
// CHECK-DAG: memref.global "private" constant @__polymesh_all_reduce__plan0_ranks : memref<1x3xi64> = dense<{{\[\[}}1, 2, 1]]>
// CHECK-DAG: memref.global "private" constant @__polymesh_all_reduce__plan0_comms : memref<1x8xi64> = dense<{{\[\[}}4, 0, 0, 256, 0, 0, 1, 0]]>
// CHECK-LABEL: func.func @all_reduce__part0(
// CHECK-NOT: llvm.call @malloc
// The rank: a digit of the position per row of the ranks table.
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: arith.remsi
// Out of place where the row's result space is set (not -1): the result.
// CHECK: %[[IN_PLACE:.*]] = arith.cmpi eq, %{{.*}}, %c-1_i64 : i64
// CHECK: %[[TO:.*]] = arith.select %[[IN_PLACE]], %[[AT:[0-9]+]], %{{[0-9]+}} : i64
// CHECK-NEXT: %[[SEND:.*]] = llvm.inttoptr %[[AT]] : i64 to !llvm.ptr
// CHECK-NEXT: %[[RECV:.*]] = llvm.inttoptr %[[TO]] : i64 to !llvm.ptr
// CHECK: llvm.call @polymesh_rt_all_reduce(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[SEND]], %[[RECV]], %{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NOT: llvm.call @free
// CHECK: bufferization.to_tensor

polymesh.mesh @m = <["x"=2, "y"=2]>

func.func @all_reduce(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}], unreduced={"y"}>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}) {
  return %a : tensor<16x8xf32>
}

// -----

// Partial sums over all of "x" to row blocks: one reduce-scatter from the
// source tile (space 0), whose row blocks are the pieces in rank order,
// into the result tile (space 1, offset 0): nothing packed, unpacked,
// copied or allocated, and one block for the four devices.
// CHECK-DAG: memref.global "private" constant @__polymesh_reduce_scatter__plan0_blocks : memref<1xi64> = dense<0>
// CHECK-DAG: memref.global "private" constant @__polymesh_reduce_scatter__plan0_comms : memref<1x8xi64> = dense<{{\[\[}}5, 0, 0, 128, 0, 0, 1, 0]]>
// CHECK-NOT: @__polymesh_reduce_scatter__plan0_copies
// CHECK-LABEL: func.func @reduce_scatter__part0(
// CHECK-SAME: tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NOT: llvm.call @malloc
// CHECK: llvm.call @polymesh_rt_reduce_scatter(
// CHECK-NOT: llvm.call @polymesh_rt_all_reduce
// CHECK-NOT: llvm.call @free
// CHECK: bufferization.to_tensor

polymesh.mesh @m = <["x"=4]>

func.func @reduce_scatter(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}], unreduced={"x"}>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}) {
  return %a : tensor<16x8xf32>
}

// -----

// Cross-mesh: the Orbax restore's broadcasts from the replica mesh to the
// training mesh, both groups side by side, in place (space 0 on the roots,
// space 1 on the receivers). Both classes share the plan's tables; the
// receivers share one block. The root's id is read from the group at the
// root's rank (the comm row's rank column).
// CHECK-DAG: memref.global "private" constant @__polymesh_broadcast__plan0_blocks : memref<4xi64> = dense<[0, 1, 1, 1]>
// CHECK-DAG: memref.global "private" constant @__polymesh_broadcast__plan0_members : memref<4xi64> = dense<[0, 2, 4, 6]>
// CHECK-LABEL: func.func @broadcast__part0(
// CHECK: %[[ROOT_RANK:.*]] = memref.load %{{.*}}[%{{.*}}, %c4{{.*}}] : memref<2x8xi64>
// CHECK-NEXT: %[[SLOT:.*]] = llvm.getelementptr %[[GROUP:.*]][%[[ROOT_RANK]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT: %[[ROOT:.*]] = llvm.load %[[SLOT]] : !llvm.ptr -> i64
// CHECK: llvm.call @polymesh_rt_broadcast(%{{.*}}, %{{.*}}, %[[GROUP]], %{{.*}}, %[[ROOT]],
// CHECK-NOT: llvm.call @polymesh_rt_broadcast(
// CHECK-LABEL: func.func @broadcast__part1(
// CHECK-SAME: tensor<0x0xf32>) -> tensor<16x16xf32>
// CHECK: memref.get_global @__polymesh_broadcast__plan0_blocks
// CHECK: llvm.call @polymesh_rt_broadcast(

polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=4, "tp"=2]>

func.func @broadcast(%a: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>}) {
  return %a : tensor<16x32xf32>
}

// -----

// Irregular ids and uneven rows to columns: grouped sends and receives,
// each box packed right before its send; a device with no call runs its
// copies outside the group.
// CHECK-DAG: memref.global "private" constant @__polymesh_send_recv__plan0_blocks : memref<5xi64> = dense<[0, 1, 2, 3, 4]>
// CHECK-DAG: memref.global "private" constant @__polymesh_send_recv__plan0_staging : memref<5xi64> = dense<[72, 0, 48, 72, 0]>
// CHECK-LABEL: func.func @send_recv__part0(
// CHECK: scf.if
// CHECK-NEXT: llvm.call @polymesh_rt_group_start
// CHECK: scf.for
// CHECK: "llvm.intr.memcpy"
// CHECK: scf.if
// CHECK-NEXT: llvm.call @polymesh_rt_send
// CHECK-NEXT: } else {
// CHECK-NEXT: llvm.call @polymesh_rt_recv
// CHECK: llvm.call @polymesh_rt_group_end
// CHECK-NEXT: } else {
// CHECK-LABEL: func.func @send_recv__part1(
// CHECK-SAME: tensor<0x0xf32>) -> tensor<8x3xf32>
// CHECK-LABEL: func.func @send_recv__part2(
// CHECK-SAME: tensor<2x6xf32>) -> tensor<0x0xf32>

polymesh.mesh @a = <["x"=3], device_ids=[4, 0, 2]>
polymesh.mesh @b = <["y"=2], device_ids=[5, 1]>

func.func @send_recv(%x: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"y"}]>}) {
  return %x : tensor<8x6xf32>
}
