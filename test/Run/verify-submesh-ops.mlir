// RUN: polymesh-opt %s --polymesh-propagate 2>/dev/null | FileCheck %s
// RUN: polymesh-run %s --verify 2>/dev/null | FileCheck %s --check-prefix=EXEC

// Issue 13, item 12.
polymesh.mesh @m = <["z"=1, "x"=2]>
polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=2], device_ids=[2, 3]>
polymesh.mesh @c = <["p"=3], device_ids=[11, 7, 5]>

// Operands sharded by a size-1 axis on different dimensions: propagation
// used to merge them into [{"z"}, {"z"}], which the planner refuses. An
// axis may shard one factor only, whatever its size.
// CHECK-LABEL: func.func @size_one_axis
// CHECK: arith.addf {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"z"}, {}]>}
// EXEC: @size_one_axis: 1 leaf, 0 bytes moved, {{.*}} on 2 devices, PASS
func.func @size_one_axis(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"z"}, {}]>},
                         %b: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"z"}]>}) -> tensor<8x8xf32> {
  %0 = arith.addf %a, %b : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Ops on meshes that do not cover all of the function's devices: the
// devices outside an op's mesh hold nothing of it and do not run it.
// Before, they ran it on zero-size tiles, which tosa.add refuses and an
// extract_slice with static offsets indexes out of bounds.
// EXEC-NEXT: @ops_on_submeshes: 4 leaves, {{[0-9]+}} bytes moved, {{.*}} on 7 devices, PASS
func.func @ops_on_submeshes(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>},
                            %y: tensor<9x8xf32> {polymesh.sharding = #polymesh.sharding<@b, [{"y"}, {}]>},
                            %w: tensor<6x4xi32> {polymesh.sharding = #polymesh.sharding<@c, [{"p"}, {}]>})
    -> (tensor<8x8xf32>, tensor<9x8xf32>, tensor<4x8xf32>, tensor<6x4xi32>) {
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %0 = tosa.add %x, %x : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = tosa.add %y, %y : (tensor<9x8xf32>, tensor<9x8xf32>) -> tensor<9x8xf32>
  %2 = tensor.extract_slice %y[1, 0] [4, 8] [1, 1] : tensor<9x8xf32> to tensor<4x8xf32>
  %3 = tosa.mul %w, %w, %shift : (tensor<6x4xi32>, tensor<6x4xi32>, tensor<1xi8>) -> tensor<6x4xi32>
  return %0, %1, %2, %3 : tensor<8x8xf32>, tensor<9x8xf32>, tensor<4x8xf32>, tensor<6x4xi32>
}
