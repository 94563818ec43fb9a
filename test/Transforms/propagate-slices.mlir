// RUN: polymesh-opt %s --polymesh-propagate -split-input-file -verify-diagnostics | FileCheck %s

// Slices, inserts, pads and concatenation (issue 15, item 2): a dimension
// the op keeps whole keeps its axes, forwards and backwards; a dimension it
// changes (sliced, strided, offset, padded, concatenated) is replicated,
// with a reshard where the value was split there. Execution of the same
// forms: test/Run/verify-slices.mlir.

polymesh.mesh @m = <["x"=2, "y"=3]>

// q[:, ::2]: dim 0 keeps "x"; the strided dim 1 is gathered first.
// CHECK-LABEL: func.func @strided
// CHECK-SAME: -> (tensor<10x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>})
// CHECK: %[[G:.*]] = polymesh.reshard %arg0 <@m, [{"x"}, {}]>
// CHECK: tensor.extract_slice %[[G]][0, 0] [10, 6] [1, 2] {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
func.func @strided(%q: tensor<10x12xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<10x6xf32> {
  %0 = tensor.extract_slice %q[0, 0] [10, 6] [1, 2] : tensor<10x12xf32> to tensor<10x6xf32>
  return %0 : tensor<10x6xf32>
}

// w[1]: rank-reducing; the kept columns keep "y", nothing moves.
// CHECK-LABEL: func.func @row
// CHECK-SAME: -> (tensor<9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}]>})
// CHECK-NOT: polymesh.reshard
// CHECK: return
func.func @row(%w: tensor<4x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>}) -> tensor<9xf32> {
  %0 = tensor.extract_slice %w[1, 0] [1, 9] [1, 1] : tensor<4x9xf32> to tensor<9xf32>
  return %0 : tensor<9xf32>
}

// lax.dynamic_slice: the dynamic offset's dim is replicated, the other kept.
// CHECK-LABEL: func.func @dynamic_slice
// CHECK-SAME: -> (tensor<1x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>})
// CHECK: polymesh.reshard %arg0 <@m, [{}, {"y"}]>
func.func @dynamic_slice(%x: tensor<6x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}, %i: index) -> tensor<1x9xf32> {
  %0 = tensor.extract_slice %x[%i, 0] [1, 9] [1, 1] : tensor<6x9xf32> to tensor<1x9xf32>
  return %0 : tensor<1x9xf32>
}

// Backwards: the result's split reaches the unannotated source.
// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%arg0: tensor<6x12xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>})
// CHECK-NOT: polymesh.reshard
// CHECK: return
func.func @backward(%x: tensor<6x12xf32>) -> (tensor<6x5xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>}) {
  %0 = tensor.extract_slice %x[0, 2] [6, 5] [1, 2] : tensor<6x12xf32> to tensor<6x5xf32>
  return %0 : tensor<6x5xf32>
}

// -----

polymesh.mesh @m = <["x"=2, "y"=3]>

// x.at[2].set(row): the written row covers dim 1, which keeps "y" in the
// row and in the destination.
// CHECK-LABEL: func.func @update_row
// CHECK-SAME: -> (tensor<6x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>})
// CHECK-NOT: polymesh.reshard
// CHECK: tensor.insert_slice %arg1 into %arg0[%{{.*}}, 0] [1, 9] [1, 1] {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>}
func.func @update_row(%x: tensor<6x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>},
                      %row: tensor<9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}]>}, %i: index) -> tensor<6x9xf32> {
  %0 = tensor.insert_slice %row into %x[%i, 0] [1, 9] [1, 1] : tensor<9xf32> into tensor<6x9xf32>
  return %0 : tensor<6x9xf32>
}

// A block at an offset in both dims: replicated.
// CHECK-LABEL: func.func @update_block
// CHECK: polymesh.reshard %arg0 <@m, [{}, {}]>
// CHECK: tensor.insert_slice {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}
func.func @update_block(%x: tensor<6x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                        %b: tensor<2x3xf32>) -> tensor<6x9xf32> {
  %0 = tensor.insert_slice %b into %x[1, 2] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<6x9xf32>
  return %0 : tensor<6x9xf32>
}

// -----

polymesh.mesh @r = <["z"=4], device_ids=[7, 5, 3, 1]>

// Pad along the sequence, split along the batch: the batch split stays.
// CHECK-LABEL: func.func @pad
// CHECK-SAME: -> (tensor<7x8xf32> {polymesh.sharding = #polymesh.sharding<@r, [{"z"}, {}]>})
// CHECK-NOT: polymesh.reshard
// CHECK: tensor.pad
// CHECK: } {polymesh.sharding = #polymesh.sharding<@r, [{"z"}, {}]>} : tensor<7x5xf32> to tensor<7x8xf32>
func.func @pad(%x: tensor<7x5xf32> {polymesh.sharding = #polymesh.sharding<@r, [{"z"}, {}]>}) -> tensor<7x8xf32> {
  %c = arith.constant 0.5 : f32
  %0 = tensor.pad %x low[0, 1] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %c : f32
  } : tensor<7x5xf32> to tensor<7x8xf32>
  return %0 : tensor<7x8xf32>
}

// A pad whose value depends on the position has no rule: a tile's indices
// are not the global ones.
// CHECK-LABEL: func.func @index_pad
// CHECK: polymesh.reshard %arg0 <@r, [{}, {}]>
func.func @index_pad(%x: tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@r, [{"z"}, {}]>}) -> tensor<4x6xf32> {
  // expected-warning @+1 {{no sharding rule for 'tensor.pad'; computing it replicated on @r}}
  %0 = tensor.pad %x low[0, 1] high[0, 1] {
  ^bb0(%i: index, %j: index):
    %v = arith.index_cast %i : index to i32
    %f = arith.sitofp %v : i32 to f32
    tensor.yield %f : f32
  } : tensor<4x4xf32> to tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

polymesh.mesh @m = <["x"=2, "y"=3]>

// Concatenation along dim 1 keeps the batch split of both operands.
// CHECK-LABEL: func.func @concat
// CHECK-SAME: -> (tensor<9x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x", "y"}, {}]>})
// CHECK-NOT: polymesh.reshard
// CHECK: tensor.concat dim(1) %arg0, %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{"x", "y"}, {}]>}
func.func @concat(%a: tensor<9x3xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x", "y"}, {}]>},
                  %b: tensor<9x5xf32>) -> tensor<9x8xf32> {
  %0 = tensor.concat dim(1) %a, %b : (tensor<9x3xf32>, tensor<9x5xf32>) -> tensor<9x8xf32>
  return %0 : tensor<9x8xf32>
}

// Along the concatenated dim the operands are gathered; dim 1 keeps "y".
// CHECK-LABEL: func.func @concat_split_dim
// CHECK-SAME: -> (tensor<10x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>})
// CHECK: polymesh.reshard %arg0 <@m, [{}, {"y"}]>
func.func @concat_split_dim(%a: tensor<6x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                            %b: tensor<4x9xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>}) -> tensor<10x9xf32> {
  %0 = tensor.concat dim(0) %a, %b : (tensor<6x9xf32>, tensor<4x9xf32>) -> tensor<10x9xf32>
  return %0 : tensor<10x9xf32>
}

// -----

polymesh.mesh @m = <["x"=2, "y"=3]>

// Both operands split along the concatenated dim by "y", and the result is
// a leaf: it is computed whole along that dim (the operands are gathered)
// and the leaf keeps the split, as JAX's concatenation does; the reshard
// after it only slices.
// CHECK-LABEL: func.func @concat_leaf_keeps_split
// CHECK-SAME: -> (tensor<4x12xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>})
// CHECK: %[[A:.*]] = polymesh.reshard %arg0 <@m, [{"x"}, {}]>
// CHECK: %[[B:.*]] = polymesh.reshard %arg1 <@m, [{"x"}, {}]>
// CHECK: %[[C:.*]] = tensor.concat dim(1) %[[A]], %[[B]] {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK: %[[S:.*]] = polymesh.reshard %[[C]] <@m, [{"x"}, {"y"}]>
// CHECK: return %[[S]]
func.func @concat_leaf_keeps_split(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                                   %b: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<4x12xf32> {
  %0 = tensor.concat dim(1) %a, %b : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  return %0 : tensor<4x12xf32>
}

// Used by another op, the result stays whole along the dim.
// CHECK-LABEL: func.func @concat_used_stays_whole
// CHECK: tensor.concat {{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>}
// CHECK-NOT: <@m, [{"x"}, {"y"}]> : tensor<4x12xf32>
// CHECK: return
func.func @concat_used_stays_whole(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                                   %b: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<4x12xf32> {
  %0 = tensor.concat dim(1) %a, %b : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  %1 = arith.negf %0 : tensor<4x12xf32>
  return %1 : tensor<4x12xf32>
}

// A result that declares its sharding is moved there by finalization: no
// slice first.
// CHECK-LABEL: func.func @concat_declared_result
// CHECK: %[[C:.*]] = tensor.concat
// CHECK-NEXT: %[[R:.*]] = polymesh.reshard %[[C]] <@m, [{}, {}]>
// CHECK-NEXT: return %[[R]]
func.func @concat_declared_result(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                                  %b: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>})
    -> (tensor<4x12xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  %0 = tensor.concat dim(1) %a, %b : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  return %0 : tensor<4x12xf32>
}

// -----

polymesh.mesh @r = <["z"=4], device_ids=[7, 5, 3, 1]>

// A 0-d tensor read only as a scalar (the pad value, a start index) is
// replicated on the mesh of the ops that use the scalar, without an ambient
// mesh; so is what it is computed from.
// CHECK-LABEL: func.func @scalar_reads
// CHECK-SAME: %arg1: tensor<i32> {polymesh.sharding = #polymesh.sharding<@r, []>}
// CHECK: arith.sitofp %{{.*}} {polymesh.sharding = #polymesh.sharding<@r, []>} : tensor<i32> to tensor<f32>
func.func @scalar_reads(%x: tensor<8x5xf32> {polymesh.sharding = #polymesh.sharding<@r, [{"z"}, {}]>},
                        %start: tensor<i32>) -> tensor<8x3xf32> {
  %c = arith.constant dense<0> : tensor<i32>
  %f = arith.sitofp %c : tensor<i32> to tensor<f32>
  %v = tensor.extract %f[] : tensor<f32>
  %0 = tensor.pad %x low[0, 1] high[0, 1] {
  ^bb0(%i: index, %j: index):
    tensor.yield %v : f32
  } : tensor<8x5xf32> to tensor<8x7xf32>
  %s = tensor.extract %start[] : tensor<i32>
  %k = arith.index_cast %s : i32 to index
  %1 = tensor.extract_slice %0[0, %k] [8, 3] [1, 1] : tensor<8x7xf32> to tensor<8x3xf32>
  return %1 : tensor<8x3xf32>
}

// -----

polymesh.mesh @m = <["x"=2]>
polymesh.mesh @n = <["y"=2]>

// Scalars read on two meshes: nothing says which one holds the tensor.
func.func @scalar_reads_disagree(%x: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>},
                                 %y: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@n, [{"y"}]>},
                                 // expected-error @+1 {{value is not placed}}
                                 %t: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %v = tensor.extract %t[] : tensor<f32>
  %0 = tensor.pad %x low[1] high[0] {
  ^bb0(%i: index):
    tensor.yield %v : f32
  } : tensor<4xf32> to tensor<5xf32>
  %1 = tensor.pad %y low[1] high[0] {
  ^bb0(%i: index):
    tensor.yield %v : f32
  } : tensor<4xf32> to tensor<5xf32>
  %a = tensor.extract_slice %0[0] [4] [1] : tensor<5xf32> to tensor<4xf32>
  %b = tensor.extract_slice %1[0] [4] [1] : tensor<5xf32> to tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}
