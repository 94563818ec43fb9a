// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu -split-input-file | FileCheck %s --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition -split-input-file \
// RUN:   | polymesh-opt --polymesh-lower-to-cpu -split-input-file | FileCheck %s --enable-var-scope

// --polymesh-lower-to-cpu: a plan's rows become tables (llvm globals after
// lowering), shared by every device class; each step phase becomes loops over
// the calling device's rows, memcpy runs, and calls into the runtime.

// A broadcast step (the Orbax restore pattern): the two steps' broadcasts
// have disjoint groups, so they run side by side: one polymesh_rt_broadcast
// call site. Tables hold each distinct device block once, relative to the
// device: devices 0 and 1 (the roots) do the same thing, and so do the
// receivers 2 to 7, whose rank in the group is read off their position
// ((position / 2) % 4, the `ranks` table), so 8 devices need 2 blocks (the
// `blocks` table, an entry per run of 2 positions: position / 2); the
// group's members are device id differences and the
// root is its rank in the group (0). Each column half is a whole tile on the root
// and on the receivers, so it is broadcast in place: from the root's source
// tile (space 0) into the receivers' destination tiles (space 1), without
// staging; the only copies are the roots' local ones.
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=4, "tp"=2]>

// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_members(dense<[0, 2, 4, 6]> : tensor<4xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_blocks(dense<[0, 1, 1, 1]> : tensor<4xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_ranks(dense<{{\[\[}}2, 4, 1]]> : tensor<1x3xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_ranges(
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_copies(dense<{{\[\[}}0, 0, 0, 1, 0, 1024, 1, 0, 0]]> : tensor<1x9xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_comms(dense<{{\[\[}}2, 0, 0, 1024, 0, 0, -1, 0], [2, 0, 0, 1024, 0, 1, -1, 0]]> : tensor<2x8xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_restore__plan0_staging(dense<0> : tensor<2xi64>)
// CHECK-DAG: llvm.func @polymesh_rt_broadcast(!llvm.ptr, i64, !llvm.ptr, i64, i64, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK-LABEL: llvm.func @restore__part0(
// CHECK-SAME: %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64,
// CHECK: llvm.call @polymesh_rt_staging
// CHECK: llvm.mlir.addressof @__polymesh_restore__plan0_members
// CHECK: llvm.call @polymesh_rt_broadcast
// CHECK-NOT: llvm.call @polymesh_rt_broadcast
// CHECK: llvm.return
// CHECK-NOT: polymesh.
func.func @restore(%a: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>}) {
  return %a : tensor<16x32xf32>
}

// -----

// Rows to columns across meshes: every box is packed out of its row tile
// (it is not one run there) right before its send, inside the group, so
// that it leaves while the next box is packed. The comms table's last two
// columns are the copy rows to run before each call, counted from the
// device's first copy row in the segment: device 0 packs its row 0 before
// its send to device 2 (peer +2, rank +2) and row 1 before its send to
// device 3, device 1 the same rows of its own block before its sends to
// devices 2 (+1) and 3 (+2); the receivers (kind 1) take each box in place
// (one run of a column tile), with nothing to pack.
polymesh.mesh @rows = <["x"=2], device_ids=[0, 1]>
polymesh.mesh @cols = <["y"=2], device_ids=[2, 3]>

// CHECK-DAG: llvm.mlir.global private constant @__polymesh_transpose__plan0_comms(dense<{{\[\[}}0, 2, 0, 64, 2, 2, 0, 1], [0, 3, 64, 64, 3, 2, 1, 2], [0, 1, 0, 64, 1, 2, 0, 1], [0, 2, 64, 64, 2, 2, 1, 2], [1, -2, 0, 64, -2, 1, 0, 0], [1, -1, 64, 64, -1, 1, 0, 0], [1, -3, 0, 64, -3, 1, 0, 0], [1, -2, 64, 64, -2, 1, 0, 0]]> : tensor<8x8xi64>)
// CHECK-LABEL: llvm.func @transpose__part0(
// CHECK: llvm.call @polymesh_rt_group_start
// CHECK: "llvm.intr.memcpy"
// CHECK: llvm.call @polymesh_rt_send
// CHECK: llvm.call @polymesh_rt_recv
// CHECK: llvm.call @polymesh_rt_group_end
func.func @transpose(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@rows, [{"x"}, {}]>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@cols, [{}, {"y"}]>}) {
  return %x : tensor<8x8xf32>
}

// -----

// A permutation between disjoint meshes: send/recv rows inside one group.
polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
polymesh.mesh @b = <["x"=2], device_ids=[3, 2]>

// CHECK-LABEL: llvm.func @permute__part0(
// CHECK: llvm.call @polymesh_rt_group_start
// CHECK: llvm.call @polymesh_rt_send
// CHECK: llvm.call @polymesh_rt_recv
// CHECK: llvm.call @polymesh_rt_group_end
// CHECK-NOT: llvm.call @polymesh_rt_broadcast
func.func @permute(%x: tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}, {}]>}) {
  return %x : tensor<8x4xi32>
}

// -----

// Partial sums: an all-reduce is one polymesh_rt_all_reduce, from the
// source tile straight into the result tile (the plan's copy of the sum to
// the result is the call's out-of-place form), so the source is not
// written and not copied first. Sums that are no collective add element by
// element (collectives-cpu.mlir).
polymesh.mesh @m = <["y"=2]>

// CHECK-LABEL: llvm.func @sum__part0(
// CHECK-NOT: "llvm.intr.memcpy"
// CHECK: llvm.call @polymesh_rt_all_reduce
// CHECK-NOT: "llvm.intr.memcpy"
// CHECK: llvm.return
func.func @sum(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>},
               %b: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>})
    -> (tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  %e = tensor.empty() : tensor<4x4xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %r = linalg.matmul ins(%a, %b : tensor<4x6xf32>, tensor<6x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
