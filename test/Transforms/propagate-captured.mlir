// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// A tensor read from above inside an op's region (not control flow) is
// replicated on the op's mesh before the op: the region indexes it
// globally on every device that runs the op. Execution:
// test/Run/verify-captured.mlir; refused unpropagated input:
// @captured_split in test/Transforms/partition-errors.mlir.

polymesh.mesh @m = <["x"=4]>
polymesh.mesh @n = <["y"=2], device_ids=[6, 4]>

// CHECK-LABEL: func.func @split_table
// CHECK: %[[WHOLE:.*]] = polymesh.reshard %arg0 <@m, [{}]>
// CHECK-NEXT: linalg.generic
// CHECK-SAME: ins(%arg1 : tensor<8xi32>)
// CHECK: tensor.extract %[[WHOLE]][
func.func @split_table(%table: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>},
                       %idx: tensor<8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%idx : tensor<8xi32>) outs(%e : tensor<8xf32>) {
  ^bb0(%i: i32, %o: f32):
    %c = arith.index_cast %i : i32 to index
    %v = tensor.extract %table[%c] : tensor<16xf32>
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// The table lives on another mesh: it is moved whole to the op's.
// CHECK-LABEL: func.func @other_mesh
// CHECK: %[[WHOLE:.*]] = polymesh.reshard %arg0 <@m, [{}]>
// CHECK: tensor.extract %[[WHOLE]][
func.func @other_mesh(%table: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@n, [{"y"}]>},
                      %idx: tensor<8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%idx : tensor<8xi32>) outs(%e : tensor<8xf32>) {
  ^bb0(%i: i32, %o: f32):
    %c = arith.index_cast %i : i32 to index
    %v = tensor.extract %table[%c] : tensor<16xf32>
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// Already whole on the op's mesh: nothing is inserted.
// CHECK-LABEL: func.func @replicated_table
// CHECK-NOT: polymesh.reshard
// CHECK: tensor.extract %arg0[
func.func @replicated_table(%table: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>},
                            %idx: tensor<8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%idx : tensor<8xi32>) outs(%e : tensor<8xf32>) {
  ^bb0(%i: i32, %o: f32):
    %c = arith.index_cast %i : i32 to index
    %v = tensor.extract %table[%c] : tensor<16xf32>
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

polymesh.mesh @m = <["data"=2, "model"=4]>

// An embedding table split by columns, read at (token id, linalg.index 2):
// the feature dimension is indexed by the result's loop, so the table keeps
// its split (no reshard) and the result takes it, as JAX places table[ids]:
// P("data", None, "model").
// CHECK-LABEL: func.func @table_split_by_columns
// CHECK-NOT: polymesh.reshard
// CHECK: linalg.generic
// CHECK-SAME: polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}, {"model"}]>
// CHECK: tensor.extract %arg0[
func.func @table_split_by_columns(%table: tensor<96x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"model"}]>},
                                  %ids: tensor<4x8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>}) -> tensor<4x8x32xf32> {
  %e = tensor.empty() : tensor<4x8x32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<4x8xi32>) outs(%e : tensor<4x8x32xf32>) {
  ^bb0(%i: i32, %o: f32):
    %row = arith.index_cast %i : i32 to index
    %d = linalg.index 2 : index
    %v = tensor.extract %table[%row, %d] : tensor<96x32xf32>
    linalg.yield %v : f32
  } -> tensor<4x8x32xf32>
  return %r : tensor<4x8x32xf32>
}

// The rows are indexed by data, not by a loop: a table split by rows is
// gathered along them, and keeps its column split.
// CHECK-LABEL: func.func @table_split_both_ways
// CHECK: %[[COLUMNS:.*]] = polymesh.reshard %arg0 <@m, [{}, {"model"}]>
// CHECK: linalg.generic
// CHECK-SAME: polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}, {"model"}]>
// CHECK: tensor.extract %[[COLUMNS]][
func.func @table_split_both_ways(%table: tensor<96x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {"model"}]>},
                                 %ids: tensor<4x8xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>}) -> tensor<4x8x32xf32> {
  %e = tensor.empty() : tensor<4x8x32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<4x8xi32>) outs(%e : tensor<4x8x32xf32>) {
  ^bb0(%i: i32, %o: f32):
    %row = arith.index_cast %i : i32 to index
    %d = linalg.index 2 : index
    %v = tensor.extract %table[%row, %d] : tensor<96x32xf32>
    linalg.yield %v : f32
  } -> tensor<4x8x32xf32>
  return %r : tensor<4x8x32xf32>
}
