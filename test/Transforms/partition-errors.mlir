// RUN: polymesh-opt %s --polymesh-partition -split-input-file -verify-diagnostics

// Errors of --polymesh-partition: it needs a propagated, planned program,
// and refuses what it cannot express per device rather than miscompile it.

polymesh.mesh @m = <["x"=2]>

// Not propagated: the constant has no sharding.
func.func @unpropagated(%a: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<4xf32> {
  // expected-error @+1 {{has a tensor value without a sharding; run --polymesh-propagate (and --polymesh-plan) before --polymesh-partition}}
  %c = arith.constant dense<1.0> : tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["x"=2]>

func.func @unplanned(%a: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<4xf32> {
  // expected-error @+1 {{is not planned; run --polymesh-plan before --polymesh-partition}}
  %0 = polymesh.reshard %a <@m, [{}]> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["x"=2]>

func.func private @callee(tensor<4xf32>) -> tensor<4xf32>

func.func @calls(%a: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<4xf32> {
  // expected-error @+1 {{cannot be partitioned: partitioning is per function and does not follow calls}}
  %0 = func.call @callee(%a) {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A partial sum whose init is not zero would count the init once per
// member of the reduction group.
polymesh.mesh @m = <["y"=2]>

func.func @init_not_zero(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>},
                         %b: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>},
                         %c: tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) -> tensor<4x4xf32> {
  // expected-error @+1 {{cannot be partitioned: its result is a partial sum (unreduced) but its init is not zero}}
  %r = linalg.matmul {polymesh.sharding = #polymesh.sharding<@m, [{}, {}], unreduced={"y"}>} ins(%a, %b : tensor<4x6xf32>, tensor<6x4xf32>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}

// -----

// A transfer whose operand is placed otherwise than the plan's source: the
// plan would read the wrong tiles (issue 13, item 5).
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=2, "tp"=2]>
func.func @transfer_source_mismatch(%x: tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@train, [{"dp"}, {}]>}) -> (tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>}) {
  // expected-error @+1 {{cannot be partitioned: its operand is placed as #polymesh.sharding<@train, [{"dp"}, {}]> but the plan reads the tiles of #polymesh.sharding<@replica0, [{}, {"tp"}]> (run --polymesh-propagate, which moves the operand)}}
  %0 = polymesh.transfer %x <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [0, 4] : [4, 8]},
    broadcast chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [4, 4]},
    broadcast chunk 0 devices [1, 3] {1 -> [3], [0, 4] : [4, 8]}
  ] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Control flow runs on every device of the function, so each must hold the
// decision: a flag that only the devices of @a hold cannot steer a branch
// that @b's devices run (issue 15, item 3).
polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
polymesh.mesh @b = <["x"=2], device_ids=[2, 3]>
func.func @decide_on_part(%flag: tensor<i1> {polymesh.sharding = #polymesh.sharding<@a, []>}, %v: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}]>}) -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}]>}) {
  // expected-error @+1 {{cannot be partitioned: 'scf.if' decides on a value placed as #polymesh.sharding<@a, []>, which not every device of the function holds whole; every device runs the control flow and must take the same decisions (replicate the value on a mesh of all 4 devices)}}
  %c = tensor.extract %flag[] : tensor<i1>
  %0 = scf.if %c -> (tensor<8xf32>) {
    %1 = polymesh.transfer %v <@b, [{"x"}]> -> <@b, [{}]> steps [
      local_copy chunk 0 devices [2, 3] {2 -> [2], [0] : [4]} {3 -> [3], [4] : [8]},
      all_gather chunk 0 devices [2, 3] {2 -> [3], [0] : [4]} {3 -> [2], [4] : [8]}
    ] : tensor<8xf32>
    %2 = polymesh.transfer %1 <@b, [{}]> -> <@b, [{"x"}]> steps [
      local_copy chunk 0 devices [2, 3] {2 -> [2], [0] : [4]} {3 -> [3], [4] : [8]}
    ] : tensor<8xf32>
    scf.yield %2 : tensor<8xf32>
  } else {
    scf.yield %v : tensor<8xf32>
  } {polymesh.sharding = #polymesh.sharding<@b, [{"x"}]>}
  return %0 : tensor<8xf32>
}

// -----

// The same through a carried scalar: the while loop's counter starts from
// a value only @a's devices hold, and its condition reads the counter.
polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
polymesh.mesh @b = <["x"=2], device_ids=[2, 3]>
func.func @counter_from_part(%n: tensor<i32> {polymesh.sharding = #polymesh.sharding<@a, []>}, %v: tensor<8xi32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}]>}) -> (tensor<8xi32> {polymesh.sharding = #polymesh.sharding<@b, [{"x"}]>}) {
  %c1 = arith.constant 1 : i32
  %c9 = arith.constant 9 : i32
  // expected-error @+1 {{cannot be partitioned: 'scf.while' decides on a value placed as #polymesh.sharding<@a, []>}}
  %start = tensor.extract %n[] : tensor<i32>
  %0:2 = scf.while (%k = %start, %w = %v) : (i32, tensor<8xi32>) -> (i32, tensor<8xi32>) {
    %go = arith.cmpi slt, %k, %c9 : i32
    scf.condition(%go) %k, %w : i32, tensor<8xi32>
  } do {
  ^bb0(%k2: i32, %w2: tensor<8xi32>):
    %s = arith.addi %w2, %w2 {polymesh.sharding = #polymesh.sharding<@b, [{"x"}]>} : tensor<8xi32>
    %k3 = arith.addi %k2, %c1 : i32
    scf.yield %k3, %s : i32, tensor<8xi32>
  } attributes {polymesh.sharding = [unit, #polymesh.sharding<@b, [{"x"}]>]}
  return %0#1 : tensor<8xi32>
}

// -----

// A linalg body that reads a tensor from above (a gather: jnp.take) indexes
// it globally on every device: a split table would be read outside the
// device's tile (issue 13: wrong code, and reads of foreign memory).
// Propagation replicates such a tensor on the op's mesh.
polymesh.mesh @m = <["x"=4]>
func.func @captured_split(%table: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}, %idx: tensor<8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> (tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) {
  %e = tensor.empty() {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>} : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%idx : tensor<8xi32>) outs(%e : tensor<8xf32>) attrs = {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>} {
  ^bb0(%i: i32, %o: f32):
    %c = arith.index_cast %i : i32 to index
    // expected-error @+1 {{cannot be partitioned: it reads a tensor from outside the region of 'linalg.generic', placed as #polymesh.sharding<@m, [{"x"}]>, which is not whole on every device that runs the op (run --polymesh-propagate, which replicates it on the op's mesh)}}
    %v = tensor.extract %table[%c] : tensor<16xf32>
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// A table split by columns may be read at the loop's local index only when
// the loop is split the same way: here the op computes its result whole
// over "x", and the table's columns are split.
polymesh.mesh @m = <["x"=4]>
func.func @captured_misaligned(%table: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"x"}]>}, %idx: tensor<4xi32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>}) -> (tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  %e = tensor.empty() {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>} : tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%idx : tensor<4xi32>) outs(%e : tensor<4x8xf32>) attrs = {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>} {
  ^bb0(%i: i32, %o: f32):
    %c = arith.index_cast %i : i32 to index
    %d = linalg.index 1 : index
    // expected-error @+1 {{cannot be partitioned: it reads a tensor from outside the region of 'linalg.generic', placed as #polymesh.sharding<@m, [{}, {"x"}]>, which is not whole on every device that runs the op}}
    %v = tensor.extract %table[%c, %d] : tensor<16x8xf32>
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
