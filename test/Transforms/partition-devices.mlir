// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan "--polymesh-partition=devices=2,4,9" -split-input-file | FileCheck %s --enable-var-scope
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition -split-input-file | FileCheck %s --check-prefix=ALL --enable-var-scope

// --polymesh-partition=devices=...: what one process of a multi-process run
// compiles. Only the classes that one of the listed devices runs are built,
// each listing only those of its devices; classes keep their numbers over
// every device, so a class has the same name in every process. Every class
// names its function's meshes, whose devices its positions count.

// Meshes with odd ids: @a = [4, 0, 2] holds rows 3, 3 and 2 of 8 (uneven),
// @b = [5, 1] holds columns. Positions count the devices [0, 1, 2, 4, 5]:
// class 0 is devices 0 and 4 (3 rows), class 1 devices 1 and 5 (columns),
// class 2 device 2 (2 rows). Devices 2 and 4 run classes 0 and 2; device 9
// is no device of the program and is ignored.
polymesh.mesh @a = <["x"=3], device_ids=[4, 0, 2]>
polymesh.mesh @b = <["y"=2], device_ids=[5, 1]>

// CHECK-LABEL: func.func @f__part0(
// CHECK-SAME: %{{.*}}: tensor<3x6xf32>) -> tensor<0x0xf32>
// CHECK-SAME: attributes {polymesh.devices = array<i64: 4>, polymesh.meshes = [@a, @b], polymesh.partition_of = "f"}
// CHECK: polymesh.exchange %{{.*}} plan @f__plan0 on
// CHECK-LABEL: func.func private @f__plan0(
// CHECK: polymesh.transfer
// CHECK-NOT: func.func @f__part1(
// CHECK-LABEL: func.func @f__part2(
// CHECK-SAME: %{{.*}}: tensor<2x6xf32>) -> tensor<0x0xf32>
// CHECK-SAME: attributes {polymesh.devices = array<i64: 2>, polymesh.meshes = [@a, @b], polymesh.partition_of = "f"}
// CHECK: polymesh.exchange %{{.*}} plan @f__plan0 on
// CHECK-NOT: func.func @f

// ALL-LABEL: func.func @f__part0(
// ALL-SAME: polymesh.devices = array<i64: 0, 4>, polymesh.meshes = [@a, @b]
// ALL-LABEL: func.func @f__part1(
// ALL-SAME: polymesh.devices = array<i64: 1, 5>, polymesh.meshes = [@a, @b]
// ALL-LABEL: func.func @f__part2(
// ALL-SAME: polymesh.devices = array<i64: 2>, polymesh.meshes = [@a, @b]
func.func @f(%x: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
    -> (tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"y"}]>}) {
  %0 = arith.negf %x : tensor<8x6xf32>
  %1 = polymesh.reshard %0 <@b, [{}, {"y"}]> : tensor<8x6xf32>
  return %1 : tensor<8x6xf32>
}

// -----

// A function none of whose devices is listed has nothing to run in this
// process: no class, no plan.
polymesh.mesh @b = <["y"=2], device_ids=[5, 1]>

// CHECK-NOT: func.func
// ALL-LABEL: func.func @g__part0(
// ALL-SAME: polymesh.devices = array<i64: 1, 5>, polymesh.meshes = [@b]
func.func @g(%x: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@b, [{"y"}, {}]>})
    -> (tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"y"}]>}) {
  %1 = polymesh.reshard %x <@b, [{}, {"y"}]> : tensor<8x6xf32>
  return %1 : tensor<8x6xf32>
}
