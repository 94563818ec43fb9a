// RUN: split-file --leading-lines %s %t
// RUN: polymesh-opt %t/reshards.mlir '--polymesh-plan=batch-min-devices=0 reduction-pieces=false' -split-input-file -verify-diagnostics
// RUN: polymesh-opt %t/chunks.mlir --polymesh-plan=memory-limit-bytes=4 -verify-diagnostics
// RUN: polymesh-opt %t/chunks.mlir '--polymesh-plan=memory-limit-bytes=4194304 print-plan' -o /dev/null | FileCheck %s

// Plan sizes (docs/limits.md): a plan holds at most 2^22 transfers and 2^25
// (transfer, receiver) pairs. The planner counts them before it builds
// them, so a reshard over the limit fails in about a second with a few
// hundred MB instead of running out of memory: before the limit, the
// all-gather below tried to list 2^40 receivers, and 16,384 devices were
// enough to be killed at 8 GB. Batching and pieces are off: batched, the
// all-reduce is one cell of 2^20 transfers per group, and written as its
// pieces (the default) it is 2^20 pieces in all, both of which the limits
// allow (docs/limits.md, "Batched plans").

//--- reshards.mlir
polymesh.mesh @m = <["a"=1024, "b"=1024]>

// An all-gather over 2^20 devices: every one of 2^20 pieces goes to every
// other device.
func.func @all_gather(%x: tensor<1024x1024xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<1024x1024xf32> {
  // expected-error @+1 {{cannot be planned: the plan would deliver to more than 33554432 receivers in all (the limit, docs/limits.md)}}
  %y = polymesh.reshard %x <@m, [{}, {}]> : tensor<1024x1024xf32>
  return %y : tensor<1024x1024xf32>
}

// -----

polymesh.mesh @m = <["a"=1024, "b"=1024]>

// Partial sums over "a" (1,024 devices per group, 1,024 groups): each
// group's all-reduce is a million transfers.
func.func @all_reduce(%x: tensor<1024x1024xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}], unreduced={"a"}>}) -> tensor<1024x1024xf32> {
  // expected-error @+1 {{cannot be planned: the plan would hold more than 4194304 transfers (the limit, docs/limits.md)}}
  %y = polymesh.reshard %x <@m, [{}, {"b"}]> : tensor<1024x1024xf32>
  return %y : tensor<1024x1024xf32>
}

//--- chunks.mlir
polymesh.mesh @m = <["a"=2]>
polymesh.mesh @n = <["c"=2], device_ids=[2, 3]>

// 32 MiB in two boxes; a 4-byte memory limit would cut them into 2^23
// one-element transfers. With 4 MiB of staging, it is 8 transfers of 4 MiB.
// CHECK: plan for 4096x2048 x 4B: 4 steps in 4 chunks
// CHECK: bytes moved 33554432 (lower bound 33554432), max send 16777216, max recv 16777216, peak temp 4194304 (limit 4194304)
func.func @chunks(%x: tensor<4096x2048xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<4096x2048xf32> {
  // expected-error @+1 {{cannot be planned: the plan would hold more than 4194304 transfers (the limit, docs/limits.md); a larger memory limit or fewer devices make fewer}}
  %y = polymesh.reshard %x <@n, [{"c"}, {}]> : tensor<4096x2048xf32>
  return %y : tensor<4096x2048xf32>
}
