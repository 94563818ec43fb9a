// RUN: polymesh-opt %s --polymesh-plan=batch-min-devices=1 -split-input-file | FileCheck %s
// RUN: polymesh-opt %s --polymesh-plan -split-input-file | FileCheck %s --check-prefix=SMALL
// RUN: polymesh-opt %s --polymesh-plan="batch-min-devices=1 stats-file=-" -split-input-file -o /dev/null | FileCheck %s --check-prefix=STATS
// RUN: polymesh-opt %s --polymesh-plan="batch-min-devices=0 stats-file=-" -split-input-file -o /dev/null | FileCheck %s --check-prefix=STATS

// Batched plans (docs/planner.md, "Batched plans"): a reshard that repeats
// over mesh axes is planned for cell 0 only and written with `batch`. The
// four reshards of benchmarks/scale on a 4 x 4 x 2 pod, where device
// (dp, fsdp, tp) has id 8 dp + 2 fsdp + tp.
//
// Below the default threshold (1,024 devices) nothing is batched; the
// statistics, which describe the whole plan, are the same either way.
// SMALL-NOT: batch

polymesh.mesh @pod = <["dp"=4, "fsdp"=4, "tp"=2]>

// The all-gather of "fsdp" is one all-gather per (dp, tp) cell: cell 0 is
// devices 0, 2, 4, 6 (dp = 0, tp = 0), rows [0, 16) and columns [0, 24).
// CHECK-LABEL: func.func @gather_fsdp
// CHECK: polymesh.transfer %arg0 <@pod, [{"dp", "fsdp"}, {"tp"}]> -> <@pod, [{"dp"}, {"tp"}]>
// CHECK-SAME: batch [#polymesh.batch_axis<"dp" -> "dp", dim = 0>, #polymesh.batch_axis<"tp" -> "tp", dim = 1>] steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 2, 4, 6] {0 -> [0], [0, 0] : [4, 24]} {2 -> [2], [4, 0] : [8, 24]} {4 -> [4], [8, 0] : [12, 24]} {6 -> [6], [12, 0] : [16, 24]},
// CHECK-NEXT: all_gather chunk 0 devices [0, 2, 4, 6] {0 -> [2, 4, 6], [0, 0] : [4, 24]} {2 -> [0, 4, 6], [4, 0] : [8, 24]} {4 -> [0, 2, 6], [8, 0] : [12, 24]} {6 -> [0, 2, 4], [12, 0] : [16, 24]}
// CHECK-NEXT: ] : tensor<64x48xf32>
// STATS: "function": "gather_fsdp"
// STATS-SAME: "bytes_moved": 36864, "lower_bound_bytes": 36864, "max_device_recv_bytes": 1152, "max_device_send_bytes": 1152, "peak_temp_bytes": 1536, "steps": {"local_copy": 1, "all_gather": 8}
func.func @gather_fsdp(%x: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"dp", "fsdp"}, {"tp"}]>}) -> tensor<64x48xf32> {
  %0 = polymesh.reshard %x <@pod, [{"dp"}, {"tp"}]> : tensor<64x48xf32>
  return %0 : tensor<64x48xf32>
}

// Partial sums over "dp": one all-reduce of the four "dp" devices of each
// (fsdp, tp) cell; cell 0 holds rows [0, 16), columns [0, 24).
// CHECK-LABEL: func.func @reduce_dp
// CHECK: polymesh.transfer %arg0 <@pod, [{"fsdp"}, {"tp"}], unreduced={"dp"}> -> <@pod, [{"fsdp"}, {"tp"}]>
// CHECK-SAME: batch [#polymesh.batch_axis<"fsdp" -> "fsdp", dim = 0>, #polymesh.batch_axis<"tp" -> "tp", dim = 1>] steps [
// CHECK-NEXT: all_reduce chunk 0 devices [0, 8, 16, 24] pieces {0: [0, 0] : [4, 24]} {8: [4, 0] : [8, 24]} {16: [8, 0] : [12, 24]} {24: [12, 0] : [16, 24]},
// CHECK-NEXT: local_copy chunk 1 devices [0, 8, 16, 24] {0 -> [0], [0, 0] : [16, 24]} {8 -> [8], [0, 0] : [16, 24]} {16 -> [16], [0, 0] : [16, 24]} {24 -> [24], [0, 0] : [16, 24]}
// CHECK-NEXT: ] : tensor<64x48xf32>
// STATS: "function": "reduce_dp"
// STATS-SAME: "bytes_moved": 73728, "lower_bound_bytes": 73728, "max_device_recv_bytes": 2304, "max_device_send_bytes": 2304, "peak_temp_bytes": 3840, "steps": {"local_copy": 1, "all_reduce": 8}
func.func @reduce_dp(%x: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"fsdp"}, {"tp"}], unreduced={"dp"}>}) -> tensor<64x48xf32> {
  %0 = polymesh.reshard %x <@pod, [{"fsdp"}, {"tp"}]> : tensor<64x48xf32>
  return %0 : tensor<64x48xf32>
}

// Moving "fsdp" from rows to columns repeats over "dp" only: cell 0 is the
// eight devices of dp = 0 and rows [0, 16).
// CHECK-LABEL: func.func @fsdp_to_tp
// CHECK: polymesh.transfer %arg0 <@pod, [{"dp", "fsdp"}, {"tp"}]> -> <@pod, [{"dp"}, {"fsdp", "tp"}]>
// CHECK-SAME: batch [#polymesh.batch_axis<"dp" -> "dp", dim = 0>] steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 2, 5, 7]
// CHECK-NEXT: send_recv chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7] {0 -> [1], [0, 6] : [4, 12]}
// CHECK-SAME: {7 -> [6], [12, 36] : [16, 42]}
// CHECK-NEXT: ] : tensor<64x48xf32>
// STATS: "function": "fsdp_to_tp"
// STATS-SAME: "bytes_moved": 10752, "lower_bound_bytes": 10752, "max_device_recv_bytes": 384, "max_device_send_bytes": 384, "peak_temp_bytes": 768
func.func @fsdp_to_tp(%x: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"dp", "fsdp"}, {"tp"}]>}) -> tensor<64x48xf32> {
  %0 = polymesh.reshard %x <@pod, [{"dp"}, {"fsdp", "tp"}]> : tensor<64x48xf32>
  return %0 : tensor<64x48xf32>
}

// -----

// A handoff between two disjoint stages repeats over all three axes: one
// tile from device 0 to device 16 stands for the sixteen.
// CHECK-LABEL: func.func @stage_handoff
// CHECK: polymesh.transfer %arg0 <@stage0, [{"dp", "fsdp"}, {"tp"}]> -> <@stage1, [{"dp", "fsdp"}, {"tp"}]>
// CHECK-SAME: batch [#polymesh.batch_axis<"dp" -> "dp", dim = 0>, #polymesh.batch_axis<"fsdp" -> "fsdp", dim = 0>, #polymesh.batch_axis<"tp" -> "tp", dim = 1>] steps [
// CHECK-NEXT: collective_permute chunk 0 devices [0, 16] {0 -> [16], [0, 0] : [8, 24]}
// CHECK-NEXT: ] : tensor<64x48xf32>
// STATS: "function": "stage_handoff"
// STATS-SAME: "bytes_moved": 12288, "lower_bound_bytes": 12288, "max_device_recv_bytes": 768, "max_device_send_bytes": 768, "peak_temp_bytes": 768, "steps": {"collective_permute": 1}
polymesh.mesh @stage0 = <["dp"=2, "fsdp"=4, "tp"=2]>
polymesh.mesh @stage1 = <["dp"=2, "fsdp"=4, "tp"=2], device_ids=[16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]>
func.func @stage_handoff(%x: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"dp", "fsdp"}, {"tp"}]>}) -> tensor<64x48xf32> {
  %0 = polymesh.reshard %x <@stage1, [{"dp", "fsdp"}, {"tp"}]> : tensor<64x48xf32>
  return %0 : tensor<64x48xf32>
}

// -----

// Axes that neither sharding uses pair by name, whatever the device ids:
// "r" replicates both; cell 0 is r = 0 (ids 7, 3, 11, 0).
// CHECK-LABEL: func.func @replicated_axis
// CHECK: batch [#polymesh.batch_axis<"r" -> "r">] steps [
// STATS: "function": "replicated_axis"
// STATS-SAME: "bytes_moved": 540, "lower_bound_bytes": 540, "max_device_recv_bytes": 72, "max_device_send_bytes": 60, "peak_temp_bytes": 132
polymesh.mesh @odd = <["r"=3, "x"=2, "y"=2], device_ids=[7, 3, 11, 0, 5, 9, 1, 4, 10, 2, 8, 6]>
func.func @replicated_axis(%x: tensor<10x6xf32> {polymesh.sharding = #polymesh.sharding<@odd, [{"x"}, {"y"}]>}) -> tensor<10x6xf32> {
  %0 = polymesh.reshard %x <@odd, [{"y", "x"}, {}]> : tensor<10x6xf32>
  return %0 : tensor<10x6xf32>
}

// -----

// What does not repeat is planned whole: tiles of 3 rows (10 over "dp" x
// "fsdp") straddle the slabs of "dp"; no axis is left alone.
// CHECK-LABEL: func.func @straddling_tiles
// CHECK-NOT: batch
// CHECK: ] : tensor<10x4xf32>
polymesh.mesh @small = <["dp"=2, "fsdp"=2]>
func.func @straddling_tiles(%x: tensor<10x4xf32> {polymesh.sharding = #polymesh.sharding<@small, [{"dp", "fsdp"}, {}]>}) -> tensor<10x4xf32> {
  %0 = polymesh.reshard %x <@small, [{"dp"}, {}]> : tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}
