// RUN: polymesh-run %s --verify | FileCheck %s

// Tensors read from above inside a linalg body (a gather, as an embedding
// lookup or jnp.take writes it): the body indexes them globally on every
// device that runs the op, so propagation replicates them on the op's mesh
// first (issue 13: before, the body read outside the device's tile, wrong
// values and foreign memory, with exit 0). Six devices with odd ids,
// uneven tiles (50 rows over 3). Propagation:
// test/Transforms/propagate-captured.mlir.

// The table's all-gather: 6 x 3,200 bytes minus the 2 x 3,200 the devices
// hold, 12,800.
// CHECK: @embedding: 1 leaf, 12800 bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: @take_replicated: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: @embedding_split_columns: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: @embedding_result_whole: 1 leaf, 3840 bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: 4 passed, 0 failed

polymesh.mesh @m = <["data"=2, "model"=3], device_ids=[7, 1, 5, 0, 3, 2]>

// An embedding lookup as the bridge would write a gather: the body reads
// the table at (token id, feature), the feature from linalg.index. The
// table arrives split over "model" by rows; the body indexes it globally,
// so propagation replicates it on the op's mesh first.
func.func @embedding(%table: tensor<50x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"model"}, {}]>},
                     %ids: tensor<6x5xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>}) -> tensor<6x5x16xf32> {
  %e = tensor.empty() : tensor<6x5x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, t, d) -> (b, t)>, affine_map<(b, t, d) -> (b, t, d)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<6x5xi32>) outs(%e : tensor<6x5x16xf32>) {
  ^bb0(%id: i32, %o: f32):
    %row = arith.index_cast %id : i32 to index
    %c0 = arith.constant 0 : index
    %c49 = arith.constant 49 : index
    %lo = arith.maxsi %row, %c0 : index
    %clamped = arith.minsi %lo, %c49 : index
    %d = linalg.index 2 : index
    %v = tensor.extract %table[%clamped, %d] : tensor<50x16xf32>
    linalg.yield %v : f32
  } -> tensor<6x5x16xf32>
  return %r : tensor<6x5x16xf32>
}

// jnp.take of a vector already replicated on the op's mesh: nothing moves.
func.func @take_replicated(%v: tensor<33xi32> {polymesh.sharding = #polymesh.sharding<@m, [{}]>},
                           %ids: tensor<12xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"model"}]>}) -> tensor<12xi32> {
  %e = tensor.empty() : tensor<12xi32>
  %r = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%ids : tensor<12xi32>) outs(%e : tensor<12xi32>) {
  ^bb0(%id: i32, %o: i32):
    %row = arith.index_cast %id : i32 to index
    %c0 = arith.constant 0 : index
    %c32 = arith.constant 32 : index
    %lo = arith.maxsi %row, %c0 : index
    %clamped = arith.minsi %lo, %c32 : index
    %x = tensor.extract %v[%clamped] : tensor<33xi32>
    linalg.yield %x : i32
  } -> tensor<12xi32>
  return %r : tensor<12xi32>
}

// The table split by columns over "model" (16 features: 6, 6, 4): the body
// reads the feature at linalg.index 2, the loop of the result's last
// dimension, so the table keeps its split and the result takes it (JAX's
// P("data", None, "model")); each device reads its own columns at the local
// index. Nothing moves.
func.func @embedding_split_columns(%table: tensor<50x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"model"}]>},
                                   %ids: tensor<6x5xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>})
    -> (tensor<6x5x16xf32> {polymesh.leaf = "embedded"}) {
  %e = tensor.empty() : tensor<6x5x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, t, d) -> (b, t)>, affine_map<(b, t, d) -> (b, t, d)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<6x5xi32>) outs(%e : tensor<6x5x16xf32>) {
  ^bb0(%id: i32, %o: f32):
    %row = arith.index_cast %id : i32 to index
    %c0 = arith.constant 0 : index
    %c49 = arith.constant 49 : index
    %lo = arith.maxsi %row, %c0 : index
    %clamped = arith.minsi %lo, %c49 : index
    %d = linalg.index 2 : index
    %v = tensor.extract %table[%clamped, %d] : tensor<50x16xf32>
    %twice = arith.addf %v, %v : f32
    linalg.yield %twice : f32
  } -> tensor<6x5x16xf32>
  return %r : tensor<6x5x16xf32>
}

// The result is declared whole over "model". Gathering the table's columns
// first would move 12,800 bytes; the op computes on the columns each device
// holds and the result's columns move instead: 6 devices x 960 bytes x 2/3,
// 3,840.
func.func @embedding_result_whole(%table: tensor<50x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"model"}]>},
                                  %ids: tensor<6x5xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}]>})
    -> (tensor<6x5x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}, {}]>}) {
  %e = tensor.empty() : tensor<6x5x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, t, d) -> (b, t)>, affine_map<(b, t, d) -> (b, t, d)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<6x5xi32>) outs(%e : tensor<6x5x16xf32>) {
  ^bb0(%id: i32, %o: f32):
    %row = arith.index_cast %id : i32 to index
    %c0 = arith.constant 0 : index
    %c49 = arith.constant 49 : index
    %lo = arith.maxsi %row, %c0 : index
    %clamped = arith.minsi %lo, %c49 : index
    %d = linalg.index 2 : index
    %v = tensor.extract %table[%clamped, %d] : tensor<50x16xf32>
    linalg.yield %v : f32
  } -> tensor<6x5x16xf32>
  return %r : tensor<6x5x16xf32>
}
