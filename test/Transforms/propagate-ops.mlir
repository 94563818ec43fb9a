// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// One case per op rule: shardings flow forward and backward through ops.

polymesh.mesh @m = <["a"=2, "b"=4]>

// Elementwise (arith, math, tosa), forward and backward into an argument.
// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: %arg1: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}
// CHECK-SAME: -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>})
// CHECK: arith.addf {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}
// CHECK: math.exp {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}
// CHECK: tosa.add {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}
// CHECK-NOT: polymesh.reshard
func.func @elementwise(%a: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}, %b: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = arith.addf %a, %b : tensor<16x16xf32>
  %1 = math.exp %0 : tensor<16x16xf32>
  %2 = tosa.add %1, %b : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return %2 : tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// tosa.mul's shift operand is never sharded.
// CHECK-LABEL: func.func @tosa_mul
// CHECK: "tosa.const"() <{values = dense<0> : tensor<1xi8>}> {polymesh.sharding = #polymesh.sharding<@m, [{}]>}
// CHECK: tosa.mul {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}
// CHECK-NOT: polymesh.reshard
func.func @tosa_mul(%a: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<16x16xf32> {
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %0 = tosa.mul %a, %a, %shift : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<1xi8>) -> tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// Constants, splats and empty tensors take the sharding of their users.
// CHECK-LABEL: func.func @creators
// CHECK: arith.constant {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>} dense<1.000000e+00>
// CHECK: tensor.splat {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK: tensor.empty() {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK: linalg.fill {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
func.func @creators(%s: f32) -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}) {
  %c = arith.constant dense<1.0> : tensor<8x8xf32>
  %splat = tensor.splat %s : tensor<8x8xf32>
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%s : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %0 = arith.addf %c, %splat : tensor<8x8xf32>
  %1 = arith.addf %0, %f : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// A constant used on two meshes is materialized once per use.
polymesh.mesh @n = <["c"=8], device_ids=[8, 9, 10, 11, 12, 13, 14, 15]>
// CHECK-LABEL: func.func @shared_constant
// CHECK: arith.constant {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}
// CHECK: arith.constant {polymesh.sharding = #polymesh.sharding<@n, [{"c"}]>}
// CHECK-NOT: polymesh.reshard
func.func @shared_constant(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>},
                           %y: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@n, [{"c"}]>}) -> (tensor<8xf32>, tensor<8xf32>) {
  %c = arith.constant dense<2.0> : tensor<8xf32>
  %0 = arith.mulf %x, %c : tensor<8xf32>
  %1 = arith.mulf %y, %c : tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// linalg.transpose through its ShardingInterface indexing maps.
// CHECK-LABEL: func.func @transpose
// CHECK-SAME: -> (tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {"a"}]>})
// CHECK: linalg.transpose {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {"a"}]>}
func.func @transpose(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<8x16xf32> {
  %e = tensor.empty() : tensor<8x16xf32>
  %t = linalg.transpose ins(%a : tensor<16x8xf32>) outs(%e : tensor<8x16xf32>) permutation = [1, 0]
  return %t : tensor<8x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// linalg.broadcast: the new dimension is replicated.
// CHECK-LABEL: func.func @broadcast
// CHECK-SAME: -> (tensor<4x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>})
func.func @broadcast(%a: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}]>}) -> tensor<4x16xf32> {
  %e = tensor.empty() : tensor<4x16xf32>
  %t = linalg.broadcast ins(%a : tensor<16xf32>) outs(%e : tensor<4x16xf32>) dimensions = [0]
  return %t : tensor<4x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// Backward through linalg.broadcast: the input takes the kept dimension.
// CHECK-LABEL: func.func @broadcast_backward
// CHECK-SAME: %arg0: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}]>}
func.func @broadcast_backward(%a: tensor<16xf32>) -> (tensor<4x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) {
  %e = tensor.empty() : tensor<4x16xf32>
  %t = linalg.broadcast ins(%a : tensor<16xf32>) outs(%e : tensor<4x16xf32>) dimensions = [0]
  return %t : tensor<4x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// linalg.matmul: a sharded contracting dimension makes the result a partial
// sum (unreduced); it is reduced before it leaves the function.
// CHECK-LABEL: func.func @matmul
// CHECK-SAME: %arg1: tensor<32x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK-SAME: -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>})
// CHECK: %[[MM:.*]] = linalg.matmul {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}], unreduced={"b"}>}
// CHECK: %[[R:.*]] = polymesh.reshard %[[MM]] <@m, [{"a"}, {}]>
// CHECK: return %[[R]]
func.func @matmul(%a: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}, %b: tensor<32x8xf32>) -> tensor<16x8xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %r = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x8xf32>) outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// A result that declares its partial sums keeps them.
// CHECK-LABEL: func.func @matmul_unreduced_result
// CHECK-SAME: -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}], unreduced={"b"}>})
// CHECK-NOT: polymesh.reshard
func.func @matmul_unreduced_result(%a: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}, %b: tensor<32x8xf32>) -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}], unreduced={"b"}>}) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %r = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x8xf32>) outs(%f : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// A sum reduction in linalg.generic over a sharded dimension is unreduced;
// a max reduction cannot be, so its input is gathered along that dimension.
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @reductions
// CHECK: linalg.generic {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a"}], unreduced={"b"}>}
// CHECK: polymesh.reshard %arg0 <@m, [{"a"}, {}]>
// CHECK: linalg.generic {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}
func.func @reductions(%x: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> (tensor<16xf32>, tensor<16xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x32xf32>) outs(%f : tensor<16xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %e2 = tensor.empty() : tensor<16xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<16xf32>) -> tensor<16xf32>
  %max = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<16x32xf32>) outs(%f2 : tensor<16xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %m = arith.maximumf %in, %acc : f32
    linalg.yield %m : f32
  } -> tensor<16xf32>
  return %sum, %max : tensor<16xf32>, tensor<16xf32>
}

// -----

polymesh.mesh @m2 = <["x"=8]>

// Reshapes: a split axis becomes sub-axes, and merges back.
// CHECK-LABEL: func.func @collapse
// CHECK-SAME: -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x"}, {}]>})
func.func @collapse(%a: tensor<4x4x8xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x":(1)4}, {"x":(4)2}, {}]>}) -> tensor<16x8xf32> {
  %c = tensor.collapse_shape %a [[0, 1], [2]] : tensor<4x4x8xf32> into tensor<16x8xf32>
  return %c : tensor<16x8xf32>
}

// CHECK-LABEL: func.func @expand
// CHECK-SAME: -> (tensor<4x4x8xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x":(1)4}, {"x":(4)2}, {}]>})
func.func @expand(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x"}, {}]>}) -> tensor<4x4x8xf32> {
  %c = tensor.expand_shape %a [[0, 1], [2]] output_shape [4, 4, 8] : tensor<16x8xf32> into tensor<4x4x8xf32>
  return %c : tensor<4x4x8xf32>
}

// A minor dimension cannot be sharded while the major one is not full:
// collapsing [{}, {"x"}] needs the operand gathered first.
// CHECK-LABEL: func.func @collapse_minor
// CHECK: %[[G:.*]] = polymesh.reshard %arg0 <@m2, [{}, {}]>
// CHECK: tensor.collapse_shape %[[G]]
func.func @collapse_minor(%a: tensor<4x16xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{}, {"x"}]>}) -> tensor<64xf32> {
  %c = tensor.collapse_shape %a [[0, 1]] : tensor<4x16xf32> into tensor<64xf32>
  return %c : tensor<64xf32>
}

// An uneven split cannot cross a reshape exactly.
// CHECK-LABEL: func.func @expand_uneven
// CHECK: polymesh.reshard %arg0 <@m2, [{}]>
func.func @expand_uneven(%a: tensor<12xf32> {polymesh.sharding = #polymesh.sharding<@m2, [{"x"}]>}) -> tensor<3x4xf32> {
  %c = tensor.expand_shape %a [[0, 1]] output_shape [3, 4] : tensor<12xf32> into tensor<3x4xf32>
  return %c : tensor<3x4xf32>
}
