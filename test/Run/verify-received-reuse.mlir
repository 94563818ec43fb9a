// RUN: polymesh-run %s --verify | FileCheck %s

// A value that an exchange received stays intact while it is still to be
// sent (issue 13, item 2): the CPU lowering hands received buffers to
// bufferization as not writable, so an elementwise op reading one writes
// its result elsewhere. Before, `negf` wrote in place into the received
// buffer and the second reshard sent negated data ("expected -8, got 8").

polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=4], device_ids=[2, 3, 4, 5]>
polymesh.mesh @c = <["p"=2, "q"=3], device_ids=[9, 7, 5, 3, 1, 0]>

// CHECK: @neg_then_reshard: 2 leaves, 512 bytes moved, {{.*}} on 6 devices, PASS
func.func @neg_then_reshard(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>}) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %0 = polymesh.reshard %x <@b, [{"y"}, {}]> : tensor<8x8xf32>
  %1 = arith.negf %0 : tensor<8x8xf32>
  %2 = polymesh.reshard %0 <@a, [{}, {"x"}]> : tensor<8x8xf32>
  return %1, %2 : tensor<8x8xf32>, tensor<8x8xf32>
}

// Two elementwise ops in a row on the received tile, the second reshard
// after both, uneven tiles on a mesh with odd ids.
// CHECK-NEXT: @chain_then_reshard: 2 leaves, {{[0-9]+}} bytes moved, {{.*}} PASS
func.func @chain_then_reshard(%x: tensor<7x10xi32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>}) -> (tensor<7x10xi32>, tensor<7x10xi32>) {
  %0 = polymesh.reshard %x <@c, [{"q"}, {"p"}]> : tensor<7x10xi32>
  %1 = arith.addi %0, %0 : tensor<7x10xi32>
  %2 = arith.muli %1, %0 : tensor<7x10xi32>
  %3 = polymesh.reshard %0 <@b, [{}, {"y"}]> : tensor<7x10xi32>
  return %2, %3 : tensor<7x10xi32>, tensor<7x10xi32>
}

// The received value read by an op between two reshards of it, and
// returned itself.
// CHECK-NEXT: @read_between: 3 leaves, {{[0-9]+}} bytes moved, {{.*}} PASS
func.func @read_between(%x: tensor<16x4xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>}) -> (tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>) {
  %0 = polymesh.reshard %x <@b, [{"y"}, {}]> : tensor<16x4xf32>
  %1 = polymesh.reshard %0 <@c, [{"p", "q"}, {}]> : tensor<16x4xf32>
  %2 = math.absf %0 : tensor<16x4xf32>
  %3 = polymesh.reshard %0 <@a, [{}, {}]> : tensor<16x4xf32>
  return %1, %2, %3 : tensor<16x4xf32>, tensor<16x4xf32>, tensor<16x4xf32>
}
