// Errors of --polymesh-plan. Each part below runs with its own options;
// split-file keeps the line numbers of this file.
//
// RUN: split-file --leading-lines %s %t
// RUN: polymesh-opt %t/reshards.mlir --polymesh-plan -split-input-file -verify-diagnostics
// RUN: polymesh-opt %t/regions.mlir --polymesh-propagate --polymesh-plan -split-input-file -verify-diagnostics
// RUN: polymesh-opt %t/negative-limit.mlir --polymesh-plan=memory-limit-bytes=-1 -verify-diagnostics
// RUN: polymesh-opt %t/tiny-limit.mlir --polymesh-plan=memory-limit-bytes=3 -verify-diagnostics
// RUN: polymesh-opt %t/outputs.mlir --polymesh-plan=stats-file=%t/no-such-dir/stats.json -verify-diagnostics
// RUN: polymesh-opt %t/outputs.mlir --polymesh-plan=comm-matrix=%t/no-such-dir/matrix.svg -verify-diagnostics
// RUN: not polymesh-opt %t/outputs.mlir --polymesh-plan=stats-file=%t/no-such-dir/stats.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=STATS-FILE
// STATS-FILE: error: cannot open '{{.*}}no-such-dir{{[/\\]}}stats.json'

//--- reshards.mlir

// A reshard that cannot be planned is an error at its location; none is
// left behind silently.

polymesh.mesh @m = <["a"=2]>

func.func @dynamic_shape(%x: tensor<?x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<?x8xf32> {
  // expected-error @+1 {{'polymesh.reshard' op cannot be planned: tensor type 'tensor<?x8xf32>' has a dynamic shape; a static shape is needed to compute device tiles}}
  %0 = polymesh.reshard %x <@m, [{}, {}]> : tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// Without --polymesh-propagate the argument carries no sharding.
func.func @unsharded_argument(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'polymesh.reshard' op has an operand without a sharding; run --polymesh-propagate first}}
  %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// Nor does an op that propagation has not annotated.
func.func @unsharded_producer(%x: tensor<8xf32>) -> tensor<8xf32> {
  %1 = arith.addf %x, %x : tensor<8xf32>
  // expected-error @+1 {{'polymesh.reshard' op has an operand without a sharding; run --polymesh-propagate first}}
  %0 = polymesh.reshard %1 <@m, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @no_byte_size(%x: tensor<8xindex> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<8xindex> {
  // expected-error @+1 {{'polymesh.reshard' op cannot be planned: element type 'index' cannot be moved: it has no fixed size in bytes}}
  %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xindex>
  return %0 : tensor<8xindex>
}

// -----

polymesh.mesh @m = <["a"=2]>

// Every unplannable reshard is reported, not only the first; the plannable
// one between them is fine.
func.func @several(%x: tensor<?xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>},
                   %y: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>},
                   %z: tensor<8xf32>) -> (tensor<?xf32>, tensor<8xf32>, tensor<8xf32>) {
  // expected-error @+1 {{has a dynamic shape}}
  %0 = polymesh.reshard %x <@m, [{}]> : tensor<?xf32>
  %1 = polymesh.reshard %y <@m, [{}]> : tensor<8xf32>
  // expected-error @+1 {{has an operand without a sharding}}
  %2 = polymesh.reshard %z <@m, [{}]> : tensor<8xf32>
  return %0, %1, %2 : tensor<?xf32>, tensor<8xf32>, tensor<8xf32>
}

//--- negative-limit.mlir

// A negative limit is refused before anything is planned. The error is
// reported on the module.

// expected-error @+1 {{memory-limit-bytes must not be negative}}
module {
  polymesh.mesh @m = <["a"=2]>
  func.func @f(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<8xf32> {
    %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

//--- tiny-limit.mlir

// Three bytes cannot stage one f32 element; they are enough for i8.

polymesh.mesh @m = <["a"=2]>

func.func @f32_element(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<8xf32> {
  // expected-error @+1 {{'polymesh.reshard' op cannot be planned: memory limit of 3 bytes cannot stage even one 4-byte element}}
  %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

func.func @i8_element(%x: tensor<8xi8> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<8xi8> {
  %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xi8>
  return %0 : tensor<8xi8>
}

//--- outputs.mlir

// An output file that cannot be opened fails the pass, on the module.

// expected-error-re @+1 {{cannot open '{{.*}}no-such-dir{{[/\\]}}{{stats.json|matrix.svg}}': }}
module {
  polymesh.mesh @m = <["a"=2]>
  func.func @f(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<8xf32> {
    %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

//--- regions.mlir

polymesh.mesh @m = <["a"=2, "b"=2]>

// Inside a region other than tensor control flow's the operand stays
// unplaced even after propagation (this part runs both): the message says
// so instead of asking for a pass that already ran. The region captures %x,
// so only the ambient mesh places the op.
func.func @in_execute_region(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<8x8xf32>
    attributes {polymesh.ambient_mesh = @m} {
  %r = scf.execute_region -> tensor<8x8xf32> {
    %n = arith.negf %x : tensor<8x8xf32>
    // expected-error @+1 {{'polymesh.reshard' op has an operand without a sharding: a value inside a region of 'scf.execute_region', and propagation places values inside the regions of scf.for, scf.while, scf.if and scf.index_switch only (docs/propagation.md); reshard outside the region}}
    %s = polymesh.reshard %n <@m, [{}, {"b"}]> : tensor<8x8xf32>
    scf.yield %s : tensor<8x8xf32>
  }
  return %r : tensor<8x8xf32>
}
