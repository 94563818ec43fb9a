// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition | FileCheck %s --check-prefix=PART

// Slices, inserts, pads and concatenations partitioned and run on every
// device (issue 15, items 2-3), with uneven tiles (9 rows over 6 devices:
// 2, 2, 2, 2, 1 and 0) and odd device ids. A kept dimension's static size
// in a slice or insert becomes the tile's; the rules are in
// test/Transforms/propagate-slices.mlir.

polymesh.mesh @m = <["x"=2, "y"=3]>
polymesh.mesh @r = <["z"=4], device_ids=[7, 5, 3, 1]>

// CHECK: @strided: 1 leaf, 960 bytes moved, {{.*}} on 6 devices, PASS
// PART-LABEL: func.func @strided__part0
// PART: tensor.extract_slice %{{.*}}[0, 0] [5, 6] [1, 2] : tensor<5x12xf32> to tensor<5x6xf32>
// CHECK-NEXT: @row: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// PART-LABEL: func.func @row__part0
// PART: tensor.extract_slice %{{.*}}[1, 0] [1, 3] [1, 1] : tensor<4x3xf32> to tensor<3xf32>
// CHECK-NEXT: @pad: 1 leaf, 0 bytes moved, {{.*}} on 4 devices, PASS
// PART-LABEL: func.func @pad__part0
// PART: tensor.pad %{{.*}} low[0, 1] high[0, 2]
// PART: : tensor<1x5xf32> to tensor<1x8xf32>
// CHECK-NEXT: @concat: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// PART-LABEL: func.func @concat__part0
// PART: tensor.concat dim(1) %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: @dynamic_slice: 1 leaf, 216 bytes moved, {{.*}} on 6 devices, PASS
// PART-LABEL: func.func @dynamic_slice__part0
// PART: tensor.extract_slice %{{.*}}[%{{.*}}, 0] [1, 3] [1, 1] : tensor<6x3xf32> to tensor<1x3xf32>
// CHECK-NEXT: @update_row: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// PART-LABEL: func.func @update_row__part0
// PART: tensor.insert_slice %{{.*}} into %{{.*}}[%{{.*}}, 0] [1, 3] [1, 1] : tensor<3xf32> into tensor<6x3xf32>
// CHECK-NEXT: @update_block: 1 leaf, 1080 bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: @concat_leaf: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: 8 passed, 0 failed

// q[:, ::2] of a batch-split activation: dim 0 kept (split), dim 1 strided.
func.func @strided(%q: tensor<10x12xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<10x6xf32> {
  %0 = tensor.extract_slice %q[0, 0] [10, 6] [1, 2] : tensor<10x12xf32> to tensor<10x6xf32>
  return %0 : tensor<10x6xf32>
}

// A rank-reducing slice (w[1]) of a weight split on its columns.
func.func @row(%w: tensor<4x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>}) -> tensor<9xf32> {
  %0 = tensor.extract_slice %w[1, 0] [1, 9] [1, 1] : tensor<4x9xf32> to tensor<9xf32>
  return %0 : tensor<9xf32>
}

// Pad along the sequence, split along the batch; then elementwise.
func.func @pad(%x: tensor<7x5xf32> {polymesh.sharding = #polymesh.sharding<@r, [{"z"}, {}]>}) -> tensor<7x8xf32> {
  %c = arith.constant 0.5 : f32
  %0 = tensor.pad %x low[0, 1] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %c : f32
  } : tensor<7x5xf32> to tensor<7x8xf32>
  %1 = arith.negf %0 : tensor<7x8xf32>
  return %1 : tensor<7x8xf32>
}

// Concat along dim 1 of two batch-split values (as unrolled scan does).
func.func @concat(%a: tensor<9x3xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x", "y"}, {}]>},
                  %b: tensor<9x5xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x", "y"}, {}]>}) -> tensor<9x8xf32> {
  %0 = tensor.concat dim(1) %a, %b : (tensor<9x3xf32>, tensor<9x5xf32>) -> tensor<9x8xf32>
  return %0 : tensor<9x8xf32>
}

// lax.dynamic_slice(x, (i, 0), (1, 9)): dim 1 kept (split 3 ways).
func.func @dynamic_slice(%x: tensor<6x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<1x9xf32> {
  %i = arith.constant 4 : index
  %0 = tensor.extract_slice %x[%i, 0] [1, 9] [1, 1] : tensor<6x9xf32> to tensor<1x9xf32>
  return %0 : tensor<1x9xf32>
}

// x.at[2].set(row): dynamic_update_slice of one row into a column-split x.
func.func @update_row(%x: tensor<6x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>},
                      %row: tensor<9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}]>}) -> tensor<6x9xf32> {
  %i = arith.constant 2 : index
  %0 = tensor.insert_slice %row into %x[%i, 0] [1, 9] [1, 1] : tensor<9xf32> into tensor<6x9xf32>
  return %0 : tensor<6x9xf32>
}

// Insert a block at an offset along both dims: everything replicated.
func.func @update_block(%x: tensor<6x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                        %b: tensor<2x3xf32>) -> tensor<6x9xf32> {
  %0 = tensor.insert_slice %b into %x[1, 2] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<6x9xf32>
  return %0 : tensor<6x9xf32>
}

// The leaf of a concat of operands split along its dim keeps the split.
func.func @concat_leaf(%a: tensor<5x7xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                       %b: tensor<5x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<5x11xf32> {
  %0 = tensor.concat dim(1) %a, %b : (tensor<5x7xf32>, tensor<5x4xf32>) -> tensor<5x11xf32>
  return %0 : tensor<5x11xf32>
}
