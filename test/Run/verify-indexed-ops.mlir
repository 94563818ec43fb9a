// RUN: polymesh-run %s --verify | FileCheck %s

// The ops the JAX bridge writes for scatter, sort and reduce_window (and a
// named convolution), run sharded and compared with the unsharded
// reference bit for bit, on six devices with odd ids and uneven tiles.
// Propagation: test/Transforms/propagate-windows.mlir; the bridge's side:
// python/tests/test_indexed_ops.py.

// CHECK: @window_sum: 1 leaf, 304 bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: @conv_1d: 1 leaf, 4608 bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: @scatter_add: 1 leaf, 480 bytes moved, {{.*}} on 6 devices, PASS (within bound: result #0: max 0 ulp
// CHECK-NEXT: @batched_scatter_set: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// CHECK-NEXT: @sort_rows: 1 leaf, 1440 bytes moved, {{.*}} on 6 devices, PASS (within bound: result #0: max 0 ulp
// CHECK-NEXT: 5 passed, 0 failed

polymesh.mesh @m = <["data"=2, "model"=3], device_ids=[7, 1, 5, 0, 3, 2]>

// The regression: a sliding window sum whose output is constrained split.
// Its input is gathered whole (76 bytes on each device, which holds 28, 28
// or 20 of them: 304 bytes), the sum computed whole, then sliced in place.
func.func @window_sum(%x: tensor<19xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"model"}]>}) -> tensor<16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<16xf32>) -> tensor<16xf32>
  %w = tensor.empty() : tensor<4xi1>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0 + d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%x, %w : tensor<19xf32>, tensor<4xi1>) outs(%acc : tensor<16xf32>) {
  ^bb0(%in: f32, %unused: i1, %o: f32):
    %s = arith.addf %in, %o : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %c = polymesh.sharding_constraint %r <@m, [{"model"}]> : tensor<16xf32>
  return %c : tensor<16xf32>
}

func.func @conv_1d(%x: tensor<4x18x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {"model"}, {}]>},
                   %f: tensor<3x8x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}, {"model"}]>})
    -> tensor<4x16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  %r = linalg.conv_1d_nwc_wcf {dilations = dense<1> : tensor<1xi64>, strides = dense<1> : tensor<1xi64>}
      ins(%x, %f : tensor<4x18x8xf32>, tensor<3x8x16xf32>) outs(%acc : tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  return %r : tensor<4x16x16xf32>
}

// An embedding's gradient (jax.grad of table[ids]): token rows added into
// the table at their ids (ids & 7: duplicates among 9 tokens). The tokens
// are split over "data" (5 and 4): each row of devices sums its tokens from
// -0.0, the identity of addf, and an all-reduce adds the two partial sums.
func.func @scatter_add(%ids: tensor<9xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}]>},
                       %g: tensor<9x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {"model"}]>})
    -> tensor<10x6xf32> {
  %minus_zero = arith.constant -0.0 : f32
  %e = tensor.empty() : tensor<10x6xf32>
  %init = linalg.fill ins(%minus_zero : f32) outs(%e : tensor<10x6xf32>) -> tensor<10x6xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>,
                                        affine_map<(d0, d1, d2) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ids, %g : tensor<9xi32>, tensor<9x6xf32>) outs(%init : tensor<10x6xf32>) {
  ^bb0(%s: i32, %u: f32, %acc: f32):
    %seven = arith.constant 7 : i32
    %masked = arith.andi %s, %seven : i32
    %start = arith.index_cast %masked : i32 to index
    %row = linalg.index 0 : index
    %hit = arith.cmpi eq, %row, %start : index
    %identity = arith.constant -0.0 : f32
    %taken = arith.select %hit, %u, %identity : f32
    %sum = arith.addf %acc, %taken : f32
    linalg.yield %sum : f32
  } -> tensor<10x6xf32>
  return %r : tensor<10x6xf32>
}

// vmap of cache.at[position].set(new): a scatter whose batch loop is the
// cache's own (a batching dimension), so nothing moves.
func.func @batched_scatter_set(%cache: tensor<4x5x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {}, {"model"}]>},
                               %new: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {"model"}]>},
                               %positions: tensor<4xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}]>})
    -> tensor<4x5x6xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0)>, affine_map<(d0, d1, d2) -> (d0, d2)>,
                                        affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%positions, %new : tensor<4xi32>, tensor<4x6xf32>) outs(%cache : tensor<4x5x6xf32>) {
  ^bb0(%s: i32, %u: f32, %acc: f32):
    %three = arith.constant 3 : i32
    %masked = arith.andi %s, %three : i32
    %start = arith.index_cast %masked : i32 to index
    %p = linalg.index 1 : index
    %hit = arith.cmpi eq, %p, %start : index
    %r = arith.select %hit, %u, %acc : f32
    linalg.yield %r : f32
  } -> tensor<4x5x6xf32>
  return %r : tensor<4x5x6xf32>
}

// jnp.sort along rows of 10 (split 4/4/2 over "model" on input): ranks (a
// count of the row's elements that sort before each, ties by position),
// then each element moved to its rank (a sum with one term that is not
// -0.0, so exact). Rows keep "data".
func.func @sort_rows(%x: tensor<6x10xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"data"}, {"model"}]>}) -> tensor<6x10xf32> {
  %zero = arith.constant 0 : i64
  %e = tensor.empty() : tensor<6x10xi64>
  %counts = linalg.fill ins(%zero : i64) outs(%e : tensor<6x10xi64>) -> tensor<6x10xi64>
  %ranks = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>,
                                            affine_map<(d0, d1, d2) -> (d0, d1)>],
                           iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %x : tensor<6x10xf32>, tensor<6x10xf32>) outs(%counts : tensor<6x10xi64>) {
  ^bb0(%other: f32, %own: f32, %acc: i64):
    %true = arith.constant true
    %less = arith.cmpf olt, %other, %own : f32
    %greater = arith.cmpf olt, %own, %other : f32
    %m = linalg.index 2 : index
    %j = linalg.index 1 : index
    %before = arith.cmpi slt, %m, %j : index
    %not_less = arith.xori %less, %true : i1
    %not_greater = arith.xori %greater, %true : i1
    %tie = arith.andi %not_less, %not_greater : i1
    %tie_before = arith.andi %tie, %before : i1
    %counted = arith.ori %less, %tie_before : i1
    %count = arith.extui %counted : i1 to i64
    %r = arith.addi %acc, %count : i64
    linalg.yield %r : i64
  } -> tensor<6x10xi64>
  %minus_zero = arith.constant -0.0 : f32
  %f = tensor.empty() : tensor<6x10xf32>
  %init = linalg.fill ins(%minus_zero : f32) outs(%f : tensor<6x10xf32>) -> tensor<6x10xf32>
  %sorted = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d0, d2)>,
                                             affine_map<(d0, d1, d2) -> (d0, d1)>],
                            iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%ranks, %x : tensor<6x10xi64>, tensor<6x10xf32>) outs(%init : tensor<6x10xf32>) {
  ^bb0(%rank: i64, %v: f32, %acc: f32):
    %i = linalg.index 1 : index
    %position = arith.index_cast %i : index to i64
    %hit = arith.cmpi eq, %rank, %position : i64
    %identity = arith.constant -0.0 : f32
    %taken = arith.select %hit, %v, %identity : f32
    %r = arith.addf %acc, %taken : f32
    linalg.yield %r : f32
  } -> tensor<6x10xf32>
  return %sorted : tensor<6x10xf32>
}
