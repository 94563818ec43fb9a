// RUN: split-file --leading-lines %s %t
// RUN: polymesh-opt %t/propagate.mlir --polymesh-propagate | FileCheck %s --check-prefix=PROPAGATE
// RUN: polymesh-opt %t/plan.mlir --polymesh-plan -split-input-file -verify-diagnostics
// RUN: polymesh-opt %t/leaves.mlir --polymesh-print-leaves -verify-diagnostics
// RUN: polymesh-opt %t/attrs.mlir -split-input-file -verify-diagnostics

// Element and byte counts past int64 (docs/limits.md): tensor types may
// have any int64 extents, so their element counts, byte counts and the
// bytes a placement moves can overflow. Shapes whose element count
// overflows are refused where tiles are needed (planning, the leaf table);
// byte counts that overflow are refused by the planner; costs saturate.

//--- propagate.mlir
// 2^61 f32 elements: each candidate placement of the add is priced in bytes
// moved. Computing it on @m means moving %b to every device of @m, more than
// 2^63 bytes; computing it on @n moves nothing (device i of @m already
// holds block i of @n). Costs used to wrap around: 8 * (2^60 - 2^58)
// elements of 4 bytes came out as INT64_MIN, the cheapest, and %b moved.
// Now they saturate at INT64_MAX, and %a is resharded for free.
polymesh.mesh @m = <["a"=2, "b"=4]>
polymesh.mesh @n = <["c"=8]>
// PROPAGATE-LABEL: func.func @saturating_costs
// PROPAGATE: %[[A:.+]] = polymesh.reshard %arg0 <@n, [{"c"}]>
// PROPAGATE-NEXT: arith.addf %[[A]], %arg1 {polymesh.sharding = #polymesh.sharding<@n, [{"c"}]>}
func.func @saturating_costs(%a: tensor<2305843009213693952xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>},
                            %b: tensor<2305843009213693952xf32> {polymesh.sharding = #polymesh.sharding<@n, [{"c"}]>})
    -> tensor<2305843009213693952xf32> {
  %y = arith.addf %a, %b : tensor<2305843009213693952xf32>
  return %y : tensor<2305843009213693952xf32>
}

// An element count past int64: propagation places it (it needs no tiles to
// compare the same mesh's shardings), and leaves the reshard to the plan.
// PROPAGATE-LABEL: func.func @elements
// PROPAGATE: polymesh.reshard %{{.+}} <@n, [{"c"}, {}]> : tensor<4294967296x4294967296xf32>
func.func @elements(%x: tensor<4294967296x4294967296xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>})
    -> (tensor<4294967296x4294967296xf32> {polymesh.sharding = #polymesh.sharding<@n, [{"c"}, {}]>}) {
  %y = arith.negf %x : tensor<4294967296x4294967296xf32>
  return %y : tensor<4294967296x4294967296xf32>
}

//--- plan.mlir
polymesh.mesh @m = <["a"=2, "b"=4]>
polymesh.mesh @n = <["c"=8]>
// 2^64 elements.
func.func @elements(%x: tensor<4294967296x4294967296xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<4294967296x4294967296xf32> {
  // expected-error @+1 {{cannot be planned: tensor shape has a negative extent or its element count overflows int64}}
  %y = polymesh.reshard %x <@n, [{"c"}, {}]> : tensor<4294967296x4294967296xf32>
  return %y : tensor<4294967296x4294967296xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>
polymesh.mesh @n = <["c"=8]>
// 2^61 elements fit int64, their 2^63 bytes do not.
func.func @bytes(%x: tensor<2305843009213693952xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<2305843009213693952xf32> {
  // expected-error @+1 {{cannot be planned: tensor byte counts overflow int64}}
  %y = polymesh.reshard %x <@n, [{"c"}]> : tensor<2305843009213693952xf32>
  return %y : tensor<2305843009213693952xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>
polymesh.mesh @n = <["c"=8]>
// 2^60 bytes fit, but every device may receive them: 8 devices of @n times
// the whole tensor (replicated) does not.
func.func @replicated_bytes(%x: tensor<1152921504606846976xi8> {polymesh.sharding = #polymesh.sharding<@m, [{"a", "b"}]>}) -> tensor<1152921504606846976xi8> {
  // expected-error @+1 {{cannot be planned: tensor byte counts overflow int64}}
  %y = polymesh.reshard %x <@n, [{}]> : tensor<1152921504606846976xi8>
  return %y : tensor<1152921504606846976xi8>
}

// -----

// A planned transfer that sends one 2^62-element box five times: the
// count of elements device 1 receives used to wrap around to exactly its
// tile's 2^62, and the op verified. Coverage is now checked box by box.
polymesh.mesh @d0 = <[], device_ids=[0]>
polymesh.mesh @d1 = <[], device_ids=[1]>
func.func @wrapping_count(%x: tensor<4611686018427387904xi8>) -> tensor<4611686018427387904xi8> {
  // expected-error @+1 {{destination device 1 receives the elements of [0] : [4611686018427387904] more than once}}
  %y = polymesh.transfer %x <@d0, [{}]> -> <@d1, [{}]> steps [
    send_recv chunk 0 devices [0, 1] {0 -> [1], [0] : [4611686018427387904]} {0 -> [1], [0] : [4611686018427387904]} {0 -> [1], [0] : [4611686018427387904]} {0 -> [1], [0] : [4611686018427387904]} {0 -> [1], [0] : [4611686018427387904]}
  ] : tensor<4611686018427387904xi8>
  return %y : tensor<4611686018427387904xi8>
}

//--- leaves.mlir
polymesh.mesh @m = <["a"=2, "b"=4]>
// expected-error @+1 {{result #0: tensor shape has a negative extent or its element count overflows int64}}
func.func @leaf(%x: tensor<4294967296x4294967296xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>})
    -> (tensor<4294967296x4294967296xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) {
  return %x : tensor<4294967296x4294967296xf32>
}

//--- attrs.mlir
// Tile counts: a sharding splits a dimension over distinct pieces of one
// mesh, so its tile count is at most the mesh's device count (2^20). A
// sub-axis whose pre-size times size overflows int64 is refused.
polymesh.mesh @m = <["a"=1048576]>
func.func @sub_axis(%x: tensor<16xf32>) -> tensor<16xf32> {
  // expected-error @+1 {{sub-axis "a":(4611686018427387904)4 in dimension 0 does not divide axis "a" of size 1048576}}
  %y = polymesh.sharding_constraint %x <@m, [{"a":(4611686018427387904)4}]> : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

polymesh.mesh @m = <["a"=1024, "b"=1024]>
// The most tiles a dimension can have: every device its own (2^20 shards of
// a 2^20-element dimension, and of a 2^62-element one).
func.func @most_tiles(%x: tensor<1048576xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", "b"}]>},
                      %y: tensor<4611686018427387904xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b", "a"}]>}) {
  return
}
