// RUN: polymesh-opt %s --polymesh-lower-to-cpu -split-input-file -verify-diagnostics
// RUN: echo "" | not polymesh-opt --polymesh-pipeline=target=rocm 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: error: polymesh-pipeline: target 'rocm' is not supported; use target=cpu, target=mpi or target=cuda

// --polymesh-lower-to-cpu needs partitioned programs.

polymesh.mesh @m = <["x"=2]>

func.func @unpartitioned(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{cannot be lowered to the CPU; run --polymesh-partition first}}
  %0 = polymesh.reshard %a <@m, [{"x"}]> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func private @not_a_plan(%x: tensor<4xf32>) -> tensor<4xf32>

func.func @f__part0(%rt: !llvm.ptr, %d: i64, %p: index, %a: tensor<2xf32>) -> tensor<2xf32> attributes {polymesh.partition_of = "f", polymesh.devices = array<i64: 0, 1>} {
  // expected-error @+1 {{plan @not_a_plan does not name a function marked 'polymesh.plan' whose body is one polymesh.transfer}}
  %0 = polymesh.exchange %a plan @not_a_plan on %rt, %d, %p : !llvm.ptr, tensor<2xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// A class function's devices must be devices of its meshes, whose sorted
// ids its positions count (hand-written or edited partitioned IR).
polymesh.mesh @m = <["x"=2]>

// expected-error @+1 {{runs device 7, which is not a device of its function's meshes}}
func.func @f__part0(%rt: !llvm.ptr, %d: i64, %p: index, %a: tensor<2xf32>) -> tensor<4xf32> attributes {polymesh.devices = array<i64: 0, 7>, polymesh.meshes = [@m], polymesh.partition_of = "f"} {
  %0 = polymesh.exchange %a plan @f__plan0 on %rt, %d, %p : !llvm.ptr, tensor<2xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @f__plan0(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {polymesh.plan} {
  %0 = polymesh.transfer %arg0 <@m, [{"x"}]> -> <@m, [{}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [2]} {1 -> [1], [2] : [4]},
    all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]} {1 -> [0], [2] : [4]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["x"=2]>

// expected-error @+1 {{'polymesh.meshes' names unknown mesh @nowhere}}
func.func @f__part0(%rt: !llvm.ptr, %d: i64, %p: index, %a: tensor<2xf32>) -> tensor<4xf32> attributes {polymesh.devices = array<i64: 0, 1>, polymesh.meshes = [@m, @nowhere], polymesh.partition_of = "f"} {
  %0 = polymesh.exchange %a plan @f__plan0 on %rt, %d, %p : !llvm.ptr, tensor<2xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @f__plan0(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {polymesh.plan} {
  %0 = polymesh.transfer %arg0 <@m, [{"x"}]> -> <@m, [{}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [2]} {1 -> [1], [2] : [4]},
    all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]} {1 -> [0], [2] : [4]}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}
