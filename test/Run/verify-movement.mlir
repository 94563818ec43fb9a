// RUN: polymesh-run %s --verify | FileCheck %s --check-prefixes=CHECK,PART
// RUN: not polymesh-run %s --verify --sharded-path=executor | FileCheck %s --check-prefixes=CHECK,EXEC
// RUN: polymesh-run %s --verify --entry=all_gather | FileCheck %s --check-prefix=ONE
// RUN: not polymesh-run %s --verify --sharded-path=executor --entry=compute | FileCheck %s --check-prefix=COMPUTE
// RUN: polymesh-run %polymesh_src_root/examples/orbax-single-replica-restore.mlir --entry=restore --verify \
// RUN:   | FileCheck %s --check-prefix=ORBAX
// RUN: polymesh-run %polymesh_src_root/examples/orbax-single-replica-restore.mlir --verify \
// RUN:   | FileCheck %s --check-prefix=ORBAX-ALL
// RUN: polymesh-run %polymesh_src_root/examples/orbax-single-replica-restore.mlir --entry=restore --verify \
// RUN:   --sharded-path=executor | FileCheck %s --check-prefix=ORBAX

// --verify on functions that only move data: after --polymesh-propagate and
// --polymesh-plan their bodies are polymesh.transfer and
// polymesh.sharding_constraint ops. By default they run like every other
// function, partitioned and lowered to the CPU (each transfer becomes
// generated copies and runtime calls); with --sharded-path=executor the plan
// executor runs each plan instead, which is the oracle for that generated
// code: both must pass, with the same bytes moved and devices. Every
// device's tile of every result must equal the reference's box bit for bit.
// "bytes moved" is the sum of the plans' bytesMoved, checked here by hand
// per case. The executor cannot run a function that computes.

polymesh.mesh @m4 = <["x"=4]>
polymesh.mesh @m8 = <["x"=8]>
polymesh.mesh @m22 = <["x"=2, "y"=2]>
polymesh.mesh @stage0 = <["dp"=2, "tp"=2], device_ids=[0, 1, 2, 3]>
polymesh.mesh @stage1 = <["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]>
polymesh.mesh @rev = <["x"=4], device_ids=[3, 2, 1, 0]>
polymesh.mesh @dev3 = <[], device_ids=[3]>

// Propagation inserts the reshard to the declared result sharding. Every
// device receives the 12 rows it lacks: 4 * 12 * 8 * 4 bytes.
// CHECK:      @all_gather: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// ONE:        @all_gather: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// ONE-NEXT:   1 passed, 0 failed
func.func @all_gather(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %a : tensor<16x8xf32>
}

// The axis moves from rows to columns: each device keeps its 4x4 block and
// receives 12x4 elements.
// CHECK-NEXT: @all_to_all: 1 leaf, 768 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @all_to_all(%a: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<16x16xf32> {
  %0 = polymesh.reshard %a <@m4, [{}, {"x"}]> : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// Pipeline stages on disjoint devices: all of it crosses, 8 devices run.
// CHECK-NEXT: @pipeline: 1 leaf, 256 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS
func.func @pipeline(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"dp"}, {"tp"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@stage1, [{"dp"}, {"tp"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// The same sharding over reversed device ids: every tile changes device.
// CHECK-NEXT: @reversed: 1 leaf, 128 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @reversed(%a: tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x4xi32> {
  %0 = polymesh.reshard %a <@rev, [{"x"}, {}]> : tensor<8x4xi32>
  return %0 : tensor<8x4xi32>
}

// 10 rows over 4 devices: tiles of 3, 3, 3 and 1 row, each receiving 3 of
// its 4 columns; the last tile's padding is not compared.
// CHECK-NEXT: @uneven: 1 leaf, 120 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @uneven(%a: tensor<10x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>}) -> tensor<10x4xf32> {
  %0 = polymesh.reshard %a <@m4, [{"x"}, {}]> : tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// Sub-axes of one axis: devices 2-5 need rows the other half holds.
// CHECK-NEXT: @sub_axis: 1 leaf, 128 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS
func.func @sub_axis(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m8, [{"x":(1)2}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@m8, [{"x":(2)4}, {"x":(1)2}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Two-byte and one-byte elements.
// CHECK-NEXT: @bf16: 1 leaf, 96 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @bf16(%a: tensor<8x8xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x8xbf16> {
  %0 = polymesh.reshard %a <@m4, [{}, {"x"}]> : tensor<8x8xbf16>
  return %0 : tensor<8x8xbf16>
}
// CHECK-NEXT: @i1: 1 leaf, 192 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @i1(%a: tensor<8x8xi1> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x8xi1> {
  %0 = polymesh.reshard %a <@m4, [{}, {}]> : tensor<8x8xi1>
  return %0 : tensor<8x8xi1>
}

// Gathered onto one device, which holds two rows already.
// CHECK-NEXT: @to_one_device: 1 leaf, 192 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @to_one_device(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@dev3, [{}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Partial sums: the first device of each reduction group holds the input,
// the other zeros; the all-reduce (2 * (2 - 1) * 128 bytes per group) must
// give every device the input back.
// CHECK-NEXT: @partial_sum: 1 leaf, 512 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @partial_sum(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@m22, [{"x"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Two transfers in a chain through a constraint, an argument and an
// intermediate value returned as well, and a second argument: 96 + 128 + 24
// bytes.
// CHECK-NEXT: @chain: 4 leaves, 248 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS
func.func @chain(%a: tensor<16x8xi8> {polymesh.sharding = #polymesh.sharding<@stage0, [{"dp"}, {"tp"}]>},
                 %b: tensor<4xi64> {polymesh.sharding = #polymesh.sharding<@dev3, [{}]>})
    -> (tensor<16x8xi8>, tensor<16x8xi8>,
        tensor<4xi64> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}]>}, tensor<16x8xi8>) {
  %0 = polymesh.reshard %a <@rev, [{}, {"x"}]> : tensor<16x8xi8>
  %1 = polymesh.sharding_constraint %0 <@rev, [{}, {"x"}]> : tensor<16x8xi8>
  %2 = polymesh.reshard %1 <@stage1, [{"tp"}, {"dp"}]> : tensor<16x8xi8>
  return %2, %a, %b, %1 : tensor<16x8xi8>, tensor<16x8xi8>, tensor<4xi64>, tensor<16x8xi8>
}

// A rank-0 tensor from one device to four others.
// CHECK-NEXT: @scalar: 1 leaf, 32 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 5 devices, PASS
func.func @scalar(%a: tensor<f64> {polymesh.sharding = #polymesh.sharding<@dev3, []>})
    -> (tensor<f64> {polymesh.sharding = #polymesh.sharding<@stage1, []>}) {
  return %a : tensor<f64>
}

// A function that computes: the partitioned program runs it; the plan
// executor cannot.
// PART-NEXT:    @compute: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// PART-NEXT:    13 passed, 0 failed
// EXEC-NEXT:    @compute: 1 leaf, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, FAIL: not verified: --sharded-path=executor runs only functions that move data
// EXEC-NEXT:    12 passed, 1 failed
// CUDA-NEXT:    @compute: 1 leaf, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, FAIL: --polymesh-lower-to-cuda failed: verify-movement.mlir:[[#@LINE+5]]:8: cannot be lowered to CUDA: the cuda target moves and places data
// CUDA-NEXT:    12 passed, 1 failed
// COMPUTE:      @compute: 1 leaf, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, FAIL: not verified: --sharded-path=executor runs only functions that move data
// COMPUTE-NEXT: 0 passed, 1 failed
func.func @compute(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}]>}) -> tensor<8xf32> {
  %0 = arith.negf %a : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// The Orbax restore: replica 0 (devices 0 and 1) broadcasts its two 8 MiB
// column halves to the 15 other replicas of the 32-device training mesh,
// 2 * 15 * 4096 * 512 * 4 bytes. The globalize function computes
// (expand_shape, fill) on devices 0 and 5 only and moves nothing.
// ORBAX:          @restore: 1 leaf, 251658240 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 32 devices, PASS
// ORBAX-NEXT:     1 passed, 0 failed
// ORBAX-ALL:      @globalize_single_replica_arrays: 2 leaves, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 2 devices, PASS
// ORBAX-ALL-NEXT: @restore: 1 leaf, 251658240 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 32 devices, PASS
// ORBAX-ALL-NEXT: 2 passed, 0 failed
