// RUN: polymesh-opt %s --polymesh-plan -split-input-file | FileCheck %s
// RUN: polymesh-opt %polymesh_src_root/examples/orbax-single-replica-restore.mlir --polymesh-propagate --polymesh-plan | FileCheck %s --check-prefix=EXAMPLE

// --polymesh-plan on reshards between different meshes: the patterns no
// peer lowers (sub-meshes, disjoint meshes, single devices, other axes over
// the same devices, other device orders).

// The Orbax single-replica restore: one replica (devices 0 and 1) read the
// checkpoint and broadcasts it to the training mesh. Devices 0 and 1 copy
// locally; every other device receives its half once, in exactly two
// broadcasts of 16 devices (tp = 0: even ids, tp = 1: odd ids).

polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=16, "tp"=2]>

// CHECK-LABEL: func.func @orbax_restore
// CHECK: polymesh.transfer %arg0 <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [8, 4]} {1 -> [1], [0, 4] : [8, 8]},
// CHECK-NEXT: broadcast chunk 0 devices [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]
// CHECK-SAME:   {0 -> [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30], [0, 0] : [8, 4]},
// CHECK-NEXT: broadcast chunk 0 devices [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31]
// CHECK-SAME:   {1 -> [3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31], [0, 4] : [8, 8]}
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @orbax_restore(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@train, [{}, {"tp"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// The same on the example itself, after propagation inserted the reshard
// before @restore's return.
// EXAMPLE-LABEL: func.func @restore
// EXAMPLE: polymesh.transfer %arg0 <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
// EXAMPLE-NEXT: local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4096, 512]} {1 -> [1], [0, 512] : [4096, 1024]},
// EXAMPLE-NEXT: broadcast chunk 0 devices [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30]
// EXAMPLE-SAME:   {0 -> [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30], [0, 0] : [4096, 512]},
// EXAMPLE-NEXT: broadcast chunk 0 devices [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31]
// EXAMPLE-SAME:   {1 -> [3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31], [0, 512] : [4096, 1024]}
// EXAMPLE-NEXT: ] : tensor<4096x1024xf32>
// EXAMPLE-NEXT: return

// -----

// Pipeline stages on disjoint devices (0-3 and 4-7).

polymesh.mesh @stage0 = <["dp"=2, "tp"=2], device_ids=[0, 1, 2, 3]>
polymesh.mesh @stage1 = <["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]>

// Same sharding, other devices: device i sends its whole tile to i + 4, a
// single permute with no local work.
// CHECK-LABEL: func.func @pipeline_stage
// CHECK: polymesh.transfer %arg0 <@stage0, [{"dp"}, {"tp"}]> -> <@stage1, [{"dp"}, {"tp"}]> steps [
// CHECK-NEXT: collective_permute chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-SAME:   {0 -> [4], [0, 0] : [4, 4]} {1 -> [5], [0, 4] : [4, 8]} {2 -> [6], [4, 0] : [8, 4]} {3 -> [7], [4, 4] : [8, 8]}{{$}}
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @pipeline_stage(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"dp"}, {"tp"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@stage1, [{"dp"}, {"tp"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Another sharding on the next stage: rows [0, 4) go to 4 and 6, rows
// [4, 8) to 5 and 7; every block is sent once to both of its receivers.
// CHECK-LABEL: func.func @pipeline_stage_reshard
// CHECK: polymesh.transfer %arg0 <@stage0, [{"dp"}, {"tp"}]> -> <@stage1, [{"tp"}, {}]> steps [
// CHECK-NEXT: broadcast chunk 0 devices [0, 4, 6] {0 -> [4, 6], [0, 0] : [4, 4]},
// CHECK-NEXT: broadcast chunk 0 devices [1, 4, 6] {1 -> [4, 6], [0, 4] : [4, 8]},
// CHECK-NEXT: broadcast chunk 0 devices [2, 5, 7] {2 -> [5, 7], [4, 0] : [8, 4]},
// CHECK-NEXT: broadcast chunk 0 devices [3, 5, 7] {3 -> [5, 7], [4, 4] : [8, 8]}
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @pipeline_stage_reshard(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"dp"}, {"tp"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@stage1, [{"tp"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Single devices and whole meshes.

polymesh.mesh @dev3 = <[], device_ids=[3]>
polymesh.mesh @m8 = <["w"=8]>
polymesh.mesh @pair = <["p"=2], device_ids=[0, 1]>

// One device to the whole mesh, replicated: device 3 keeps its copy and
// broadcasts to the seven others.
// CHECK-LABEL: func.func @device_to_mesh
// CHECK: polymesh.transfer %arg0 <@dev3, [{}]> -> <@m8, [{}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [3] {3 -> [3], [0] : [8]},
// CHECK-NEXT: broadcast chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7] {3 -> [0, 1, 2, 4, 5, 6, 7], [0] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @device_to_mesh(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@dev3, [{}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m8, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// The whole mesh to one device: device 3 keeps its element and receives
// the seven others, one from each device.
// CHECK-LABEL: func.func @mesh_to_device
// CHECK: polymesh.transfer %arg0 <@m8, [{"w"}]> -> <@dev3, [{}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [3] {3 -> [3], [3] : [4]},
// CHECK-NEXT: send_recv chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-SAME:   {0 -> [3], [0] : [1]} {1 -> [3], [1] : [2]} {2 -> [3], [2] : [3]} {4 -> [3], [4] : [5]}
// CHECK-SAME:   {5 -> [3], [5] : [6]} {6 -> [3], [6] : [7]} {7 -> [3], [7] : [8]}{{$}}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @mesh_to_device(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m8, [{"w"}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@dev3, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// A replicated pair scattered over a larger mesh: the six receivers outside
// the pair are shared between its two replicas, three each.
// CHECK-LABEL: func.func @sub_mesh_scatter
// CHECK: polymesh.transfer %arg0 <@pair, [{}]> -> <@m8, [{"w"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [1]} {1 -> [1], [1] : [2]},
// CHECK-NEXT: send_recv chunk 0 devices [0, 2, 4, 6] {0 -> [2], [2] : [3]} {0 -> [4], [4] : [5]} {0 -> [6], [6] : [7]},
// CHECK-NEXT: send_recv chunk 0 devices [1, 3, 5, 7] {1 -> [3], [3] : [4]} {1 -> [5], [5] : [6]} {1 -> [7], [7] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @sub_mesh_scatter(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@pair, [{}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m8, [{"w"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Overlapping meshes with different axes over the same eight devices.
// On @mesh1 device (a, b) has id 4a + b; on @mesh3 device c has id c.

polymesh.mesh @mesh1 = <["a"=2, "b"=4]>
polymesh.mesh @mesh3 = <["c"=8]>

// [{"a", "b"}] numbers the row blocks by 4a + b, the device id, exactly as
// [{"c"}] does: device-equivalent, nothing moves.
// CHECK-LABEL: func.func @overlap_device_equivalent
// CHECK: polymesh.transfer %arg0 <@mesh1, [{"a", "b"}, {}]> -> <@mesh3, [{"c"}, {}]> steps [] : tensor<16x4xf32>
func.func @overlap_device_equivalent(%x: tensor<16x4xf32> {polymesh.sharding = #polymesh.sharding<@mesh1, [{"a", "b"}, {}]>}) -> tensor<16x4xf32> {
  %0 = polymesh.reshard %x <@mesh3, [{"c"}, {}]> : tensor<16x4xf32>
  return %0 : tensor<16x4xf32>
}

// [{"b", "a"}] gives device d block 2(d % 4) + d / 4: devices 0 and 7 keep
// their block, the six others form one permutation.
// CHECK-LABEL: func.func @overlap_permuted
// CHECK: polymesh.transfer %arg0 <@mesh1, [{"b", "a"}, {}]> -> <@mesh3, [{"c"}, {}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 7] {0 -> [0], [0, 0] : [2, 4]} {7 -> [7], [14, 0] : [16, 4]},
// CHECK-NEXT: collective_permute chunk 0 devices [1, 2, 3, 4, 5, 6]
// CHECK-SAME:   {4 -> [1], [2, 0] : [4, 4]} {1 -> [2], [4, 0] : [6, 4]} {2 -> [4], [8, 0] : [10, 4]}
// CHECK-SAME:   {5 -> [3], [6, 0] : [8, 4]} {6 -> [5], [10, 0] : [12, 4]} {3 -> [6], [12, 0] : [14, 4]}{{$}}
// CHECK-NEXT: ] : tensor<16x4xf32>
func.func @overlap_permuted(%x: tensor<16x4xf32> {polymesh.sharding = #polymesh.sharding<@mesh1, [{"b", "a"}, {}]>}) -> tensor<16x4xf32> {
  %0 = polymesh.reshard %x <@mesh3, [{"c"}, {}]> : tensor<16x4xf32>
  return %0 : tensor<16x4xf32>
}

// [{"a"}, {"b"}] -> [{"c"}, {}]: within each half of the devices every
// device keeps one 2x1 block and exchanges one with each other member.
// CHECK-LABEL: func.func @overlap_all_to_all
// CHECK: polymesh.transfer %arg0 <@mesh1, [{"a"}, {"b"}]> -> <@mesh3, [{"c"}, {}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-SAME:   {0 -> [0], [0, 0] : [2, 1]} {1 -> [1], [2, 1] : [4, 2]} {2 -> [2], [4, 2] : [6, 3]} {3 -> [3], [6, 3] : [8, 4]}
// CHECK-SAME:   {4 -> [4], [8, 0] : [10, 1]} {5 -> [5], [10, 1] : [12, 2]} {6 -> [6], [12, 2] : [14, 3]} {7 -> [7], [14, 3] : [16, 4]},
// CHECK-NEXT: all_to_all chunk 0 devices [0, 1, 2, 3]
// CHECK-SAME:   {0 -> [1], [2, 0] : [4, 1]} {0 -> [2], [4, 0] : [6, 1]} {0 -> [3], [6, 0] : [8, 1]}
// CHECK-SAME:   {1 -> [0], [0, 1] : [2, 2]} {1 -> [2], [4, 1] : [6, 2]} {1 -> [3], [6, 1] : [8, 2]}
// CHECK-SAME:   {2 -> [0], [0, 2] : [2, 3]} {2 -> [1], [2, 2] : [4, 3]} {2 -> [3], [6, 2] : [8, 3]}
// CHECK-SAME:   {3 -> [0], [0, 3] : [2, 4]} {3 -> [1], [2, 3] : [4, 4]} {3 -> [2], [4, 3] : [6, 4]},
// CHECK-NEXT: all_to_all chunk 0 devices [4, 5, 6, 7]
// CHECK-SAME:   {4 -> [5], [10, 0] : [12, 1]} {4 -> [6], [12, 0] : [14, 1]} {4 -> [7], [14, 0] : [16, 1]}
// CHECK-SAME:   {5 -> [4], [8, 1] : [10, 2]} {5 -> [6], [12, 1] : [14, 2]} {5 -> [7], [14, 1] : [16, 2]}
// CHECK-SAME:   {6 -> [4], [8, 2] : [10, 3]} {6 -> [5], [10, 2] : [12, 3]} {6 -> [7], [14, 2] : [16, 3]}
// CHECK-SAME:   {7 -> [4], [8, 3] : [10, 4]} {7 -> [5], [10, 3] : [12, 4]} {7 -> [6], [12, 3] : [14, 4]}
// CHECK-NEXT: ] : tensor<16x4xf32>
func.func @overlap_all_to_all(%x: tensor<16x4xf32> {polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>}) -> tensor<16x4xf32> {
  %0 = polymesh.reshard %x <@mesh3, [{"c"}, {}]> : tensor<16x4xf32>
  return %0 : tensor<16x4xf32>
}

// -----

// Reversed device ids: position c of @rev is device 3 - c, so block c moves
// from device c to device 3 - c; two swaps in one permute.

polymesh.mesh @fwd = <["c"=4]>
polymesh.mesh @rev = <["c"=4], device_ids=[3, 2, 1, 0]>

// CHECK-LABEL: func.func @reversed_ids
// CHECK: polymesh.transfer %arg0 <@fwd, [{"c"}]> -> <@rev, [{"c"}]> steps [
// CHECK-NEXT: collective_permute chunk 0 devices [0, 1, 2, 3]
// CHECK-SAME:   {0 -> [3], [0] : [2]} {3 -> [0], [6] : [8]} {1 -> [2], [2] : [4]} {2 -> [1], [4] : [6]}{{$}}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @reversed_ids(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@fwd, [{"c"}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@rev, [{"c"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Replicated on both: every device already holds everything.
// CHECK-LABEL: func.func @reversed_ids_replicated
// CHECK: polymesh.transfer %arg0 <@fwd, [{}]> -> <@rev, [{}]> steps [] : tensor<8xf32>
func.func @reversed_ids_replicated(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@fwd, [{}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@rev, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Partial sums across meshes are all-reduced on the source mesh first, then
// moved: here to the disjoint pair 4, 5.

polymesh.mesh @m = <["a"=2, "b"=2]>
polymesh.mesh @n = <["c"=2], device_ids=[4, 5]>

// CHECK-LABEL: func.func @unreduced_to_other_mesh
// CHECK: polymesh.transfer %arg0 <@m, [{}], unreduced={"a"}> -> <@n, [{"c"}]> steps [
// CHECK-NEXT: all_reduce chunk 0 devices [0, 2]
// CHECK-NEXT: all_reduce chunk 0 devices [1, 3]
// CHECK-NEXT: collective_permute chunk 1 devices [0, 1, 4, 5] {0 -> [4], [0] : [4]} {1 -> [5], [4] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @unreduced_to_other_mesh(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}], unreduced={"a"}>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@n, [{"c"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}
