// RUN: polymesh-opt %s --polymesh-propagate -split-input-file -verify-diagnostics | FileCheck %s

// Sharding groups (`polymesh.sharding_group %x group_id=N`, as Shardy's
// `sdy.sharding_group`): every member of a group gets the same sharding. A
// sharding that reaches one member reaches all; members placed differently
// beforehand are a conflict, resolved by the fewest bytes with a warning.
// The group ops are gone after propagation.

polymesh.mesh @m = <["a"=2, "b"=4]>

// One annotated member places the others, and through them the values they
// are computed from (%w) and computed into.
// CHECK-LABEL: func.func @spread
// CHECK-SAME: %arg1: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK: math.exp %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK: arith.negf %{{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK-NOT: polymesh.sharding_group
// CHECK-NOT: polymesh.reshard
// CHECK: return
func.func @spread(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>},
                  %w: tensor<16x16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  %a = math.exp %w : tensor<16x16xf32>
  %b = arith.negf %a : tensor<16x16xf32>
  polymesh.sharding_group %x group_id=0 : tensor<16x16xf32>
  polymesh.sharding_group %a group_id=0 : tensor<16x16xf32>
  return %x, %b : tensor<16x16xf32>, tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// Without the group, %w (only used by its exp) would fall back to the
// ambient mesh, replicated.
// CHECK-LABEL: func.func @without_group
// CHECK-SAME: %arg1: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}
func.func @without_group(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>},
                         %w: tensor<16x16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>)
    attributes {polymesh.ambient_mesh = @m} {
  %a = math.exp %w : tensor<16x16xf32>
  return %x, %a : tensor<16x16xf32>, tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// Two members annotated differently: the group takes the sharding that
// moves the fewest bytes over its members ("b" on rows: 1024 bytes to move
// %x there, against 3072 to move %y to "a"), and the member placed
// otherwise keeps its own sharding, with a reshard after it for its uses.
// CHECK-LABEL: func.func @conflict
// CHECK: %[[X:.*]] = polymesh.reshard %arg0 <@m, [{"b"}, {}]>
// CHECK: arith.addf %[[X]], %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK-NOT: polymesh.sharding_group
func.func @conflict(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                    %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}) -> tensor<16x16xf32> {
  // expected-warning @+1 {{sharding group 5: members have 2 different shardings; all take #polymesh.sharding<@m, [{"b"}, {}]>, which moves the fewest bytes (1024)}}
  polymesh.sharding_group %x group_id=5 : tensor<16x16xf32>
  polymesh.sharding_group %y group_id=5 : tensor<16x16xf32>
  %z = arith.addf %x, %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// -----

polymesh.mesh @m1 = <["a"=2, "b"=4]>
polymesh.mesh @m2 = <["c"=8], device_ids=[8, 9, 10, 11, 12, 13, 14, 15]>

// Groups are per id: group 1 spreads @m1's sharding, group 2 @m2's, and a
// value in both groups would tie them (it is not here).
// CHECK-LABEL: func.func @two_groups
// CHECK: math.exp %arg2 {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>}
// CHECK: math.exp %arg3 {polymesh.sharding = #polymesh.sharding<@m2, [{}, {"c"}]>}
func.func @two_groups(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m1, [{"a"}, {}]>},
                      %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{}, {"c"}]>},
                      %u: tensor<16x16xf32>, %v: tensor<16x16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  %a = math.exp %u : tensor<16x16xf32>
  %b = math.exp %v : tensor<16x16xf32>
  polymesh.sharding_group %x group_id=1 : tensor<16x16xf32>
  polymesh.sharding_group %a group_id=1 : tensor<16x16xf32>
  polymesh.sharding_group %y group_id=2 : tensor<16x16xf32>
  polymesh.sharding_group %b group_id=2 : tensor<16x16xf32>
  return %a, %b : tensor<16x16xf32>, tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// Members of one group share a sharding, so they must have one type.
func.func @types(%x: tensor<16x16xf32>, %y: tensor<8x16xf32>) {
  polymesh.sharding_group %x group_id=0 : tensor<16x16xf32>
  // expected-error @+1 {{sharding group 0 has members of types 'tensor<16x16xf32>' and 'tensor<8x16xf32>'; the members of a group share one sharding, so they must have one type}}
  polymesh.sharding_group %y group_id=0 : tensor<8x16xf32>
  return
}
