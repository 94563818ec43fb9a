// RUN: polymesh-opt %s -split-input-file -verify-diagnostics

polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @missing_receiver(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{destination device 3 receives 0 elements but its tile holds 16}}
  %0 = polymesh.transfer %x <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [0, 4] : [4, 8]},
    broadcast chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [4, 4]}
  ] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @sender_lacks_box(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{step #0 (broadcast): transfer #0: sender 0 does not hold the box in its source buffer}}
  %0 = polymesh.transfer %x <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
    broadcast chunk 0 devices [0, 3] {0 -> [3], [0, 4] : [4, 8]}
  ] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @receiver_has_no_room(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{step #0 (send_recv): transfer #0: receiver 2 has no room for the box in its destination buffer}}
  %0 = polymesh.transfer %x <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
    send_recv chunk 0 devices [1, 2] {1 -> [2], [0, 4] : [4, 8]}
  ] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @not_participant(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{step #0 (send_recv): transfer #0: receiver 1 is not a participant of the step}}
  %0 = polymesh.transfer %x <@train, [{}]> -> <@train, [{"dp", "tp"}]> steps [
    send_recv chunk 0 devices [0] {0 -> [1], [2] : [4]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @box_out_of_bounds(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{step #0 (local_copy): transfer #0: box [6, 10) of dimension 0 is empty or outside [0, 8)}}
  %0 = polymesh.transfer %x <@train, [{}]> -> <@train, [{"dp", "tp"}]> steps [
    local_copy chunk 0 devices [0] {0 -> [0], [6] : [10]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @box_rank(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{step #0 (local_copy): transfer #0: box has rank 2 but the tensor has rank 1}}
  %0 = polymesh.transfer %x <@train, [{}]> -> <@train, [{"dp", "tp"}]> steps [
    local_copy chunk 0 devices [0] {0 -> [0], [0, 0] : [2, 2]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @unsorted(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{step #0 (all_gather): participant devices must be sorted and distinct}}
  %0 = polymesh.transfer %x <@train, [{"dp", "tp"}]> -> <@train, [{}]> steps [
    all_gather chunk 0 devices [1, 0] {0 -> [1], [0] : [2]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @chunk_order(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{step #1 (local_copy): chunk 0 comes after chunk 1; steps must be ordered by chunk}}
  %0 = polymesh.transfer %x <@train, [{}]> -> <@train, [{"dp", "tp"}]> steps [
    local_copy chunk 1 devices [0] {0 -> [0], [0] : [2]},
    local_copy chunk 0 devices [1] {1 -> [1], [2] : [4]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @empty_plan(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{has no steps, but its source and destination shardings place different tiles}}
  %0 = polymesh.transfer %x <@train, [{}]> -> <@train, [{"dp", "tp"}]> steps [] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @dynamic(%x: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{tensor type 'tensor<?xf32>' has a dynamic shape; a static shape is needed to compute device tiles}}
  %0 = polymesh.transfer %x <@train, [{}]> -> <@train, [{"dp", "tp"}]> steps [] : tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

polymesh.mesh @train = <["dp"=2, "tp"=2]>

func.func @bad_kind(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{unknown transfer step kind 'teleport'}}
  %0 = polymesh.transfer %x <@train, [{}]> -> <@train, [{"dp", "tp"}]> steps [teleport chunk 0 devices [0]] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Issue 13, item 5: a box received four times next to a hole holds as many
// elements as the tile, so counting passed it; coverage is now exact.
polymesh.mesh @one = <[], device_ids=[0]>
polymesh.mesh @rows = <["r"=2], device_ids=[1, 2]>

func.func @hole_and_duplicates(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{destination device 1 receives the elements of [0, 0] : [1, 4] more than once}}
  %0 = polymesh.transfer %x <@one, [{}, {}]> -> <@rows, [{"r"}, {}]> steps [
    send_recv chunk 0 devices [0, 1, 2] {0 -> [1], [0, 0] : [1, 4]} {0 -> [1], [0, 0] : [1, 4]} {0 -> [1], [0, 0] : [1, 4]} {0 -> [1], [0, 0] : [1, 4]} {0 -> [2], [4, 0] : [8, 4]}
  ] : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Overlapping boxes along the second dimension of a split that is regular
// along the first.
polymesh.mesh @one = <[], device_ids=[0]>
polymesh.mesh @rows = <["r"=2], device_ids=[1, 2]>

func.func @overlap_in_columns(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{destination device 2 receives the elements of [4, 1] : [8, 2] more than once}}
  %0 = polymesh.transfer %x <@one, [{}, {}]> -> <@rows, [{"r"}, {}]> steps [
    send_recv chunk 0 devices [0, 1, 2] {0 -> [1], [0, 0] : [4, 4]} {0 -> [2], [4, 0] : [8, 2]} {0 -> [2], [4, 1] : [8, 3]} {0 -> [2], [4, 3] : [8, 4]}
  ] : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Phases outside the range that code generation runs: the transfer was
// silently dropped.
polymesh.mesh @one = <[], device_ids=[0]>
polymesh.mesh @two = <[], device_ids=[1]>

func.func @negative_phase(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{step #0 (send_recv): transfer #0: phase -1 is out of range: a send_recv step has phase 0 only}}
  %0 = polymesh.transfer %x <@one, [{}]> -> <@two, [{}]> steps [
    send_recv chunk 0 devices [0, 1] {0 -> [1], [0] : [4], phase = -1}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @one = <[], device_ids=[0]>
polymesh.mesh @two = <[], device_ids=[1]>

func.func @huge_phase(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{phase 9223372036854775807 is out of range: a broadcast step has phase 0 only}}
  %0 = polymesh.transfer %x <@one, [{}]> -> <@two, [{}]> steps [
    broadcast chunk 0 devices [0, 1] {0 -> [1], [0] : [4], phase = 9223372036854775807}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @all_reduce_phase_two(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{phase 2 is out of range: a all_reduce step has phase 0 (reduce) and phase 1 (gather)}}
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
    all_reduce chunk 0 devices [0, 1] {1 -> [0], [0] : [2], into_source, accumulate} {0 -> [1], [2] : [4], into_source, accumulate} {0 -> [1], [0] : [2], into_source, phase = 2} {1 -> [0], [2] : [4], into_source, phase = 1}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @one = <[], device_ids=[0]>
polymesh.mesh @two = <[], device_ids=[1]>

func.func @negative_chunk(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{step #0 (send_recv): chunk -3 is negative}}
  %0 = polymesh.transfer %x <@one, [{}]> -> <@two, [{}]> steps [
    send_recv chunk -3 devices [0, 1] {0 -> [1], [0] : [4]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @g = <["a"=2, "b"=2, "c"=2]>

func.func @batch_axis_unknown(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{has an invalid batch: batch axis "a" -> "z": the destination mesh has no such axis (or it is named twice)}}
  %0 = polymesh.transfer %x <@g, [{"a", "c"}]> -> <@g, [{"a"}]> batch [#polymesh.batch_axis<"a" -> "z", dim = 0>] steps [
    all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]} {1 -> [0], [2] : [4]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @g = <["a"=2, "b"=2, "c"=2]>

func.func @batch_axis_used(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{has an invalid batch: batch axis "c" -> "c": a layout splits a dimension or sums partials over it}}
  %0 = polymesh.transfer %x <@g, [{"a", "c"}]> -> <@g, [{"a"}]> batch [#polymesh.batch_axis<"c" -> "c">] steps [
    all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]} {1 -> [0], [2] : [4]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @g = <["a"=2, "b"=2, "c"=2]>

func.func @batch_straddles(%x: tensor<6xf32>) -> tensor<6xf32> {
  // expected-error @+1 {{has an invalid batch: batch axis "a" -> "a", dim 0: both layouts must split the dimension first over the whole axis, into slabs that no tile straddles}}
  %0 = polymesh.transfer %x <@g, [{"a", "c"}]> -> <@g, [{"a"}]> batch [#polymesh.batch_axis<"a" -> "a", dim = 0>] steps [
    all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]} {1 -> [0], [2] : [3]}
  ] : tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

polymesh.mesh @g = <["a"=2, "b"=2, "c"=2]>

// Device 4 (a = 1) is not in cell 0: the steps are cell 0's alone.
func.func @batch_step_outside_cell(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{step #0 (all_gather): transfer #0: receiver 4 has no room for the box in its destination buffer}}
  %0 = polymesh.transfer %x <@g, [{"a", "c"}]> -> <@g, [{"a"}]> batch [#polymesh.batch_axis<"a" -> "a", dim = 0>, #polymesh.batch_axis<"b" -> "b">] steps [
    all_gather chunk 0 devices [0, 1, 4] {0 -> [1, 4], [0] : [2]} {1 -> [0], [2] : [4]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @g = <["a"=2, "b"=2, "c"=2]>

// Cell 0 of the destination needs rows [0, 4) on devices 0 and 1.
func.func @batch_cell_not_covered(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{destination device 0 receives 2 elements but its tile holds 4}}
  %0 = polymesh.transfer %x <@g, [{"a", "c"}]> -> <@g, [{"a"}]> batch [#polymesh.batch_axis<"a" -> "a", dim = 0>, #polymesh.batch_axis<"b" -> "b">] steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [2]} {1 -> [1], [2] : [4]},
    all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @g = <["a"=2, "b"=2, "c"=2]>

func.func @batch_negative_dim(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{has an invalid batch: batch axis "b" -> "b": dim -2 is neither a dimension nor -1}}
  %0 = polymesh.transfer %x <@g, [{"a", "c"}]> -> <@g, [{"a"}]> batch [#polymesh.batch_axis<"b" -> "b", dim = -2>] steps [
    all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]} {1 -> [0], [2] : [4]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Symbolic reductions: pieces only on reduction steps, owners among the
// participants and distinct, corners of the tensor's rank, and every
// member holding each piece in its source buffer.
polymesh.mesh @m = <["a"=2]>

func.func @pieces_on_a_broadcast(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{step #0 (broadcast): only all_reduce and reduce_scatter steps are written as pieces}}
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
    broadcast chunk 0 devices [0, 1] pieces {0: [0] : [2]} {1: [2] : [4]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @owner_outside(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{step #0 (all_reduce): piece owner 3 is not a participant of the step}}
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
    all_reduce chunk 0 devices [0, 1] pieces {0: [0] : [2]} {3: [2] : [4]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @owner_twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{step #0 (reduce_scatter): device 1 owns two pieces}}
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{"a"}]> steps [
    reduce_scatter chunk 0 devices [0, 1] pieces {1: [0] : [2]} {1: [2] : [4]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @piece_rank(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{step #0 (all_reduce): pieces have rank 2 but the tensor has rank 1}}
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
    all_reduce chunk 0 devices [0, 1] pieces {0: [0, 0] : [2, 1]} {1: [2, 0] : [4, 1]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @piece_outside(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{step #0 (all_reduce): piece #1: box [2, 6) of dimension 0 is empty or outside [0, 4)}}
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
    all_reduce chunk 0 devices [0, 1] pieces {0: [0] : [2]} {1: [2] : [6]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A member that does not hold the piece in its source buffer: the group's
// box is its rows, not the whole tensor.
polymesh.mesh @m22 = <["a"=2, "b"=2]>

func.func @piece_not_held(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{step #0 (all_reduce): member 0 does not hold piece #1 [2] : [3] in its source buffer}}
  %0 = polymesh.transfer %x <@m22, [{"a"}], unreduced={"b"}> -> <@m22, [{"a"}]> steps [
    all_reduce chunk 0 devices [0, 1] pieces {0: [1] : [2]} {1: [2] : [3]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @no_pieces(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
    // The error is at the token after `pieces`.
    // expected-error @+2 {{expected at least one piece, '{owner: [lo] : [hi]}'}}
    all_reduce chunk 0 devices [0, 1] pieces
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @piece_corners(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
    // expected-error @+1 {{piece corners have ranks 1 and 2}}
    all_reduce chunk 0 devices [0, 1] pieces {0: [0] : [2, 1]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Exchanges of whole tiles: only on an all_to_all step, alone, over every
// device of two shardings whose tiles are each device's own, and no box
// received besides what a device's own source tile holds.
polymesh.mesh @m = <["a"=4]>

func.func @tiles_on_a_send_recv(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{step #0 (send_recv): only all_to_all steps exchange tiles}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}]> -> <@m, [{}, {"a"}]> steps [
    send_recv chunk 0 devices [0, 1, 2, 3] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=4]>

func.func @tiles_of_replicas(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{step #0 (all_to_all): the destination sharding places 2 distinct tiles on 4 devices; tiles are exchanged only where each device holds its own}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}]> -> <@m, [{}, {"a":(1)2}]> steps [
    all_to_all chunk 0 devices [0, 1, 2, 3] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=4]>

func.func @tiles_of_some_devices(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{step #0 (all_to_all): exchanges the tiles of 3 devices, but the source sharding has 4}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}]> -> <@m, [{}, {"a"}]> steps [
    all_to_all chunk 0 devices [0, 1, 2] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=4]>
polymesh.mesh @n = <["b"=4], device_ids=[0, 1, 2, 5]>

func.func @tiles_of_other_devices(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{step #0 (all_to_all): member 3 has no destination tile}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}]> -> <@n, [{}, {"b"}]> steps [
    all_to_all chunk 0 devices [0, 1, 2, 3] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=4]>

func.func @tiles_twice(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{step #1 (all_to_all): exchanges tiles a second time}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}]> -> <@m, [{}, {"a"}]> steps [
    all_to_all chunk 0 devices [0, 1, 2, 3] tiles,
    all_to_all chunk 0 devices [0, 1, 2, 3] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=2]>

func.func @tiles_of_partial_sums(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{step #0 (all_to_all): exchanges tiles of partial sums}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}], unreduced={"b"}> -> <@m, [{}, {"a"}], unreduced={"b"}> steps [
    all_to_all chunk 0 devices [0, 1, 2, 3] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @tiles_and_transfers(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{step #0 (all_to_all): exchanges tiles but also lists transfers or pieces}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}]> -> <@m, [{}, {"a"}]> steps [
    all_to_all chunk 0 devices [0, 1] tiles {0 -> [1], [0, 4] : [4, 8]}
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Device 0 keeps rows [0, 4) x columns [0, 4); a copy of anything else
// lands where the exchange writes too.
polymesh.mesh @m = <["a"=2]>

func.func @tiles_and_another_copy(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{destination device 1 receives [0, 4] : [4, 8], which the exchange of tiles brings it too}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}]> -> <@m, [{}, {"a"}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [4, 4] : [8, 8]},
    send_recv chunk 0 devices [0, 1] {0 -> [1], [0, 4] : [4, 8]},
    all_to_all chunk 0 devices [0, 1] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @tiles_without_the_local_part(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{destination device 0 receives 0 elements but its tile holds 16}}
  %0 = polymesh.transfer %x <@m, [{"a"}, {}]> -> <@m, [{}, {"a"}]> steps [
    all_to_all chunk 0 devices [0, 1] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
