// RUN: polymesh-opt %s --polymesh-propagate -split-input-file -allow-unregistered-dialect 2>/dev/null | FileCheck %s
// RUN: polymesh-opt %s --polymesh-propagate -split-input-file -allow-unregistered-dialect -o /dev/null 2>&1 | FileCheck %s --check-prefix=WARN

// Operands on different meshes: the op goes where the fewest bytes move,
// whatever the operand order, and the other operand is resharded
// explicitly.

polymesh.mesh @m1 = <["a"=2, "b"=4]>
polymesh.mesh @dev3 = <[], device_ids=[3]>

// CHECK-LABEL: func.func @cross_mesh
// CHECK-SAME: -> (tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>})
// CHECK: %[[R:.*]] = polymesh.reshard %arg1 <@m1, [{"a"}, {"b"}]>
// CHECK: arith.addf %arg0, %[[R]] {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}
func.func @cross_mesh(%big: tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>},
                      %small: tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@dev3, [{}, {}]>}) -> tensor<64x64xf32> {
  %0 = arith.addf %big, %small : tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// CHECK-LABEL: func.func @cross_mesh_swapped
// CHECK-SAME: -> (tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>})
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@m1, [{"a"}, {"b"}]>
// CHECK: arith.addf %[[R]], %arg1 {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}
func.func @cross_mesh_swapped(%small: tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@dev3, [{}, {}]>},
                              %big: tensor<64x64xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}) -> tensor<64x64xf32> {
  %0 = arith.addf %small, %big : tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// -----

// The bytes decide. Moving %b (replicated on devices 0-1) to @wide costs
// only the tiles of devices 2-7 (6 x 512 B); gathering %a on @pair would
// cost 2 x 3.5 KiB. The op goes to @wide.

polymesh.mesh @wide = <["w"=8]>
polymesh.mesh @pair = <["p"=2], device_ids=[0, 1]>

// CHECK-LABEL: func.func @cheapest
// CHECK: %[[R:.*]] = polymesh.reshard %arg1 <@wide, [{"w"}]>
// CHECK: arith.addf %arg0, %[[R]] {polymesh.sharding = #polymesh.sharding<@wide, [{"w"}]>}
func.func @cheapest(%a: tensor<1024xf32> {polymesh.sharding = #polymesh.sharding<@wide, [{"w"}]>},
                    %b: tensor<1024xf32> {polymesh.sharding = #polymesh.sharding<@pair, [{}]>}) -> tensor<1024xf32> {
  %0 = arith.addf %a, %b : tensor<1024xf32>
  return %0 : tensor<1024xf32>
}

// A value replicated on eight devices already holds what devices 0-1 need:
// computing on the pair moves nothing.
polymesh.mesh @wide01 = <["w"=2], device_ids=[0, 1]>
polymesh.mesh @eight = <["e"=8]>
// CHECK-LABEL: func.func @cheapest_other_way
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@wide01, [{"w"}]>
// CHECK: arith.addf %[[R]], %arg1 {polymesh.sharding = #polymesh.sharding<@wide01, [{"w"}]>}
func.func @cheapest_other_way(%a: tensor<1024xf32> {polymesh.sharding = #polymesh.sharding<@eight, [{}]>},
                              %b: tensor<1024xf32> {polymesh.sharding = #polymesh.sharding<@wide01, [{"w"}]>}) -> tensor<1024xf32> {
  %0 = arith.addf %a, %b : tensor<1024xf32>
  return %0 : tensor<1024xf32>
}

// -----

polymesh.mesh @m1 = <["a"=2, "b"=4]>
polymesh.mesh @m3 = <["c"=8]>

// Device-equivalent shardings need no reshard.
// CHECK-LABEL: func.func @equivalent
// CHECK-SAME: -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>})
// CHECK-NOT: polymesh.reshard
// CHECK: return %arg0
func.func @equivalent(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a", "b"}, {}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>}) {
  return %x : tensor<16x16xf32>
}

// A declared result sharding that differs is reached by a reshard.
// CHECK-LABEL: func.func @declared
// CHECK: %[[E:.*]] = math.exp %arg0 {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}
// CHECK: %[[R:.*]] = polymesh.reshard %[[E]] <@m3, [{"c"}, {}]>
// CHECK: return %[[R]]
func.func @declared(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>}) {
  %0 = math.exp %x : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// A declared result places an otherwise unplaced computation.
// CHECK-LABEL: func.func @backward
// CHECK: arith.constant {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>}
// CHECK: math.exp {{.*}} {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>}
// CHECK-NOT: polymesh.reshard
func.func @backward() -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>}) {
  %c = arith.constant dense<2.0> : tensor<16x16xf32>
  %0 = math.exp %c : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// An op whose result the user annotated is computed as annotated: its
// operand moves, not its result.
// CHECK-LABEL: func.func @annotated_result
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@m3, [{}, {"c"}]>
// CHECK: %[[N:.*]] = arith.negf %[[R]] {polymesh.sharding = #polymesh.sharding<@m3, [{}, {"c"}]>}
// CHECK: math.sqrt %[[N]] {polymesh.sharding = #polymesh.sharding<@m3, [{}, {"c"}]>}
func.func @annotated_result(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}) -> tensor<16x16xf32> {
  %0 = arith.negf %x {polymesh.sharding = #polymesh.sharding<@m3, [{}, {"c"}]>} : tensor<16x16xf32>
  %1 = math.sqrt %0 : tensor<16x16xf32>
  return %1 : tensor<16x16xf32>
}

// -----

polymesh.mesh @m1 = <["a"=2, "b"=4]>

// Incompatible shardings of one mesh: equal cost, so the more sharded
// placement, then the placement whose text sorts first.
// CHECK-LABEL: func.func @same_mesh_conflict
// CHECK: %[[R:.*]] = polymesh.reshard %arg1 <@m1, [{"a"}, {}]>
// CHECK: arith.mulf %arg0, %[[R]] {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>}
func.func @same_mesh_conflict(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>},
                              %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{}, {"a"}]>}) -> tensor<16x16xf32> {
  %0 = arith.mulf %x, %y : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// CHECK-LABEL: func.func @same_mesh_conflict_swapped
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@m1, [{"a"}, {}]>
// CHECK: arith.mulf %[[R]], %arg1 {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>}
func.func @same_mesh_conflict_swapped(%y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{}, {"a"}]>},
                                      %x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>}) -> tensor<16x16xf32> {
  %0 = arith.mulf %y, %x : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// A replicated operand is sliced where it is (no bytes move), so the op is
// computed sharded.
// CHECK-LABEL: func.func @replicated_and_sharded
// CHECK: %[[S:.*]] = polymesh.reshard %arg0 <@m1, [{"a"}, {"b"}]>
// CHECK: arith.subf %[[S]], %arg1 {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}
func.func @replicated_and_sharded(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{}, {}]>},
                                  %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}) -> tensor<16x16xf32> {
  %0 = arith.subf %x, %y : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// -----

polymesh.mesh @m3 = <["c"=8]>

// An op no rule describes runs replicated, with explicit reshards and a
// warning; it never gets a silently wrong sharding.
// WARN: warning: no sharding rule for 'test.opaque'; computing it replicated on @m3
// CHECK-LABEL: func.func @unknown_op
// CHECK-SAME: -> (tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{}]>})
// CHECK: %[[G:.*]] = polymesh.reshard %arg0 <@m3, [{}]>
// CHECK: "test.opaque"(%[[G]]) {polymesh.sharding = #polymesh.sharding<@m3, [{}]>}
func.func @unknown_op(%x: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}]>}) -> tensor<16xf32> {
  %0 = "test.opaque"(%x) : (tensor<16xf32>) -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

polymesh.mesh @m1 = <["a"=2, "b"=4]>
polymesh.mesh @m3 = <["c"=8]>

// Permuting results and arguments changes no leaf's sharding.
// CHECK-LABEL: func.func @order_a
// CHECK-SAME: (%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}, %arg1: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>})
// CHECK-SAME: -> (tensor<8x8xf32> {polymesh.leaf = "p", polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}, tensor<8x8xf32> {polymesh.leaf = "q", polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>}, tensor<8x8xf32> {polymesh.leaf = "r", polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>})
func.func @order_a(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>},
                   %y: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>})
    -> (tensor<8x8xf32> {polymesh.leaf = "p"}, tensor<8x8xf32> {polymesh.leaf = "q"}, tensor<8x8xf32> {polymesh.leaf = "r"}) {
  %p = math.exp %x : tensor<8x8xf32>
  %q = math.exp %y : tensor<8x8xf32>
  %r = arith.addf %x, %y : tensor<8x8xf32>
  return %p, %q, %r : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// CHECK-LABEL: func.func @order_b
// CHECK-SAME: (%arg0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>}, %arg1: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>})
// CHECK-SAME: -> (tensor<8x8xf32> {polymesh.leaf = "r", polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>}, tensor<8x8xf32> {polymesh.leaf = "q", polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>}, tensor<8x8xf32> {polymesh.leaf = "p", polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>})
func.func @order_b(%y: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m3, [{"c"}, {}]>},
                   %x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {"b"}]>})
    -> (tensor<8x8xf32> {polymesh.leaf = "r"}, tensor<8x8xf32> {polymesh.leaf = "q"}, tensor<8x8xf32> {polymesh.leaf = "p"}) {
  %r = arith.addf %y, %x : tensor<8x8xf32>
  %q = math.exp %y : tensor<8x8xf32>
  %p = math.exp %x : tensor<8x8xf32>
  return %r, %q, %p : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}
