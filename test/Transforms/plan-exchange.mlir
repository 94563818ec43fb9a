// RUN: polymesh-opt %s --polymesh-plan=batch-min-devices=1 -split-input-file | FileCheck %s --enable-var-scope
// RUN: polymesh-opt %s "--polymesh-plan=batch-min-devices=1 exchange-tiles=false" -split-input-file | FileCheck %s --check-prefix=LISTED --enable-var-scope
// RUN: polymesh-opt %s "--polymesh-plan=batch-min-devices=1 memory-limit-bytes=256" -split-input-file | FileCheck %s --check-prefix=LIMITED --enable-var-scope

// --polymesh-plan writes a reshard that is an all-to-all of whole tiles
// (both shardings over one set of devices, each device holding its own
// tile in both, no dimension split by both: every source tile meets every
// destination tile) as its local copies and one `all_to_all ... tiles`
// step: n ids instead of n(n-1) transfers. exchange-tiles=false, or a
// memory limit (the chunker splits transfers), lists every transfer.

// A sequence-parallel transpose over 8 devices: rows over "x" to columns
// over "x". 56 transfers of 4x6 blocks, stated as tiles.
// CHECK-LABEL: func.func @transpose
// CHECK: polymesh.transfer %arg0 <@seq, [{"x"}, {}]> -> <@seq, [{}, {"x"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7] {0 -> [0], [0, 0] : [4, 6]} {1 -> [1], [4, 6] : [8, 12]}
// CHECK-NEXT: all_to_all chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7] tiles
// CHECK-NEXT: ] : tensor<32x48xf32>

// LISTED-LABEL: func.func @transpose
// LISTED-NOT: tiles
// LISTED: all_to_all chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7] {0 -> [1], [0, 6] : [4, 12]} {0 -> [2], [0, 12] : [4, 18]}
// LISTED-SAME: {7 -> [6], [28, 36] : [32, 42]}
// LISTED-NEXT: ] : tensor<32x48xf32>

// LIMITED-LABEL: func.func @transpose
// LIMITED-NOT: tiles
// LIMITED: chunk 1
// LIMITED-NOT: tiles
// LIMITED: return

polymesh.mesh @seq = <["x"=8]>

func.func @transpose(%q: tensor<32x48xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{"x"}, {}]>}) -> tensor<32x48xf32> {
  %0 = polymesh.reshard %q <@seq, [{}, {"x"}]> : tensor<32x48xf32>
  return %0 : tensor<32x48xf32>
}

// -----

// Across meshes on the same devices: two axes splitting two dimensions to
// one axis splitting the third.
// CHECK-LABEL: func.func @across_meshes
// CHECK: polymesh.transfer %arg0 <@m, [{"a"}, {"b"}, {}]> -> <@seq, [{}, {}, {"x"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7] {0 -> [0], [0, 0, 0] : [8, 2, 2]}
// CHECK-NEXT: all_to_all chunk 0 devices [0, 1, 2, 3, 4, 5, 6, 7] tiles
// CHECK-NEXT: ] : tensor<16x8x16xf32>

polymesh.mesh @m = <["a"=2, "b"=4]>
polymesh.mesh @seq = <["x"=8]>

func.func @across_meshes(%q: tensor<16x8x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}, {}]>}) -> tensor<16x8x16xf32> {
  %0 = polymesh.reshard %q <@seq, [{}, {}, {"x"}]> : tensor<16x8x16xf32>
  return %0 : tensor<16x8x16xf32>
}

// -----

// Repeating over "dp": one cell's exchange, written once for both cells.
// CHECK-LABEL: func.func @batched
// CHECK: polymesh.transfer %arg0 <@pod, [{"dp"}, {"x"}, {}]> -> <@pod, [{"dp"}, {}, {"x"}]> batch [#polymesh.batch_axis<"dp" -> "dp", dim = 0>] steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1, 2, 3]
// CHECK-NEXT: all_to_all chunk 0 devices [0, 1, 2, 3] tiles
// CHECK-NEXT: ] : tensor<8x16x8xf32>

polymesh.mesh @pod = <["dp"=2, "x"=4]>

func.func @batched(%q: tensor<8x16x8xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"dp"}, {"x"}, {}]>}) -> tensor<8x16x8xf32> {
  %0 = polymesh.reshard %q <@pod, [{"dp"}, {}, {"x"}]> : tensor<8x16x8xf32>
  return %0 : tensor<8x16x8xf32>
}

// -----

// Not exchanges: a dimension split by both shardings (tiles meet only
// some others), and tiles left empty (8 shards of an extent of 4).
// CHECK-LABEL: func.func @split_by_both
// CHECK-NOT: tiles
// CHECK: all_to_all chunk 0 devices [0, 1] {0 -> [1], [2, 0] : [4, 2]} {1 -> [0], [0, 2] : [2, 4]},
// CHECK-NOT: tiles
// CHECK-LABEL: func.func @empty_tiles
// CHECK-NOT: tiles
// CHECK: return

polymesh.mesh @m = <["a"=2, "b"=4]>
polymesh.mesh @seq = <["x"=8]>

func.func @split_by_both(%q: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %q <@m, [{"b"}, {"a"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

func.func @empty_tiles(%q: tensor<16x8x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}, {}]>}) -> tensor<16x8x4xf32> {
  %0 = polymesh.reshard %q <@seq, [{}, {}, {"x"}]> : tensor<16x8x4xf32>
  return %0 : tensor<16x8x4xf32>
}
