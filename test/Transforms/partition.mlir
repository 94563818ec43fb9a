// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition -split-input-file | FileCheck %s --enable-var-scope

// --polymesh-partition: one function per class of devices with the same
// exact tiles; the plan stored once and run by polymesh.exchange; a dense
// constant sliced at table offsets; splats resized; reshapes made local.

polymesh.mesh @mesh = <["x"=2]>
polymesh.mesh @m2 = <["y"=4], device_ids=[2, 3, 4, 5]>

// Devices 0-1 hold 4x6 rows; 2-4 hold 8x2 columns; device 5 holds an empty
// column block (6 over 4 is 2, 2, 2, 0): three classes.
// CHECK-LABEL: func.func @f__part0(
// CHECK-SAME: %[[RT:.*]]: !llvm.ptr, %[[DEV:.*]]: i64, %[[POS:.*]]: index, %[[A:.*]]: tensor<4x6xf32>) -> (tensor<0x0xf32> {polymesh.leaf = "out"})
// CHECK-SAME: attributes {polymesh.devices = array<i64: 0, 1>, polymesh.meshes = [@mesh, @m2], polymesh.partition_of = "f"}
// CHECK: %[[TABLE:.*]] = arith.constant dense<{{\[}}[0, 0], [4, 0], [0, 0], [0, 0], [0, 0], [0, 0]]> : tensor<6x2xindex>
// CHECK: %[[FULL:.*]] = arith.constant dense<
// CHECK: %[[ROW:.*]] = tensor.extract %[[TABLE]][%[[POS]], %{{.*}}] : tensor<6x2xindex>
// CHECK: %[[COL:.*]] = tensor.extract %[[TABLE]][%[[POS]], %{{.*}}] : tensor<6x2xindex>
// CHECK: %[[SLICE:.*]] = tensor.extract_slice %[[FULL]][%[[ROW]], %[[COL]]] [4, 6] [1, 1] : tensor<8x6xf32> to tensor<4x6xf32>
// CHECK: %[[SUM:.*]] = arith.addf %[[A]], %[[SLICE]] : tensor<4x6xf32>
// CHECK: %[[X:.*]] = polymesh.exchange %[[SUM]] plan @f__plan0 on %[[RT]], %[[DEV]], %[[POS]] : !llvm.ptr, tensor<4x6xf32> -> tensor<0x0xf32>
// Devices 0-1 hold nothing of the negation's result: they do not run it.
// CHECK-NOT: arith.negf
// CHECK: tensor.empty() : tensor<0x0xf32>
// CHECK-LABEL: func.func private @f__plan0(
// CHECK-SAME: tensor<8x6xf32>) -> tensor<8x6xf32> attributes {polymesh.plan}
// CHECK-NEXT: polymesh.transfer %{{.*}} <@mesh, [{"x"}, {}]> -> <@m2, [{}, {"y"}]> steps [
// CHECK-LABEL: func.func @f__part1(
// CHECK-SAME: tensor<0x0xf32>) -> (tensor<8x2xf32> {polymesh.leaf = "out"})
// CHECK-SAME: polymesh.devices = array<i64: 2, 3, 4>
// CHECK: polymesh.exchange %{{.*}} plan @f__plan0 on {{.*}} : !llvm.ptr, tensor<0x0xf32> -> tensor<8x2xf32>
// CHECK-LABEL: func.func @f__part2(
// CHECK-SAME: -> (tensor<8x0xf32> {polymesh.leaf = "out"})
// CHECK-SAME: polymesh.devices = array<i64: 5>
// CHECK-NOT: func.func @f(
func.func @f(%a: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x6xf32> {polymesh.leaf = "out"}) {
  %c = arith.constant dense<[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]> : tensor<8x6xf32>
  %0 = arith.addf %a, %c : tensor<8x6xf32>
  %1 = polymesh.reshard %0 <@m2, [{}, {"y"}]> : tensor<8x6xf32>
  %2 = arith.negf %1 : tensor<8x6xf32>
  return %2 : tensor<8x6xf32>
}

// -----

// A matmul with its contracting dimension sharded: one class of four
// devices; the partial sums are all-reduced by the plan; the reshape's
// output shape becomes the tile's.
polymesh.mesh @m = <["x"=2, "y"=2]>

// CHECK-LABEL: func.func @mm__part0(
// CHECK-SAME: %{{.*}}: tensor<4x3xf32>, %{{.*}}: tensor<3x4xf32>) -> tensor<4x4xf32>
// CHECK-SAME: polymesh.devices = array<i64: 0, 1, 2, 3>
// CHECK: %[[F:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK: %[[P:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<3x4xf32>) outs(%[[F]] : tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK: %[[R:.*]] = polymesh.exchange %[[P]] plan @mm__plan0
// CHECK: tensor.expand_shape %[[R]] {{\[}}[0], [1, 2]] output_shape [4, 2, 2] : tensor<4x4xf32> into tensor<4x2x2xf32>
// CHECK-NOT: func.func @mm__part1
// CHECK-LABEL: func.func private @mm__plan0(
// CHECK: polymesh.transfer %{{.*}} <@m, [{"x"}, {}], unreduced={"y"}> -> <@m, [{"x"}, {}]> steps [
// CHECK-NEXT: all_reduce
func.func @mm(%a: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}, %b: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>}) -> (tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}) {
  %e = tensor.empty() : tensor<8x4xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x4xf32>) -> tensor<8x4xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x6xf32>, tensor<6x4xf32>) outs(%f : tensor<8x4xf32>) -> tensor<8x4xf32>
  %s = tensor.expand_shape %r [[0], [1, 2]] output_shape [8, 2, 2] : tensor<8x4xf32> into tensor<8x2x2xf32>
  %c = tensor.collapse_shape %s [[0], [1, 2]] : tensor<8x2x2xf32> into tensor<8x4xf32>
  return %c : tensor<8x4xf32>
}

// -----

// The flax report: four meshes, a device in each holds something; constants
// are splats, resized to each tile.
polymesh.mesh @mesh1 = <["a"=2, "b"=4]>
polymesh.mesh @mesh3 = <["c"=8]>

// CHECK-LABEL: func.func @init__part0(
// CHECK-SAME: -> (tensor<8x4xf32> {polymesh.leaf = "w1"}, tensor<2x16xf32> {polymesh.leaf = "w3"})
// CHECK: arith.constant dense<1.000000e+00> : tensor<8x4xf32>
// CHECK: arith.constant dense<1.000000e+00> : tensor<2x16xf32>
// CHECK-NOT: func.func @init__part1
func.func @init() -> (tensor<16x16xf32> {polymesh.leaf = "w1"}, tensor<16x16xf32> {polymesh.leaf = "w3"}) {
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  return %p1, %p3 : tensor<16x16xf32>, tensor<16x16xf32>
}
