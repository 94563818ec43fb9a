// RUN: polymesh-opt %s --polymesh-propagate=max-specialized-ops=12 -split-input-file -verify-diagnostics | FileCheck %s

// The budget counts the ops that specialization copies into a function,
// not the function's own: a function of any size without calls is never
// refused (a 2,000,000-op function was, before this distinction).

polymesh.mesh @m = <["a"=2]>

// 20 ops of its own, no calls: propagated.
// CHECK-LABEL: func.func @large_without_calls
// CHECK-COUNT-20: arith.negf
func.func @large_without_calls(%x: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<4xf32> {
  %0 = arith.negf %x : tensor<4xf32>
  %1 = arith.negf %0 : tensor<4xf32>
  %2 = arith.negf %1 : tensor<4xf32>
  %3 = arith.negf %2 : tensor<4xf32>
  %4 = arith.negf %3 : tensor<4xf32>
  %5 = arith.negf %4 : tensor<4xf32>
  %6 = arith.negf %5 : tensor<4xf32>
  %7 = arith.negf %6 : tensor<4xf32>
  %8 = arith.negf %7 : tensor<4xf32>
  %9 = arith.negf %8 : tensor<4xf32>
  %10 = arith.negf %9 : tensor<4xf32>
  %11 = arith.negf %10 : tensor<4xf32>
  %12 = arith.negf %11 : tensor<4xf32>
  %13 = arith.negf %12 : tensor<4xf32>
  %14 = arith.negf %13 : tensor<4xf32>
  %15 = arith.negf %14 : tensor<4xf32>
  %16 = arith.negf %15 : tensor<4xf32>
  %17 = arith.negf %16 : tensor<4xf32>
  %18 = arith.negf %17 : tensor<4xf32>
  %19 = arith.negf %18 : tensor<4xf32>
  return %19 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// A callee of 5 ops (its function op, 3 negf, its return) called three
// times: 15 ops copied, more than 12.
func.func private @three(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.negf %x : tensor<4xf32>
  %1 = arith.negf %0 : tensor<4xf32>
  %2 = arith.negf %1 : tensor<4xf32>
  return %2 : tensor<4xf32>
}
// expected-error @+1 {{specializing its calls for propagation would copy 15 ops into @caller, more than 12 (docs/limits.md)}}
func.func @caller(%x: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<4xf32> {
  %0 = func.call @three(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @three(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = func.call @three(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
