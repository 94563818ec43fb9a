// RUN: polymesh-opt %s --polymesh-propagate -split-input-file -verify-diagnostics -allow-unregistered-dialect

// A leaf that nothing places, without an ambient mesh, is named.

polymesh.mesh @m = <["a"=2]>

// expected-error @+1 {{result #1 (leaf "opt_state.count") is not placed: nothing annotates it or the values it is computed from, and there is no 'polymesh.ambient_mesh' to default to}}
func.func @unplaced(%x: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>})
    -> (tensor<4xf32>, tensor<4xi32> {polymesh.leaf = "opt_state.count"}) {
  %c = arith.constant dense<0> : tensor<4xi32>
  return %x, %c : tensor<4xf32>, tensor<4xi32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// Every unplaced leaf is reported, not only the first.
// expected-error @+2 {{result #0 is not placed}}
// expected-error @+1 {{result #1 (leaf "b") is not placed}}
func.func @two_unplaced() -> (tensor<4xf32>, tensor<4xf32> {polymesh.leaf = "b"}) {
  %c = arith.constant dense<0.0> : tensor<4xf32>
  %d = arith.constant dense<1.0> : tensor<4xf32>
  return %c, %d : tensor<4xf32>, tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// An intermediate value that nothing places and no leaf uses.
func.func @unplaced_value(%x: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<4xf32> {
  // expected-error @+1 {{value is not placed: nothing annotates it or the values it is computed with, and there is no 'polymesh.ambient_mesh' to default to}}
  %c = arith.constant dense<0.0> : tensor<8xf32>
  return %x : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>
polymesh.mesh @n = <["b"=2], device_ids=[2, 3]>

// Comparing placements needs static tiles.
func.func @dynamic(%x: tensor<?x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                   %y: tensor<?x4xf32> {polymesh.sharding = #polymesh.sharding<@n, [{"b"}, {}]>}) -> tensor<?x4xf32> {
  // expected-error @+1 {{placing this op needs to move a value of dynamic shape 'tensor<?x4xf32>' between shardings; a static shape is needed to compute its device tiles}}
  %0 = arith.addf %x, %y : tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// Dynamic shapes propagate fine when nothing has to move.
func.func @dynamic_ok(%x: tensor<?x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<?x4xf32> {
  %0 = math.exp %x : tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// Ops without a rule fall back to replicated, with a warning.
func.func @opaque(%x: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<4xf32> {
  // expected-warning @+1 {{no sharding rule for 'test.opaque'; computing it replicated on @m}}
  %0 = "test.opaque"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
