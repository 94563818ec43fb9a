// RUN: polymesh-opt %s -split-input-file -verify-diagnostics

// Syntax errors carry the location of the offending token.

polymesh.mesh @m = <["a"=2, "b"=4]>
func.func @f(
  // expected-error @+1 {{'?' must be the last entry of a dimension sharding}}
  %arg0: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?, "a"}]>}) {
  return
}

// -----

polymesh.mesh @m = <["x"=8]>
func.func @f(
  // expected-error @+1 {{sub-axis "x":(0)2 is invalid; expected a pre-size >= 1 and a size >= 2}}
  %arg0: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x":(0)2}]>}) {
  return
}

// -----

polymesh.mesh @m = <["x"=8]>
func.func @f(
  // expected-error @+1 {{sub-axis "x":(2)1 is invalid; expected a pre-size >= 1 and a size >= 2}}
  %arg0: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x":(2)1}]>}) {
  return
}

// -----

polymesh.mesh @m = <["x"=8]>
func.func @f(
  // expected-error @+1 {{expected 'replicated={...}' then 'unreduced={...}', each at most once}}
  %arg0: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}], unreduced={}, replicated={}>}) {
  return
}

// -----

// expected-error @+1 {{expected '='}}
polymesh.mesh @m = <["a" 2]>

// -----

// expected-error @+1 {{expected 'device_ids'}}
polymesh.mesh @m = <["a"=2], 7>

// -----

// expected-error @+1 {{integer value too large}}
polymesh.mesh @m = <["a"=99999999999999999999]>
