// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition | FileCheck %s --check-prefix=PART

// Ops that read their iteration indices compute with global indices on
// every device (issue 13, item 3): the partitioned program adds the tile's
// offset, read from a per-position table, to each `linalg.index` and to
// each index argument of `tensor.generate`. Before, every device used
// indices local to its tile, so a sharded iota (what the JAX bridge emits
// for jnp.arange) was wrong on every device but the first.

polymesh.mesh @m = <["x"=2, "y"=3]>
polymesh.mesh @r = <["z"=4], device_ids=[7, 5, 3, 1]>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// i * j + a[i, j] on 2x3 tiles of an 8x9 tensor (uneven along both dims).
// CHECK: @iota_2d: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// PART-LABEL: func.func @iota_2d__part0
// PART: %[[T:.*]] = arith.constant dense<{{.*}}> : tensor<6x2xindex>
// PART: linalg.generic
// PART: %[[I:.*]] = linalg.index 0 : index
// PART: arith.addi %[[I]], %{{.*}} : index
func.func @iota_2d(%a: tensor<8x9xi64> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<8x9xi64> {
  %e = tensor.empty() : tensor<8x9xi64>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<8x9xi64>) outs(%e : tensor<8x9xi64>) {
  ^bb0(%in: i64, %out: i64):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %jj = arith.index_cast %j : index to i64
    %k = arith.muli %ii, %jj : i64
    %s = arith.addi %k, %in : i64
    linalg.yield %s : i64
  } -> tensor<8x9xi64>
  return %0 : tensor<8x9xi64>
}

// An iota with no input at all, placed by its only user on reversed,
// uneven tiles (10 rows over 4 devices: 3, 3, 3, 1).
// CHECK-NEXT: @generate_iota: 1 leaf, 0 bytes moved, {{.*}} on 4 devices, PASS
// PART-LABEL: func.func @generate_iota__part0
// PART: tensor.generate
// PART-NEXT: ^bb0(%[[I:.*]]: index, %[[J:.*]]: index):
// PART-NEXT: arith.addi %[[I]], %{{.*}} : index
func.func @generate_iota(%a: tensor<10x6xf32> {polymesh.sharding = #polymesh.sharding<@r, [{"z"}, {}]>}) -> tensor<10x6xf32> {
  %g = tensor.generate {
  ^bb0(%i: index, %j: index):
    %ii = arith.index_cast %i : index to i32
    %jj = arith.index_cast %j : index to i32
    %k = arith.muli %ii, %jj : i32
    %f = arith.sitofp %k : i32 to f32
    tensor.yield %f : f32
  } : tensor<10x6xf32>
  %0 = arith.addf %g, %a : tensor<10x6xf32>
  return %0 : tensor<10x6xf32>
}

// An index along a sharded reduction dimension: sum_j j * a[i, j] with j
// split over "y" gives partial sums whose offsets come from the input's
// tiles; integers, so the all-reduce is exact.
// CHECK-NEXT: @weighted_row_sum: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 6 devices, PASS
func.func @weighted_row_sum(%a: tensor<8x9xi32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>}) -> tensor<8xi32> {
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<8xi32>
  %z = linalg.fill ins(%c0 : i32) outs(%e : tensor<8xi32>) -> tensor<8xi32>
  %0 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<8x9xi32>) outs(%z : tensor<8xi32>) {
  ^bb0(%in: i32, %acc: i32):
    %j = linalg.index 1 : index
    %jj = arith.index_cast %j : index to i32
    %p = arith.muli %jj, %in : i32
    %s = arith.addi %p, %acc : i32
    linalg.yield %s : i32
  } -> tensor<8xi32>
  return %0 : tensor<8xi32>
}

// The index op's value moves on: an iota resharded to another mesh.
// CHECK-NEXT: @iota_then_reshard: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} PASS
func.func @iota_then_reshard() -> (tensor<12xi64> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}]>}) {
  %e = tensor.empty() : tensor<12xi64>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%e : tensor<12xi64>) {
  ^bb0(%out: i64):
    %i = linalg.index 0 : index
    %ii = arith.index_cast %i : index to i64
    linalg.yield %ii : i64
  } -> tensor<12xi64>
  %1 = polymesh.sharding_constraint %0 <@r, [{"z"}]> : tensor<12xi64>
  return %1 : tensor<12xi64>
}
