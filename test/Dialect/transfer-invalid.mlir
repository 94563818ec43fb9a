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
