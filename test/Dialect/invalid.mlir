// RUN: polymesh-opt %s -split-input-file -verify-diagnostics

// Meshes.

// expected-error @+1 {{duplicate mesh axis "a"; axis names must be unique}}
polymesh.mesh @m = <["a"=2, "a"=4]>

// -----

// expected-error @+1 {{mesh axis "a" has size 0; expected a positive size}}
polymesh.mesh @m = <["a"=0]>

// -----

// expected-error @+1 {{mesh axis "b" has size -2; expected a positive size}}
polymesh.mesh @m = <["a"=2, "b"=-2]>

// -----

// expected-error @+1 {{the product of the mesh axis sizes overflows int64 at axis "b"}}
polymesh.mesh @m = <["a"=4294967296, "b"=4294967296, "c"=2]>

// -----

// expected-error @+1 {{mesh has 3 device ids but its axes hold 4 devices; expected one id per device}}
polymesh.mesh @m = <["a"=4], device_ids=[0, 1, 2]>

// -----

// expected-error @+1 {{device id 5 appears more than once; ids must be distinct}}
polymesh.mesh @m = <["a"=2, "b"=2], device_ids=[4, 5, 6, 5]>

// -----

// expected-error @+1 {{device id -1 is negative; expected a non-negative id}}
polymesh.mesh @m = <["a"=2], device_ids=[-1, 0]>

// -----

// expected-error @+1 {{'device_ids=[]' lists no device; omit it for ids 0..N-1}}
polymesh.mesh @m = <[], device_ids=[]>

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+2 {{redefinition of symbol named 'm'}}
// expected-note @-2 {{see existing symbol definition here}}
polymesh.mesh @m = <["b"=2]>

// -----

func.func @f() {
  // expected-error @+1 {{'polymesh.mesh' op expects parent op 'builtin.module'}}
  polymesh.mesh @m = <["a"=2]>
  return
}

// -----

// Shardings on function boundaries.

polymesh.mesh @m = <["a"=2, "b"=4]>
// expected-error @+1 {{argument #0: unknown axis "z" in dimension 0; mesh @m has axes "a", "b"}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"z"}, {}]>}) {
  return
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>
// expected-error @+1 {{result #0 (leaf "params.w"): axis "a" in dimension 1 overlaps "a" in dimension 0; each mesh axis may shard a value only once}}
func.func @f() -> (tensor<8x8xf32> {polymesh.leaf = "params.w", polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"a"}]>}) {
  %c = arith.constant dense<0.0> : tensor<8x8xf32>
  return %c : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>
// expected-error @+1 {{argument #0: axis "b" in dimension 0 overlaps "b" in dimension 0}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b", "b"}, {}]>}) {
  return
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>
// expected-error @+1 {{argument #0: axis "a" in replicated overlaps "a" in dimension 0}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}], replicated={"a"}>}) {
  return
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>
// expected-error @+1 {{argument #0: axis "b" in unreduced overlaps "b" in dimension 1}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}], unreduced={"b"}>}) {
  return
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>
// expected-error @+1 {{argument #0: axis "a" in unreduced overlaps "a" in replicated}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}], replicated={"a"}, unreduced={"a"}>}) {
  return
}

// -----

polymesh.mesh @m = <["x"=8]>
// expected-error @+1 {{argument #0: axis "x":(2)2 in dimension 1 overlaps "x":(1)4 in dimension 0}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x":(1)4}, {"x":(2)2}]>}) {
  return
}

// -----

polymesh.mesh @m = <["x"=8]>
// expected-error @+1 {{argument #0: axis "x" in dimension 1 overlaps "x":(1)2 in dimension 0}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x":(1)2}, {"x"}]>}) {
  return
}

// -----

polymesh.mesh @m = <["x"=12]>
// expected-error @+1 {{argument #0: sub-axis "x":(3)2 in dimension 1 and "x":(1)2 in dimension 0 do not split axis "x" the same way}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x":(1)2}, {"x":(3)2}]>}) {
  return
}

// -----

polymesh.mesh @m = <["x"=6]>
// expected-error @+1 {{argument #0: sub-axis "x":(2)2 in dimension 0 does not divide axis "x" of size 6; expected pre-size * size to divide the axis size}}
func.func @f(%arg0: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x":(2)2}]>}) {
  return
}

// -----

polymesh.mesh @m = <["x"=4]>
// expected-error @+1 {{argument #0: sub-axis "x":(1)4 in dimension 0 is the whole axis; write "x"}}
func.func @f(%arg0: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x":(1)4}]>}) {
  return
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>
// expected-error @+1 {{argument #0: sharding has 1 dimension shardings but the tensor type 'tensor<8x8xf32>' has rank 2}}
func.func @f(%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) {
  return
}

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{argument #0: sharding on a value of type 'i32'; expected a ranked tensor}}
func.func @f(%arg0: i32 {polymesh.sharding = #polymesh.sharding<@m, []>}) {
  return
}

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{sharding of result #0 refers to unknown mesh @nope; expected a polymesh.mesh symbol}}
func.func @f() -> (tensor<2xf32> {polymesh.sharding = #polymesh.sharding<@nope, [{"a"}]>}) {
  %c = arith.constant dense<0.0> : tensor<2xf32>
  return %c : tensor<2xf32>
}

// -----

// A symbol that is not a mesh is not a mesh.
func.func private @g()
// expected-error @+1 {{sharding of argument #0 refers to unknown mesh @g}}
func.func @f(%arg0: tensor<2xf32> {polymesh.sharding = #polymesh.sharding<@g, [{}]>}) {
  return
}

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{'polymesh.sharding' of argument #0 must be a #polymesh.sharding, got 3 : i64}}
func.func @f(%arg0: tensor<2xf32> {polymesh.sharding = 3}) {
  return
}

// -----

// expected-error @+1 {{'polymesh.leaf' of result #0 must be a string, got 7 : i64}}
func.func @f() -> (tensor<2xf32> {polymesh.leaf = 7}) {
  %c = arith.constant dense<0.0> : tensor<2xf32>
  return %c : tensor<2xf32>
}

// -----

// expected-error @+1 {{unknown attribute 'polymesh.shard' on argument #0; expected 'polymesh.sharding' or 'polymesh.leaf'}}
func.func @f(%arg0: tensor<2xf32> {polymesh.shard = 1}) {
  return
}

// -----

// Ambient mesh.

// expected-error @+1 {{ambient mesh @nowhere does not name a polymesh.mesh}}
func.func @f() attributes {polymesh.ambient_mesh = @nowhere} {
  return
}

// -----

// expected-error @+1 {{ambient mesh @nowhere does not name a polymesh.mesh}}
module attributes {polymesh.ambient_mesh = @nowhere} {
}

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{'polymesh.ambient_mesh' must be a flat symbol reference to a polymesh.mesh, got "m"}}
func.func @f() attributes {polymesh.ambient_mesh = "m"} {
  return
}

// -----

polymesh.mesh @m = <["a"=2]>
func.func @f() {
  // expected-error @+1 {{'polymesh.ambient_mesh' belongs on a function or a module}}
  %c = arith.constant {polymesh.ambient_mesh = @m} dense<0.0> : tensor<2xf32>
  return
}

// -----

// Shardings on ops.

polymesh.mesh @m = <["a"=2]>
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'polymesh.reshard' op refers to unknown mesh @other; expected a polymesh.mesh symbol}}
  %0 = polymesh.reshard %arg0 <@other, [{}]> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'polymesh.sharding_constraint' op sharding has 2 dimension shardings but the tensor type 'tensor<4xf32>' has rank 1}}
  %0 = polymesh.sharding_constraint %arg0 <@m, [{"a"}, {}]> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'polymesh.sharding_constraint' op unknown axis "b" in dimension 0; mesh @m has axes "a"}}
  %0 = polymesh.sharding_constraint %arg0 <@m, [{"b"}]> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>
func.func @f(%arg0: i32) -> i32 {
  // expected-error @+1 {{invalid kind of type specified: expected builtin.tensor, but found 'i32'}}
  %0 = polymesh.reshard %arg0 <@m, []> : i32
  return %0 : i32
}

// -----

polymesh.mesh @m = <["a"=2]>
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{result #0: unknown axis "q" in dimension 0; mesh @m has axes "a"}}
  %0 = arith.negf %arg0 {polymesh.sharding = #polymesh.sharding<@m, [{"q"}]>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'polymesh.sharding' lists 2 shardings but the op has 1 results}}
  %0 = arith.negf %arg0 {polymesh.sharding = [#polymesh.sharding<@m, [{}]>, #polymesh.sharding<@m, [{}]>]} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>
func.func @f(%arg0: tensor<4xi32>) {
  // expected-error @+1 {{result #0: sharding on a value of type 'i32'; expected a ranked tensor}}
  %c = arith.constant {polymesh.sharding = #polymesh.sharding<@m, []>} 0 : i32
  return
}

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{'polymesh.sharding' on a function belongs on its arguments and results}}
func.func @f() attributes {polymesh.sharding = #polymesh.sharding<@m, []>} {
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'polymesh.leaf' belongs on function results}}
  %c = arith.constant {polymesh.leaf = "x"} dense<0.0> : tensor<2xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{unknown polymesh attribute 'polymesh.color'}}
  %c = arith.constant {polymesh.color = "x"} dense<0.0> : tensor<2xf32>
  return
}

// -----

// A size-1 axis listed twice is a reuse, as the planner counts it, though
// it splits nothing (issue 13, item 12).
polymesh.mesh @m = <["z"=1, "x"=2]>
// expected-error @+1 {{argument #0: axis "z" in dimension 1 overlaps "z" in dimension 0; each mesh axis may shard a value only once}}
func.func @size_one_axis_twice(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"z"}, {"z"}]>}) -> tensor<8x8xf32> {
  return %a : tensor<8x8xf32>
}

// -----

// Maximal shardings `[]` need a mesh without axes; any other sharding still
// needs one dimension sharding per tensor dimension.

polymesh.mesh @grid = <["x"=2, "y"=2]>

// expected-error @+1 {{argument #0: sharding has 0 dimension shardings but the tensor type 'tensor<16x8xf32>' has rank 2; '[]' (the whole tensor on one device) needs a mesh without axes, and mesh @grid has 2 axes}}
func.func @maximal_on_mesh_with_axes(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@grid, []>}) {
  return
}

// -----

polymesh.mesh @grid = <["x"=2, "y"=2]>

func.func @maximal_reshard_on_mesh_with_axes(%a: tensor<16x8xf32>) -> tensor<16x8xf32> {
  // expected-error @+1 {{'polymesh.reshard' op sharding has 0 dimension shardings but the tensor type 'tensor<16x8xf32>' has rank 2; '[]' (the whole tensor on one device) needs a mesh without axes, and mesh @grid has 2 axes}}
  %0 = polymesh.reshard %a <@grid, []> : tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

polymesh.mesh @dev0 = <[]>

func.func @dimension_count_still_checked(%a: tensor<16x8xf32>) -> tensor<16x8xf32> {
  // expected-error @+1 {{'polymesh.reshard' op sharding has 1 dimension shardings but the tensor type 'tensor<16x8xf32>' has rank 2}}
  %0 = polymesh.reshard %a <@dev0, [{}]> : tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

// expected-error @+1 {{'polymesh.meshes' must be an array of mesh symbols}}
func.func @part(%a: tensor<2xf32>) -> tensor<2xf32> attributes {polymesh.meshes = ["m"]} {
  return %a : tensor<2xf32>
}

// -----

// expected-error @+1 {{'polymesh.group_buffer' is a unit attribute of an llvm.alloca}}
func.func @marked(%a: tensor<2xf32>) -> tensor<2xf32> attributes {polymesh.group_buffer} {
  return %a : tensor<2xf32>
}
