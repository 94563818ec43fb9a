// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cpu -split-input-file | FileCheck %s --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan -split-input-file | FileCheck %s --check-prefix=PLAN
// RUN: polymesh-opt %s --polymesh-propagate '--polymesh-plan=print-plan' -split-input-file -o /dev/null | FileCheck %s --check-prefix=PRINT

// A data-parallel sum over 4,096 devices: the plan writes the all-reduce as
// 4,096 pieces (not the 33.5 million transfers they stand for), the
// schedule reads one all-reduce off them, from the source tile into the
// destination tile, and the tables grow with the group, not with its
// square: the group's shape stored once, and one block (one comm row) for
// every device, whose rank is read off its position (the ranks table:
// position % 4096). Before symbolic reductions the
// planner refused this reshard (2^22 transfers at most, docs/limits.md);
// before groups were stored by shape the members table alone was 4,096^2
// entries (docs/lowering.md, "The tables").
// PLAN-LABEL: func.func @sum(
// PLAN: all_reduce chunk 0 devices [0, 1, 2,
// PLAN-SAME: pieces {0: [0, 0] : [1, 64]} {1: [1, 0] : [2, 64]}
// PLAN-SAME: {4095: [4095, 0] : [4096, 64]}
// PLAN-NOT: ->
// PLAN: local_copy
// The plan report prints the pieces too, with the totals of the transfers
// they stand for (2 x 4,095 x 1 MiB), never the transfers.
// PRINT-LABEL: sum loc(
// PRINT-NEXT: plan for 4096x64 x 4B: 2 steps in 2 chunks
// PRINT-NEXT: bytes moved 8587837440 (lower bound 8587837440)
// PRINT-NEXT: reduces in place to
// PRINT-NEXT: chunk 0 all_reduce devices=[0, 1, 2,
// PRINT-NEXT: piece [0:1, 0:64] summed onto 0
// PRINT: piece [4095:4096, 0:64] summed onto 4095
// PRINT-NEXT: chunk 1 local_copy
// CHECK-DAG: memref.global "private" constant @__polymesh_sum__plan0_members : memref<4096xi64>
// CHECK-DAG: memref.global "private" constant @__polymesh_sum__plan0_blocks : memref<1xi64> = dense<0>
// CHECK-DAG: memref.global "private" constant @__polymesh_sum__plan0_ranks : memref<1x3xi64> = dense<{{\[}}[1, 4096, 1]]>
// CHECK-DAG: memref.global "private" constant @__polymesh_sum__plan0_comms : memref<1x8xi64> = dense<{{\[}}[4, 0, 0, 1048576, 0, 0, 1, 0]]>
// CHECK-LABEL: func.func @sum__part0(
// CHECK: llvm.call @polymesh_rt_all_reduce(
// CHECK-NOT: llvm.call @polymesh_rt_send
// CHECK: bufferization.to_tensor

polymesh.mesh @data = <["x"=4096]>

func.func @sum(%g: tensor<4096x64xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}], unreduced={"x"}>})
    -> (tensor<4096x64xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}]>}) {
  return %g : tensor<4096x64xf32>
}

// -----

// The same partial sums to row blocks: one reduce-scatter from the source
// tile (its row blocks are the pieces in rank order) into the destination
// tile, again one block for all.
// PLAN-LABEL: func.func @scatter(
// PLAN: reduce_scatter chunk 0 devices [0, 1, 2,
// PLAN-SAME: pieces {0: [0, 0] : [1, 64]}
// CHECK-DAG: memref.global "private" constant @__polymesh_scatter__plan0_members : memref<4096xi64>
// CHECK-DAG: memref.global "private" constant @__polymesh_scatter__plan0_blocks : memref<1xi64> = dense<0>
// CHECK-DAG: memref.global "private" constant @__polymesh_scatter__plan0_comms : memref<1x8xi64> = dense<{{\[}}[5, 0, 0, 256, 0, 0, 1, 0]]>
// CHECK-LABEL: func.func @scatter__part0(
// CHECK: llvm.call @polymesh_rt_reduce_scatter(
// CHECK-NOT: llvm.call @polymesh_rt_send

polymesh.mesh @data = <["x"=4096]>

func.func @scatter(%g: tensor<4096x64xf32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}], unreduced={"x"}>})
    -> (tensor<4096x64xf32> {polymesh.sharding = #polymesh.sharding<@data, [{"x"}, {}]>}) {
  return %g : tensor<4096x64xf32>
}
