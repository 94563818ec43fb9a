// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan=batch-min-devices=1 --polymesh-partition --polymesh-exchange-to-cpu -split-input-file | FileCheck %s --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan=batch-min-devices=1 --polymesh-partition --polymesh-exchange-to-cpu -split-input-file | FileCheck %s --check-prefix=COPIES

// The tables of batched plans (docs/lowering.md, "Batched plans"): the
// lowering schedules cell 0 only, and every other device runs the block of
// its counterpart in cell 0, so the tables grow with a cell, not with the
// pod. On a 4 x 4 x 2 pod (device (dp, fsdp, tp) = 8 dp + 2 fsdp + tp).

polymesh.mesh @pod = <["dp"=4, "fsdp"=4, "tp"=2]>

// The all-gather of "fsdp": one block for all 32 devices. Each device's
// group is its cell's four "fsdp" devices, one shape for all (steps of 2);
// its rank is read off its position, (position / 2) % 4 (the ranks
// table), and the gather goes out of place from the source tile into the
// destination tile (result space 1, offset 0), so no row depends on the
// rank and there are no copies at all.
// CHECK-DAG: memref.global "private" constant @__polymesh_gather_fsdp__plan0_members : memref<4xi64> = dense<[0, 2, 4, 6]>
// CHECK-DAG: memref.global "private" constant @__polymesh_gather_fsdp__plan0_ranks : memref<1x3xi64> = dense<{{\[}}[2, 4, 1]]>
// CHECK-DAG: memref.global "private" constant @__polymesh_gather_fsdp__plan0_blocks : memref<1xi64> = dense<0>
// CHECK-DAG: memref.global "private" constant @__polymesh_gather_fsdp__plan0_comms : memref<1x8xi64> = dense<{{\[}}[3, 0, 0, 384, 0, 0, 1, 0]]>
// COPIES-NOT: @__polymesh_gather_fsdp__plan0_copies
func.func @gather_fsdp(%x: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"dp", "fsdp"}, {"tp"}]>}) -> tensor<64x48xf32> {
  %0 = polymesh.reshard %x <@pod, [{"dp"}, {"tp"}]> : tensor<64x48xf32>
  return %0 : tensor<64x48xf32>
}

// The sum over "dp": one block too, groups of the four "dp" devices 8
// apart, rank (position / 8) % 4; the all-reduce (kind 4) sums the source
// tile into the destination tile.
// CHECK-DAG: memref.global "private" constant @__polymesh_reduce_dp__plan0_members : memref<4xi64> = dense<[0, 8, 16, 24]>
// CHECK-DAG: memref.global "private" constant @__polymesh_reduce_dp__plan0_ranks : memref<1x3xi64> = dense<{{\[}}[8, 4, 1]]>
// CHECK-DAG: memref.global "private" constant @__polymesh_reduce_dp__plan0_blocks : memref<1xi64> = dense<0>
// CHECK-DAG: memref.global "private" constant @__polymesh_reduce_dp__plan0_comms : memref<1x8xi64> = dense<{{\[}}[4, 0, 0, 1536, 0, 0, 1, 0]]>
// CHECK-LABEL: func.func @gather_fsdp__part0
// CHECK-LABEL: func.func @reduce_dp__part0
func.func @reduce_dp(%x: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"fsdp"}, {"tp"}], unreduced={"dp"}>}) -> tensor<64x48xf32> {
  %0 = polymesh.reshard %x <@pod, [{"fsdp"}, {"tp"}]> : tensor<64x48xf32>
  return %0 : tensor<64x48xf32>
}

// -----

// The stage handoff: one cell of one sender and one receiver, so two
// blocks for 32 devices: send 768 bytes to the device 16 ids up (rank 16
// up), receive them from 16 down. The senders are positions 0-15 and the
// receivers 16-31: the blocks table is one entry per run of 16 positions,
// read at position / 16.
polymesh.mesh @stage0 = <["dp"=2, "fsdp"=4, "tp"=2]>
polymesh.mesh @stage1 = <["dp"=2, "fsdp"=4, "tp"=2], device_ids=[16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]>
// CHECK-DAG: memref.global "private" constant @__polymesh_stage_handoff__plan0_blocks : memref<2xi64> = dense<[0, 1]>
// CHECK-DAG: memref.global "private" constant @__polymesh_stage_handoff__plan0_comms : memref<2x8xi64> = dense<{{\[}}[0, 16, 0, 768, 16, 0, 0, 0], [1, -16, 0, 768, -16, 1, 0, 0]]>
// CHECK-LABEL: func.func @stage_handoff__part0(
// CHECK-SAME: %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: i64, %[[POS:[^:]*]]: index,
// CHECK: %[[C16:.*]] = arith.constant 16 : index
// CHECK-NEXT: %[[AT:.*]] = arith.divui %[[POS]], %[[C16]] : index
// CHECK-NEXT: %[[BLOCKS:.*]] = memref.get_global @__polymesh_stage_handoff__plan0_blocks : memref<2xi64>
// CHECK-NEXT: memref.load %[[BLOCKS]][%[[AT]]] : memref<2xi64>
func.func @stage_handoff(%x: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"dp", "fsdp"}, {"tp"}]>}) -> tensor<64x48xf32> {
  %0 = polymesh.reshard %x <@stage1, [{"dp", "fsdp"}, {"tp"}]> : tensor<64x48xf32>
  return %0 : tensor<64x48xf32>
}

// -----

// Cells whose ids are not one shift of cell 0's (a permuted mesh): every
// device is scheduled from the expanded plan. Each cell is an exchange of
// whole tiles between its two devices, one all-to-all; where a cell's ids
// run against its positions, its chunks lie backwards in rank order (a
// negative stride, -12 bytes, in the looped copy). The devices' rows come
// in 3 shapes: 3 blocks for 6 devices.
polymesh.mesh @odd = <["r"=3, "x"=2], device_ids=[4, 1, 5, 0, 2, 3]>
// CHECK-DAG: memref.global "private" constant @__polymesh_permuted__plan0_comms : memref<3x8xi64> = dense<{{\[}}[6, 0, 0, 48, 0, 2, 2, 96], [6, 0, 0, 48, 0, 2, 2, 96], [6, 0, 0, 48, 0, 2, 1, 0]]>
// CHECK-DAG: memref.global "private" constant @__polymesh_permuted__plan0_copies : memref<5x12xi64> = dense<{{\[}}[0, 0, 12, 2, 0, 12, 2, 4, -12, 24, 48, 12],
// CHECK-LABEL: func.func @permuted__part0
// CHECK: llvm.call @polymesh_rt_all_to_all(
func.func @permuted(%x: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@odd, [{"x"}, {}]>}) -> tensor<8x6xf32> {
  %0 = polymesh.reshard %x <@odd, [{}, {"x"}]> : tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}
