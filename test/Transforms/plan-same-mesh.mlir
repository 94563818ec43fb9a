// RUN: polymesh-opt %s --polymesh-plan -split-input-file | FileCheck %s

// --polymesh-plan on reshards within one mesh: every pattern a user meets,
// pinned step by step (kind, participants, boxes). Boxes print as
// `{sender -> [receivers], lo : hi, flags}` in global coordinates.
//
// On @m = <["a"=2, "b"=4]> device (a, b) has id 4a + b. An 8x8 tensor
// [{"a"}, {}] puts rows [0, 4) on devices 0-3 and rows [4, 8) on 4-7.

polymesh.mesh @m = <["a"=2, "b"=4]>

// Sharded -> replicated over one axis: an all-gather over each group that
// varies on "a" only ({0, 4}, {1, 5}, ...); every device keeps its own rows.
// CHECK-LABEL: func.func @all_gather_one_axis
// CHECK: polymesh.transfer %arg0 <@m, [{"a"}, {}]> -> <@m, [{}, {}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-SAME:   {0 -> [0], [0, 0] : [4, 8]} {1 -> [1], [0, 0] : [4, 8]} {2 -> [2], [0, 0] : [4, 8]} {3 -> [3], [0, 0] : [4, 8]}
// CHECK-SAME:   {4 -> [4], [4, 0] : [8, 8]} {5 -> [5], [4, 0] : [8, 8]} {6 -> [6], [4, 0] : [8, 8]} {7 -> [7], [4, 0] : [8, 8]},
// CHECK-NEXT: all_gather chunk 0 devices [0, 4] {0 -> [4], [0, 0] : [4, 8]} {4 -> [0], [4, 0] : [8, 8]},
// CHECK-NEXT: all_gather chunk 0 devices [1, 5] {1 -> [5], [0, 0] : [4, 8]} {5 -> [1], [4, 0] : [8, 8]},
// CHECK-NEXT: all_gather chunk 0 devices [2, 6] {2 -> [6], [0, 0] : [4, 8]} {6 -> [2], [4, 0] : [8, 8]},
// CHECK-NEXT: all_gather chunk 0 devices [3, 7] {3 -> [7], [0, 0] : [4, 8]} {7 -> [3], [4, 0] : [8, 8]}
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @all_gather_one_axis(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@m, [{}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Sharded -> replicated over both axes: one all-gather of all eight devices,
// each sending its 4x2 tile once to the seven others.
// CHECK-LABEL: func.func @all_gather_two_axes
// CHECK: polymesh.transfer %arg0 <@m, [{"a"}, {"b"}]> -> <@m, [{}, {}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-SAME:   {0 -> [0], [0, 0] : [4, 2]} {1 -> [1], [0, 2] : [4, 4]} {2 -> [2], [0, 4] : [4, 6]} {3 -> [3], [0, 6] : [4, 8]}
// CHECK-SAME:   {4 -> [4], [4, 0] : [8, 2]} {5 -> [5], [4, 2] : [8, 4]} {6 -> [6], [4, 4] : [8, 6]} {7 -> [7], [4, 6] : [8, 8]},
// CHECK-NEXT: all_gather chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-SAME:   {0 -> [1, 2, 3, 4, 5, 6, 7], [0, 0] : [4, 2]} {1 -> [0, 2, 3, 4, 5, 6, 7], [0, 2] : [4, 4]}
// CHECK-SAME:   {2 -> [0, 1, 3, 4, 5, 6, 7], [0, 4] : [4, 6]} {3 -> [0, 1, 2, 4, 5, 6, 7], [0, 6] : [4, 8]}
// CHECK-SAME:   {4 -> [0, 1, 2, 3, 5, 6, 7], [4, 0] : [8, 2]} {5 -> [0, 1, 2, 3, 4, 6, 7], [4, 2] : [8, 4]}
// CHECK-SAME:   {6 -> [0, 1, 2, 3, 4, 5, 7], [4, 4] : [8, 6]} {7 -> [0, 1, 2, 3, 4, 5, 6], [4, 6] : [8, 8]}
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @all_gather_two_axes(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@m, [{}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Removing only the minor axis: all-gathers over "b" within each "a" row.
// CHECK-LABEL: func.func @all_gather_inner_axis
// CHECK: polymesh.transfer %arg0 <@m, [{"a"}, {"b"}]> -> <@m, [{"a"}, {}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-NEXT: all_gather chunk 0 devices [0, 1, 2, 3]
// CHECK-SAME:   {0 -> [1, 2, 3], [0, 0] : [4, 2]} {1 -> [0, 2, 3], [0, 2] : [4, 4]} {2 -> [0, 1, 3], [0, 4] : [4, 6]} {3 -> [0, 1, 2], [0, 6] : [4, 8]},
// CHECK-NEXT: all_gather chunk 0 devices [4, 5, 6, 7]
// CHECK-SAME:   {4 -> [5, 6, 7], [4, 0] : [8, 2]} {5 -> [4, 6, 7], [4, 2] : [8, 4]} {6 -> [4, 5, 7], [4, 4] : [8, 6]} {7 -> [4, 5, 6], [4, 6] : [8, 8]}
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @all_gather_inner_axis(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@m, [{"a"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Replicated -> sharded: every device already holds its tile; local slicing
// only, no communication step.
// CHECK-LABEL: func.func @slice_replicated
// CHECK: polymesh.transfer %arg0 <@m, [{}, {}]> -> <@m, [{"a"}, {"b"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-SAME:   {0 -> [0], [0, 0] : [4, 2]} {1 -> [1], [0, 2] : [4, 4]} {2 -> [2], [0, 4] : [4, 6]} {3 -> [3], [0, 6] : [4, 8]}
// CHECK-SAME:   {4 -> [4], [4, 0] : [8, 2]} {5 -> [5], [4, 2] : [8, 4]} {6 -> [6], [4, 4] : [8, 6]} {7 -> [7], [4, 6] : [8, 8]}{{$}}
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @slice_replicated(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@m, [{"a"}, {"b"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Moving "b" from dim 0 to dim 1: device b keeps block (b, b) and exchanges
// one 2x2 block with each other member; an all-to-all per value of "a".
// CHECK-LABEL: func.func @all_to_all
// CHECK: polymesh.transfer %arg0 <@m, [{"b"}, {}]> -> <@m, [{}, {"b"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-SAME:   {0 -> [0], [0, 0] : [2, 2]} {4 -> [4], [0, 0] : [2, 2]} {1 -> [1], [2, 2] : [4, 4]} {5 -> [5], [2, 2] : [4, 4]}
// CHECK-SAME:   {2 -> [2], [4, 4] : [6, 6]} {6 -> [6], [4, 4] : [6, 6]} {3 -> [3], [6, 6] : [8, 8]} {7 -> [7], [6, 6] : [8, 8]},
// CHECK-NEXT: all_to_all chunk 0 devices [0, 1, 2, 3]
// CHECK-SAME:   {0 -> [1], [0, 2] : [2, 4]} {0 -> [2], [0, 4] : [2, 6]} {0 -> [3], [0, 6] : [2, 8]}
// CHECK-SAME:   {1 -> [0], [2, 0] : [4, 2]} {1 -> [2], [2, 4] : [4, 6]} {1 -> [3], [2, 6] : [4, 8]}
// CHECK-SAME:   {2 -> [0], [4, 0] : [6, 2]} {2 -> [1], [4, 2] : [6, 4]} {2 -> [3], [4, 6] : [6, 8]}
// CHECK-SAME:   {3 -> [0], [6, 0] : [8, 2]} {3 -> [1], [6, 2] : [8, 4]} {3 -> [2], [6, 4] : [8, 6]},
// CHECK-NEXT: all_to_all chunk 0 devices [4, 5, 6, 7]
// CHECK-SAME:   {4 -> [5], [0, 2] : [2, 4]} {4 -> [6], [0, 4] : [2, 6]} {4 -> [7], [0, 6] : [2, 8]}
// CHECK-SAME:   {5 -> [4], [2, 0] : [4, 2]} {5 -> [6], [2, 4] : [4, 6]} {5 -> [7], [2, 6] : [4, 8]}
// CHECK-SAME:   {6 -> [4], [4, 0] : [6, 2]} {6 -> [5], [4, 2] : [6, 4]} {6 -> [7], [4, 6] : [6, 8]}
// CHECK-SAME:   {7 -> [4], [6, 0] : [8, 2]} {7 -> [5], [6, 2] : [8, 4]} {7 -> [6], [6, 4] : [8, 6]}
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @all_to_all(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@m, [{}, {"b"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Device permutation on the same axes. On @m = <["a"=2, "b"=2]> (id 2a + b),
// [{"a", "b"}] gives device d block d, [{"b", "a"}] gives it block 2b + a:
// devices 0 and 3 keep theirs, 1 and 2 swap.

polymesh.mesh @m = <["a"=2, "b"=2]>

// CHECK-LABEL: func.func @permute_axis_order
// CHECK: polymesh.transfer %arg0 <@m, [{"a", "b"}]> -> <@m, [{"b", "a"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 3] {0 -> [0], [0] : [2]} {3 -> [3], [6] : [8]},
// CHECK-NEXT: collective_permute chunk 0 devices [1, 2] {1 -> [2], [2] : [4]} {2 -> [1], [4] : [6]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @permute_axis_order(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", "b"}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{"b", "a"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Sharding the dimension over "b" instead of "a": each half goes to the
// devices whose "b" coordinate selects it; a device that already holds its
// half keeps it (0 and 3), and each receiver is served by the holder of its
// own replica rank (the same "b" coordinate).
// CHECK-LABEL: func.func @permute_axis_swap
// CHECK: polymesh.transfer %arg0 <@m, [{"a"}]> -> <@m, [{"b"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 3] {0 -> [0], [0] : [4]} {3 -> [3], [4] : [8]},
// CHECK-NEXT: collective_permute chunk 0 devices [0, 1, 2, 3] {0 -> [2], [0] : [4]} {3 -> [1], [4] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @permute_axis_swap(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{"b"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Sub-axes. On @x4 = <["x"=4]>, "x":(1)2 is the major half of "x" (devices
// {0, 1} vs {2, 3}) and "x":(2)2 the minor half ({0, 2} vs {1, 3}).

polymesh.mesh @x4 = <["x"=4]>

// The major sub-axis to the full axis: every device holds a superset of its
// new tile; local slicing only.
// CHECK-LABEL: func.func @sub_axis_major_to_full
// CHECK: polymesh.transfer %arg0 <@x4, [{"x":(1)2}, {}]> -> <@x4, [{"x"}, {}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3]
// CHECK-SAME:   {0 -> [0], [0, 0] : [2, 4]} {1 -> [1], [2, 0] : [4, 4]} {2 -> [2], [4, 0] : [6, 4]} {3 -> [3], [6, 0] : [8, 4]}{{$}}
// CHECK-NEXT: ] : tensor<8x4xf32>
func.func @sub_axis_major_to_full(%x: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@x4, [{"x":(1)2}, {}]>}) -> tensor<8x4xf32> {
  %0 = polymesh.reshard %x <@x4, [{"x"}, {}]> : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// The minor sub-axis to the full axis: devices 0 and 2 hold rows [0, 4),
// 1 and 3 rows [4, 8). Device 1 needs rows [2, 4) and device 2 rows [4, 6):
// one permute, each receiver served by the holder of its replica rank.
// CHECK-LABEL: func.func @sub_axis_minor_to_full
// CHECK: polymesh.transfer %arg0 <@x4, [{"x":(2)2}, {}]> -> <@x4, [{"x"}, {}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 3] {0 -> [0], [0, 0] : [2, 4]} {3 -> [3], [6, 0] : [8, 4]},
// CHECK-NEXT: collective_permute chunk 0 devices [0, 1, 2, 3] {0 -> [1], [2, 0] : [4, 4]} {3 -> [2], [4, 0] : [6, 4]}
// CHECK-NEXT: ] : tensor<8x4xf32>
func.func @sub_axis_minor_to_full(%x: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@x4, [{"x":(2)2}, {}]>}) -> tensor<8x4xf32> {
  %0 = polymesh.reshard %x <@x4, [{"x"}, {}]> : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// Splitting "x" into sub-axes over two dimensions: within each pair {0, 1}
// and {2, 3} both devices keep a quarter and swap a quarter.
// CHECK-LABEL: func.func @split_into_sub_axes
// CHECK: polymesh.transfer %arg0 <@x4, [{"x"}, {}]> -> <@x4, [{"x":(1)2}, {"x":(2)2}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3]
// CHECK-SAME:   {0 -> [0], [0, 0] : [2, 2]} {1 -> [1], [2, 2] : [4, 4]} {2 -> [2], [4, 0] : [6, 2]} {3 -> [3], [6, 2] : [8, 4]},
// CHECK-NEXT: all_to_all chunk 0 devices [0, 1] {0 -> [1], [0, 2] : [2, 4]} {1 -> [0], [2, 0] : [4, 2]},
// CHECK-NEXT: all_to_all chunk 0 devices [2, 3] {2 -> [3], [4, 2] : [6, 4]} {3 -> [2], [6, 0] : [8, 2]}
// CHECK-NEXT: ] : tensor<8x4xf32>
func.func @split_into_sub_axes(%x: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@x4, [{"x"}, {}]>}) -> tensor<8x4xf32> {
  %0 = polymesh.reshard %x <@x4, [{"x":(1)2}, {"x":(2)2}]> : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Several axes and a sub-axis at once. On @xy = <["x"=4, "y"=2]> (id 2x + y)
// the source gives device (x, y) the 2x2 block (x, y); the destination gives
// it rows [4y, 4y + 4) and columns [2(x/2), 2(x/2) + 2). Each source block
// has one holder; it goes to the two devices that need it (an all-gather
// between 0 and 2 and between 5 and 7, broadcasts elsewhere).

polymesh.mesh @xy = <["x"=4, "y"=2]>

// CHECK-LABEL: func.func @several_axes_and_sub_axes
// CHECK: polymesh.transfer %arg0 <@xy, [{"x"}, {"y"}]> -> <@xy, [{"y"}, {"x":(1)2}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 2, 5, 7]
// CHECK-SAME:   {0 -> [0], [0, 0] : [2, 2]} {2 -> [2], [2, 0] : [4, 2]} {5 -> [5], [4, 2] : [6, 4]} {7 -> [7], [6, 2] : [8, 4]},
// CHECK-NEXT: all_gather chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [2, 2]} {2 -> [0], [2, 0] : [4, 2]},
// CHECK-NEXT: broadcast chunk 0 devices [1, 4, 6] {1 -> [4, 6], [0, 2] : [2, 4]},
// CHECK-NEXT: broadcast chunk 0 devices [3, 4, 6] {3 -> [4, 6], [2, 2] : [4, 4]},
// CHECK-NEXT: broadcast chunk 0 devices [1, 3, 4] {4 -> [1, 3], [4, 0] : [6, 2]},
// CHECK-NEXT: broadcast chunk 0 devices [1, 3, 6] {6 -> [1, 3], [6, 0] : [8, 2]},
// CHECK-NEXT: all_gather chunk 0 devices [5, 7] {5 -> [7], [4, 2] : [6, 4]} {7 -> [5], [6, 2] : [8, 4]}
// CHECK-NEXT: ] : tensor<8x4xf32>
func.func @several_axes_and_sub_axes(%x: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@xy, [{"x"}, {"y"}]>}) -> tensor<8x4xf32> {
  %0 = polymesh.reshard %x <@xy, [{"y"}, {"x":(1)2}]> : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Uneven dimensions: 10 over 4 devices gives tiles of ceil(10/4) = 3:
// [0, 3), [3, 6), [6, 9), [9, 10); 10 over 2 gives [0, 5), [5, 10).

polymesh.mesh @x4 = <["x"=4]>

// CHECK-LABEL: func.func @uneven_all_gather
// CHECK: polymesh.transfer %arg0 <@x4, [{"x"}]> -> <@x4, [{}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3] {0 -> [0], [0] : [3]} {1 -> [1], [3] : [6]} {2 -> [2], [6] : [9]} {3 -> [3], [9] : [10]},
// CHECK-NEXT: all_gather chunk 0 devices [0, 1, 2, 3] {0 -> [1, 2, 3], [0] : [3]} {1 -> [0, 2, 3], [3] : [6]} {2 -> [0, 1, 3], [6] : [9]} {3 -> [0, 1, 2], [9] : [10]}
// CHECK-NEXT: ] : tensor<10xf32>
func.func @uneven_all_gather(%x: tensor<10xf32> {polymesh.sharding = #polymesh.sharding<@x4, [{"x"}]>}) -> tensor<10xf32> {
  %0 = polymesh.reshard %x <@x4, [{}]> : tensor<10xf32>
  return %0 : tensor<10xf32>
}

// Devices 0 and 1 need [0, 5), devices 2 and 3 need [5, 10). Element 5 lives
// on device 1 only and goes to both 2 and 3 (a broadcast); the rest are
// exchanges within each pair.
// CHECK-LABEL: func.func @uneven_to_sub_axis
// CHECK: polymesh.transfer %arg0 <@x4, [{"x"}]> -> <@x4, [{"x":(1)2}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3] {0 -> [0], [0] : [3]} {1 -> [1], [3] : [5]} {2 -> [2], [6] : [9]} {3 -> [3], [9] : [10]},
// CHECK-NEXT: broadcast chunk 0 devices [1, 2, 3] {1 -> [2, 3], [5] : [6]},
// CHECK-NEXT: all_to_all chunk 0 devices [0, 1] {0 -> [1], [0] : [3]} {1 -> [0], [3] : [5]},
// CHECK-NEXT: all_to_all chunk 0 devices [2, 3] {2 -> [3], [6] : [9]} {3 -> [2], [9] : [10]}
// CHECK-NEXT: ] : tensor<10xf32>
func.func @uneven_to_sub_axis(%x: tensor<10xf32> {polymesh.sharding = #polymesh.sharding<@x4, [{"x"}]>}) -> tensor<10xf32> {
  %0 = polymesh.reshard %x <@x4, [{"x":(1)2}]> : tensor<10xf32>
  return %0 : tensor<10xf32>
}

// Fewer elements than devices: devices 2 and 3 hold empty tiles and send
// nothing, but still receive.
// CHECK-LABEL: func.func @uneven_empty_tiles
// CHECK: polymesh.transfer %arg0 <@x4, [{"x"}]> -> <@x4, [{}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [1]} {1 -> [1], [1] : [2]},
// CHECK-NEXT: all_gather chunk 0 devices [0, 1, 2, 3] {0 -> [1, 2, 3], [0] : [1]} {1 -> [0, 2, 3], [1] : [2]}
// CHECK-NEXT: ] : tensor<2xf32>
func.func @uneven_empty_tiles(%x: tensor<2xf32> {polymesh.sharding = #polymesh.sharding<@x4, [{"x"}]>}) -> tensor<2xf32> {
  %0 = polymesh.reshard %x <@x4, [{}]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Identical and device-equivalent shardings: an empty plan.

polymesh.mesh @m = <["a"=2, "b"=2]>
polymesh.mesh @x4 = <["x"=4]>
polymesh.mesh @unit = <["a"=2, "u"=1]>

// CHECK-LABEL: func.func @identical
// CHECK: polymesh.transfer %arg0 <@m, [{"a"}, {"b"}]> -> <@m, [{"a"}, {"b"}]> steps [] : tensor<8x8xf32>
func.func @identical(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@m, [{"a"}, {"b"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// "x" written as its two sub-axes, major to minor, is the same layout.
// CHECK-LABEL: func.func @sub_axes_of_one_axis
// CHECK: polymesh.transfer %arg0 <@x4, [{"x"}]> -> <@x4, [{"x":(1)2, "x":(2)2}]> steps [] : tensor<8xf32>
func.func @sub_axes_of_one_axis(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@x4, [{"x"}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@x4, [{"x":(1)2, "x":(2)2}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// A size-1 axis changes no tile.
// CHECK-LABEL: func.func @size_one_axis
// CHECK: polymesh.transfer %arg0 <@unit, [{"a"}]> -> <@unit, [{"a", "u"}]> steps [] : tensor<8xf32>
func.func @size_one_axis(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@unit, [{"a"}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@unit, [{"a", "u"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Chained reshards: the second reads the first one's destination.
// CHECK-LABEL: func.func @chain
// CHECK: %[[T:.*]] = polymesh.transfer %arg0 <@m, [{"a"}, {}]> -> <@m, [{"a"}, {"b"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3]
// CHECK-NEXT: ] : tensor<8x8xf32>
// CHECK: polymesh.transfer %[[T]] <@m, [{"a"}, {"b"}]> -> <@m, [{"a"}, {}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3]
// CHECK-NEXT: all_gather chunk 0 devices [0, 1]
// CHECK-NEXT: all_gather chunk 0 devices [2, 3]
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @chain(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@m, [{"a"}, {"b"}]> : tensor<8x8xf32>
  %1 = polymesh.reshard %0 <@m, [{"a"}, {}]> : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

// Partial sums. On @m = <["a"=2, "b"=2]> (id 2a + b) the reduction groups of
// "a" are {0, 2} and {1, 3}. Reductions accumulate into the source buffers
// (`into_source, accumulate`) before the local copies read them, one chunk
// later.

polymesh.mesh @m = <["a"=2, "b"=2]>

// Unreduced -> replicated: an all-reduce per group, written as its pieces.
// Phase 0 reduces each half onto its owner (device 0 keeps [0, 4), device
// 2 [4, 8)), phase 1 copies the reduced halves back.
// CHECK-LABEL: func.func @all_reduce
// CHECK: polymesh.transfer %arg0 <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
// CHECK-NEXT: all_reduce chunk 0 devices [0, 2] pieces {0: [0] : [4]} {2: [4] : [8]},
// CHECK-NEXT: all_reduce chunk 0 devices [1, 3] pieces {1: [0] : [4]} {3: [4] : [8]},
// CHECK-NEXT: local_copy chunk 1 devices [0, 1, 2, 3] {0 -> [0], [0] : [8]} {1 -> [1], [0] : [8]} {2 -> [2], [0] : [8]} {3 -> [3], [0] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @all_reduce(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}], unreduced={"a"}>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Unreduced -> sharded over the same axis: a reduce-scatter per group, each
// member receiving only the half it keeps.
// CHECK-LABEL: func.func @reduce_scatter
// CHECK: polymesh.transfer %arg0 <@m, [{}], unreduced={"a"}> -> <@m, [{"a"}]> steps [
// CHECK-NEXT: reduce_scatter chunk 0 devices [0, 2] pieces {0: [0] : [4]} {2: [4] : [8]},
// CHECK-NEXT: reduce_scatter chunk 0 devices [1, 3] pieces {1: [0] : [4]} {3: [4] : [8]},
// CHECK-NEXT: local_copy chunk 1 devices [0, 1, 2, 3] {0 -> [0], [0] : [4]} {1 -> [1], [0] : [4]} {2 -> [2], [4] : [8]} {3 -> [3], [4] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @reduce_scatter(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}], unreduced={"a"}>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{"a"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Unreduced over both axes -> sharded over both, in the other order: one
// reduce-scatter over all four devices. Device 2a + b keeps block 2b + a.
// CHECK-LABEL: func.func @reduce_scatter_two_axes
// CHECK: polymesh.transfer %arg0 <@m, [{}], unreduced={"a", "b"}> -> <@m, [{"b", "a"}]> steps [
// CHECK-NEXT: reduce_scatter chunk 0 devices [0, 1, 2, 3] pieces {0: [0] : [2]} {1: [4] : [6]} {2: [2] : [4]} {3: [6] : [8]},
// CHECK-NEXT: local_copy chunk 1 devices [0, 1, 2, 3] {0 -> [0], [0] : [2]} {2 -> [2], [2] : [4]} {1 -> [1], [4] : [6]} {3 -> [3], [6] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @reduce_scatter_two_axes(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}], unreduced={"a", "b"}>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{"b", "a"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Unreduced and sharded over another axis -> replicated: all-reduce over
// "a" within each "b" tile, then all-gather over "b".
// CHECK-LABEL: func.func @all_reduce_then_all_gather
// CHECK: polymesh.transfer %arg0 <@m, [{"b"}], unreduced={"a"}> -> <@m, [{}]> steps [
// CHECK-NEXT: all_reduce chunk 0 devices [0, 2] pieces {0: [0] : [2]} {2: [2] : [4]},
// CHECK-NEXT: all_reduce chunk 0 devices [1, 3] pieces {1: [4] : [6]} {3: [6] : [8]},
// CHECK-NEXT: local_copy chunk 1 devices [0, 1, 2, 3] {0 -> [0], [0] : [4]} {2 -> [2], [0] : [4]} {1 -> [1], [4] : [8]} {3 -> [3], [4] : [8]},
// CHECK-NEXT: all_gather chunk 1 devices [0, 1] {0 -> [1], [0] : [4]} {1 -> [0], [4] : [8]},
// CHECK-NEXT: all_gather chunk 1 devices [2, 3] {2 -> [3], [0] : [4]} {3 -> [2], [4] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @all_reduce_then_all_gather(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}], unreduced={"a"}>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Unreduced axes kept on the same mesh travel as they are: a device only
// receives data of its own partial index (groups {0, 1} and {2, 3}).
// CHECK-LABEL: func.func @keep_unreduced
// CHECK: polymesh.transfer %arg0 <@m, [{"b"}], unreduced={"a"}> -> <@m, [{}], unreduced={"a"}> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3] {0 -> [0], [0] : [4]} {1 -> [1], [4] : [8]} {2 -> [2], [0] : [4]} {3 -> [3], [4] : [8]},
// CHECK-NEXT: all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [4]} {1 -> [0], [4] : [8]},
// CHECK-NEXT: all_gather chunk 0 devices [2, 3] {2 -> [3], [0] : [4]} {3 -> [2], [4] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @keep_unreduced(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}], unreduced={"a"}>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{}], unreduced={"a"}> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Replicated -> fresh unreduced axis: the devices at a = 0 take the data,
// the others a zero fill, so the sum over each group is the value.
// CHECK-LABEL: func.func @fresh_unreduced
// CHECK: polymesh.transfer %arg0 <@m, [{}]> -> <@m, [{"b"}], unreduced={"a"}> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [4]} {1 -> [1], [4] : [8]},
// CHECK-NEXT: zero_fill chunk 0 devices [2, 3] {2 -> [2], [0] : [4]} {3 -> [3], [4] : [8]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @fresh_unreduced(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %x <@m, [{"b"}], unreduced={"a"}> : tensor<8xf32>
  return %0 : tensor<8xf32>
}
