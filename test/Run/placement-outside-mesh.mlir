// REQUIRES: nccl
// RUN: polymesh-run %s --verify --backend=nccl --simulate-gpus | FileCheck %s
// RUN: polymesh-run %s --verify | FileCheck %s

// Devices outside a value's mesh hold an empty tile of it and do not run
// the op that makes it (partition gives them a zero-size tensor.empty).
// The CUDA lowering gives such a tile a pointer too: the exchange that
// moves the value on reads it (found by utils/gen-programs.py, seed 7:
// the lowering dereferenced a missing pointer).

polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=2], device_ids=[2, 3]>

// CHECK: @fill_elsewhere: 2 leaves, {{[0-9]+}} bytes moved, {{.*}} on 4 devices, PASS
func.func @fill_elsewhere() -> (tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@b, [{"y"}, {}]>},
                                tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@a, [{}, {"x"}]>}) {
  %c = arith.constant 2.5 : f32
  %e = tensor.empty() : tensor<6x4xf32>
  %f = linalg.fill ins(%c : f32) outs(%e : tensor<6x4xf32>) -> tensor<6x4xf32>
  %g = polymesh.sharding_constraint %f <@b, [{"y"}, {}]> : tensor<6x4xf32>
  %h = polymesh.reshard %g <@a, [{}, {"x"}]> : tensor<6x4xf32>
  return %g, %h : tensor<6x4xf32>, tensor<6x4xf32>
}

// CHECK-NEXT: @reshape_elsewhere: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} PASS
func.func @reshape_elsewhere(%x: tensor<4x6xi32> {polymesh.sharding = #polymesh.sharding<@b, [{"y"}, {}]>}) -> (tensor<4x6xi32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>}) {
  %0 = tensor.collapse_shape %x [[0, 1]] : tensor<4x6xi32> into tensor<24xi32>
  %1 = tensor.expand_shape %0 [[0, 1]] output_shape [4, 6] : tensor<24xi32> into tensor<4x6xi32>
  %2 = polymesh.reshard %1 <@a, [{"x"}, {}]> : tensor<4x6xi32>
  return %2 : tensor<4x6xi32>
}
