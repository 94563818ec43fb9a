// RUN: polymesh-opt %s -split-input-file -verify-diagnostics

// Malformed priorities, groups and barriers: a located diagnostic each.

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{expected a dimension sharding priority such as 'p0' or 'p2' after '}', got 'px'}}
func.func private @f(tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}px]>})

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{expected a dimension sharding priority such as 'p0' or 'p2' after '}', got 'q1'}}
func.func private @f(tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}q1]>})

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{expected a dimension sharding priority such as 'p0' or 'p2' after '}', got 'p'}}
func.func private @f(tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}p]>})

// -----

polymesh.mesh @m = <["a"=2]>
// expected-error @+1 {{expected a dimension sharding priority such as 'p0' or 'p2' after '}', got 'p99999999999999999999'}}
func.func private @f(tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}p99999999999999999999]>})

// -----

func.func @group(%x: tensor<4xf32>) {
  // expected-error @+1 {{'polymesh.sharding_group' op group_id must be non-negative, got -1}}
  polymesh.sharding_group %x group_id=-1 : tensor<4xf32>
  return
}

// -----

func.func @group(%x: tensor<4xf32>) {
  // expected-error @+1 {{expected attribute value}}
  polymesh.sharding_group %x group_id=first : tensor<4xf32>
  return
}

// -----

func.func @barrier(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'allowed_direction' [NONE, FORWARD, BACKWARD, BOTH]}}
  %0 = polymesh.propagation_barrier %x allowed_direction=SIDEWAYS : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @barrier(%x: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'polymesh.propagation_barrier' op requires the same type for all operands and results}}
  %0 = "polymesh.propagation_barrier"(%x) {allowed_direction = 3 : i32} : (tensor<4xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
