// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: polymesh-run %s | FileCheck %s --check-prefix=RAN
// RUN: polymesh-run %polymesh_src_root/examples/flax-multi-mesh-init.mlir --verify \
// RUN:   | FileCheck %s --check-prefix=FLAX

// --verify compares a sharded run with the unsharded reference: every
// function is propagated, planned, partitioned and lowered to the CPU, runs
// with one thread per device on the loopback runtime, and every device's
// tile of every result must equal the reference's box bit for bit
// (test/Run/verify-compute.mlir and verify-movement.mlir have the cases).
// Without --verify only the reference runs. A function that the sharded
// path cannot compile fails on its own line (test/Run/errors.test).

polymesh.mesh @mesh = <["x"=2]>

// CHECK: @neg: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 2 devices, PASS
// RAN: @neg: 1 leaf, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms{{$}}
func.func @neg(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %0 = arith.negf %a : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// A reshard that only slices: each device keeps its half, nothing crosses.
// CHECK-NEXT: @copy: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 2 devices, PASS
// RAN-NEXT: @copy: 1 leaf, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms{{$}}
func.func @copy(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{}]>}) -> tensor<8xf32> {
  %0 = polymesh.reshard %a <@mesh, [{"x"}]> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// CHECK-NEXT: 2 passed, 0 failed
// RAN-NEXT: 2 ran, 0 failed

// The Flax report: three leaves on three meshes of devices 0-7, each
// filled with ones on its own tiles.
// FLAX: @init_model_nnx_jit: 3 leaves, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS
// FLAX-NEXT: 1 passed, 0 failed
