// The leaf table after propagation, on stdout (the IR is dropped).
// RUN: polymesh-opt %s -split-input-file --polymesh-propagate --polymesh-print-leaves=output=- -o /dev/null | FileCheck %s

// The same inputs as written, without propagation: unannotated leaves are
// reported as unplaced, and the pass never fails on them.
// RUN: polymesh-opt %s -split-input-file --polymesh-print-leaves=output=- -o /dev/null | FileCheck %s --check-prefix=RAW

// By default the table goes to stderr and stdout carries only the IR.
// RUN: polymesh-opt %s -split-input-file --polymesh-propagate --polymesh-print-leaves 2>&1 >/dev/null | FileCheck %s --check-prefix=STDERR

// The pass does not change the IR.
// RUN: polymesh-opt %s -split-input-file --polymesh-propagate > %t.before.mlir
// RUN: polymesh-opt %s -split-input-file --polymesh-propagate --polymesh-print-leaves=output=%t.ignored.txt > %t.after.mlir
// RUN: diff %t.before.mlir %t.after.mlir

// A path receives the table; each run (each -split-input-file chunk)
// rewrites it, so it holds the last chunk's table.
// RUN: polymesh-opt %s -split-input-file --polymesh-propagate --polymesh-print-leaves=output=%t.leaves.txt -o /dev/null
// RUN: FileCheck %s --check-prefix=FILE --input-file=%t.leaves.txt

// A path that cannot be opened is an error.
// RUN: not polymesh-opt %s -split-input-file --polymesh-propagate --polymesh-print-leaves=output=%t.missing/dir/leaves.txt -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOFILE
// NOFILE: error: cannot open '{{.*}}missing/dir/leaves.txt' to write the leaf table:

// A sharding that names no mesh is an error (the parser's verifier, which
// rejects it first, is turned off to reach the pass). The input is the block
// of `// UNKNOWN-MESH-INPUT:` lines at the end of this file.
// RUN: sed -n 's|^// UNKNOWN-MESH-INPUT: ||p' %s | not polymesh-opt --mlir-very-unsafe-disable-verifier-on-parsing --polymesh-print-leaves=output=- -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: <stdin>:2:1: error: result #0 (leaf "lost"): sharding refers to unknown mesh @nowhere; expected a polymesh.mesh symbol
// UNKNOWN-NOT: local tile

// The Flax report (examples/flax-multi-mesh-init.mlir): three parameters
// placed on three meshes come back on those meshes, with their own tiles.

polymesh.mesh @mesh1 = <["a"=2, "b"=4]>
polymesh.mesh @mesh2 = <["x"=2, "y"=2, "z"=2]>
polymesh.mesh @mesh3 = <["c"=8]>
polymesh.mesh @mesh_data = <["data"=4, "context"=2]>

// CHECK-LABEL: func @init_model_nnx_jit: 3 results, ambient mesh @mesh_data
// CHECK-NEXT:  #  leaf                 shape     dtype  mesh                                  sharding               local tile
// CHECK-NEXT:  0  small_linear1.value  16x16     f32    @mesh1 ["a"=2, "b"=4] dev 0-7         [{"a"}, {"b"}]         8x4
// CHECK-NEXT:      tile map, 2x4 blocks:
// CHECK-NEXT:      +---------------+---------------+---------------+---------------+
// CHECK-NEXT:      | [0:8, 0:4]    | [0:8, 4:8]    | [0:8, 8:12]   | [0:8, 12:16]  |
// CHECK-NEXT:      | dev 0         | dev 1         | dev 2         | dev 3         |
// CHECK-NEXT:      +---------------+---------------+---------------+---------------+
// CHECK-NEXT:      | [8:16, 0:4]   | [8:16, 4:8]   | [8:16, 8:12]  | [8:16, 12:16] |
// CHECK-NEXT:      | dev 4         | dev 5         | dev 6         | dev 7         |
// CHECK-NEXT:      +---------------+---------------+---------------+---------------+
// CHECK-NEXT:  1  small_linear2.value  16x16x16  f32    @mesh2 ["x"=2, "y"=2, "z"=2] dev 0-7  [{"x"}, {"y"}, {"z"}]  8x8x8
// CHECK-NEXT:  2  small_linear3.value  16x16     f32    @mesh3 ["c"=8] dev 0-7                [{"c"}, {}]            2x16
// CHECK-NEXT:      tile map, 8x1 blocks:
// CHECK-NEXT:      +---------------+
// CHECK-NEXT:      | [0:2, 0:16]   |
// CHECK-NEXT:      | dev 0         |
// CHECK-NEXT:      +---------------+
// CHECK-NEXT:      | [2:4, 0:16]   |
// CHECK-NEXT:      | dev 1         |
// CHECK:           | [14:16, 0:16] |
// CHECK-NEXT:      | dev 7         |
// CHECK-NEXT:      +---------------+
// CHECK-EMPTY:

// RAW-LABEL: func @init_model_nnx_jit: 3 results, ambient mesh @mesh_data
// RAW-NEXT:  #  leaf                 shape     dtype  mesh      sharding  local tile
// RAW-NEXT:  0  small_linear1.value  16x16     f32    unplaced  unplaced  unplaced
// RAW-NEXT:  1  small_linear2.value  16x16x16  f32    unplaced  unplaced  unplaced
// RAW-NEXT:  2  small_linear3.value  16x16     f32    unplaced  unplaced  unplaced
// RAW-EMPTY:

// STDERR-LABEL: func @init_model_nnx_jit: 3 results, ambient mesh @mesh_data
// STDERR:       0  small_linear1.value  16x16     f32    @mesh1 ["a"=2, "b"=4] dev 0-7         [{"a"}, {"b"}]         8x4
// STDERR:       1  small_linear2.value  16x16x16  f32    @mesh2 ["x"=2, "y"=2, "z"=2] dev 0-7  [{"x"}, {"y"}, {"z"}]  8x8x8
// STDERR:       2  small_linear3.value  16x16     f32    @mesh3 ["c"=8] dev 0-7                [{"c"}, {}]            2x16
func.func @init_model_nnx_jit()
    -> (tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"},
        tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  return %p1, %p2, %p3 : tensor<16x16xf32>, tensor<16x16x16xf32>, tensor<16x16xf32>
}

// -----

// The same leaves in the reverse order: every leaf keeps its mesh and tiles.

polymesh.mesh @mesh1 = <["a"=2, "b"=4]>
polymesh.mesh @mesh2 = <["x"=2, "y"=2, "z"=2]>
polymesh.mesh @mesh3 = <["c"=8]>
polymesh.mesh @mesh_data = <["data"=4, "context"=2]>

// CHECK-LABEL: func @init_model_reversed: 3 results, ambient mesh @mesh_data
// CHECK-NEXT:  #  leaf                 shape     dtype  mesh                                  sharding               local tile
// CHECK-NEXT:  0  small_linear3.value  16x16     f32    @mesh3 ["c"=8] dev 0-7                [{"c"}, {}]            2x16
// CHECK:       1  small_linear2.value  16x16x16  f32    @mesh2 ["x"=2, "y"=2, "z"=2] dev 0-7  [{"x"}, {"y"}, {"z"}]  8x8x8
// CHECK-NEXT:  2  small_linear1.value  16x16     f32    @mesh1 ["a"=2, "b"=4] dev 0-7         [{"a"}, {"b"}]         8x4
func.func @init_model_reversed()
    -> (tensor<16x16xf32> {polymesh.leaf = "small_linear3.value"},
        tensor<16x16x16xf32> {polymesh.leaf = "small_linear2.value"},
        tensor<16x16xf32> {polymesh.leaf = "small_linear1.value"})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %ones3 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p3 = polymesh.sharding_constraint %ones3 <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  %ones2 = arith.constant dense<1.0> : tensor<16x16x16xf32>
  %p2 = polymesh.sharding_constraint %ones2 <@mesh2, [{"x"}, {"y"}, {"z"}]> : tensor<16x16x16xf32>
  %ones1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %p1 = polymesh.sharding_constraint %ones1 <@mesh1, [{"a"}, {"b"}]> : tensor<16x16xf32>
  return %p3, %p2, %p1 : tensor<16x16xf32>, tensor<16x16x16xf32>, tensor<16x16xf32>
}

// -----

// The Orbax report (examples/orbax-single-replica-restore.mlir): per-device
// results stay on their device whatever the ambient mesh; the restored
// parameter is broadcast onto the training mesh.

polymesh.mesh @train = <["dp"=16, "tp"=2]>
polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @dev0 = <[], device_ids=[0]>
polymesh.mesh @dev5 = <[], device_ids=[5]>

// CHECK-LABEL: func @globalize_single_replica_arrays: 2 results, ambient mesh @train
// CHECK-NEXT:  #  leaf                  shape       dtype  mesh            sharding      local tile
// CHECK-NEXT:  0  source_device_map[0]  1x4096x512  f32    @dev0 [] dev 0  [{}, {}, {}]  1x4096x512
// CHECK-NEXT:  1  device_buffers[5]     1x4096x512  f32    @dev5 [] dev 5  [{}, {}, {}]  1x4096x512
// CHECK-EMPTY:

// RAW-LABEL: func @globalize_single_replica_arrays: 2 results, ambient mesh @train
// RAW-NEXT:  #  leaf                  shape       dtype  mesh      sharding  local tile
// RAW-NEXT:  0  source_device_map[0]  1x4096x512  f32    unplaced  unplaced  unplaced
// RAW-NEXT:  1  device_buffers[5]     1x4096x512  f32    unplaced  unplaced  unplaced
func.func @globalize_single_replica_arrays(
    %shard: tensor<4096x512xf32> {polymesh.sharding = #polymesh.sharding<@dev0, [{}, {}]>})
    -> (tensor<1x4096x512xf32> {polymesh.leaf = "source_device_map[0]"},
        tensor<1x4096x512xf32> {polymesh.leaf = "device_buffers[5]"})
    attributes {polymesh.ambient_mesh = @train} {
  %expanded = tensor.expand_shape %shard [[0, 1], [2]] output_shape [1, 4096, 512]
      : tensor<4096x512xf32> into tensor<1x4096x512xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1x4096x512xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x4096x512xf32>) -> tensor<1x4096x512xf32>
  %zeros = polymesh.sharding_constraint %fill <@dev5, [{}, {}, {}]> : tensor<1x4096x512xf32>
  return %expanded, %zeros : tensor<1x4096x512xf32>, tensor<1x4096x512xf32>
}

// CHECK-LABEL: func @restore: 1 result, ambient mesh @train
// CHECK-NEXT:  #  leaf                 shape      dtype  mesh                               sharding      local tile
// CHECK-NEXT:  0  params.dense.kernel  4096x1024  f32    @train ["dp"=16, "tp"=2] dev 0-31  [{}, {"tp"}]  4096x512
// CHECK-NEXT:      tile map, 1x2 blocks:
// CHECK-NEXT:      +--------------------+--------------------+
// CHECK-NEXT:      | [0:4096, 0:512]    | [0:4096, 512:1024] |
// CHECK-NEXT:      | dev 0,2,..,30      | dev 1,3,..,31      |
// CHECK-NEXT:      +--------------------+--------------------+
// CHECK-EMPTY:

// A declared result sharding is reported before propagation too.
// RAW-LABEL: func @restore: 1 result, ambient mesh @train
// RAW-NEXT:  #  leaf                 shape      dtype  mesh                               sharding      local tile
// RAW-NEXT:  0  params.dense.kernel  4096x1024  f32    @train ["dp"=16, "tp"=2] dev 0-31  [{}, {"tp"}]  4096x512
func.func @restore(
    %param: tensor<4096x1024xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
    -> (tensor<4096x1024xf32> {polymesh.leaf = "params.dense.kernel",
                               polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>})
    attributes {polymesh.ambient_mesh = @train} {
  return %param : tensor<4096x1024xf32>
}

// -----

// Uneven tiles: trailing devices hold short tiles, or none at all. Device
// ids need not be 0..N-1 nor sorted.

polymesh.mesh @m = <["x"=4, "y"=2]>
polymesh.mesh @odd = <["r"=4], device_ids=[7, 3, 5, 1]>

// CHECK-LABEL: func @uneven: 2 results
// CHECK-NEXT:  #  leaf    shape  dtype  mesh                       sharding        local tile
// CHECK-NEXT:  0  weight  10x7   f32    @m ["x"=4, "y"=2] dev 0-7  [{"x"}, {"y"}]  3x4
// CHECK-NEXT:      tile map, 4x2 blocks:
// CHECK-NEXT:      +-------------+-------------+
// CHECK-NEXT:      | [0:3, 0:4]  | [0:3, 4:7]  |
// CHECK-NEXT:      | dev 0       | dev 1       |
// CHECK-NEXT:      +-------------+-------------+
// CHECK-NEXT:      | [3:6, 0:4]  | [3:6, 4:7]  |
// CHECK-NEXT:      | dev 2       | dev 3       |
// CHECK-NEXT:      +-------------+-------------+
// CHECK-NEXT:      | [6:9, 0:4]  | [6:9, 4:7]  |
// CHECK-NEXT:      | dev 4       | dev 5       |
// CHECK-NEXT:      +-------------+-------------+
// CHECK-NEXT:      | [9:10, 0:4] | [9:10, 4:7] |
// CHECK-NEXT:      | dev 6       | dev 7       |
// CHECK-NEXT:      +-------------+-------------+
// CHECK-NEXT:  1  bias    6      i8     @odd ["r"=4] dev 1,3,..,7  [{"r"}]         2
// CHECK-NEXT:      tile map, 3 blocks:
// CHECK-NEXT:      +-------+-------+-------+
// CHECK-NEXT:      | [0:2] | [2:4] | [4:6] |
// CHECK-NEXT:      | dev 7 | dev 3 | dev 5 |
// CHECK-NEXT:      +-------+-------+-------+
// CHECK-NEXT:      empty tiles: dev 1
// CHECK-EMPTY:
func.func @uneven(%w: tensor<10x7xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {"y"}]>},
                  %b: tensor<6xi8> {polymesh.sharding = #polymesh.sharding<@odd, [{"r"}]>})
    -> (tensor<10x7xf32> {polymesh.leaf = "weight"}, tensor<6xi8> {polymesh.leaf = "bias"}) {
  %w2 = arith.addf %w, %w : tensor<10x7xf32>
  return %w2, %b : tensor<10x7xf32>, tensor<6xi8>
}

// -----

// Replicated leaves: all holders share one cell. A value that nothing
// places is replicated on the ambient mesh; `replicated={...}` is shown.

polymesh.mesh @mesh_data = <["data"=4, "context"=2]>
polymesh.mesh @m = <["x"=2, "y"=2]>

// CHECK-LABEL: func @replicated: 3 results, ambient mesh @mesh_data
// CHECK-NEXT:  #  leaf   shape  dtype  mesh                                       sharding                       local tile
// CHECK-NEXT:  0  step   -      i32    -                                          -                              -
// CHECK-NEXT:  1  scale  8      f32    @mesh_data ["data"=4, "context"=2] dev 0-7  [{}]                           8
// CHECK-NEXT:      tile map, 1 block:
// CHECK-NEXT:      +---------+
// CHECK-NEXT:      | [0:8]   |
// CHECK-NEXT:      | dev 0-7 |
// CHECK-NEXT:      +---------+
// CHECK-NEXT:  2  table  4x6    f32    @m ["x"=2, "y"=2] dev 0-3                  [{"x"}, {}], replicated={"y"}  2x6
// CHECK-NEXT:      tile map, 2x1 blocks:
// CHECK-NEXT:      +------------+
// CHECK-NEXT:      | [0:2, 0:6] |
// CHECK-NEXT:      | dev 0,1    |
// CHECK-NEXT:      +------------+
// CHECK-NEXT:      | [2:4, 0:6] |
// CHECK-NEXT:      | dev 2,3    |
// CHECK-NEXT:      +------------+
// CHECK-EMPTY:

// RAW-LABEL: func @replicated: 3 results, ambient mesh @mesh_data
// RAW-NEXT:  #  leaf   shape  dtype  mesh                     sharding                       local tile
// RAW-NEXT:  0  step   -      i32    -                        -                              -
// RAW-NEXT:  1  scale  8      f32    unplaced                 unplaced                       unplaced
// RAW-NEXT:  2  table  4x6    f32    @m ["x"=2, "y"=2] dev 0-3  [{"x"}, {}], replicated={"y"}  2x6
func.func @replicated(%step: i32)
    -> (i32 {polymesh.leaf = "step"}, tensor<8xf32> {polymesh.leaf = "scale"},
        tensor<4x6xf32> {polymesh.leaf = "table",
                         polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}], replicated={"y"}>})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  %scale = arith.constant dense<2.0> : tensor<8xf32>
  %table = arith.constant dense<0.0> : tensor<4x6xf32>
  return %step, %scale, %table : i32, tensor<8xf32>, tensor<4x6xf32>
}

// -----

// A single-device leaf: one block, one device. A leaf without a path
// shows `-`; a rank-0 leaf has no map.

polymesh.mesh @dev3 = <[], device_ids=[3]>

// CHECK-LABEL: func @single_device: 2 results
// CHECK-NEXT:  #  leaf  shape   dtype  mesh            sharding  local tile
// CHECK-NEXT:  0  -     4x4     f16    @dev3 [] dev 3  [{}, {}]  4x4
// CHECK-NEXT:      tile map, 1x1 blocks:
// CHECK-NEXT:      +------------+
// CHECK-NEXT:      | [0:4, 0:4] |
// CHECK-NEXT:      | dev 3      |
// CHECK-NEXT:      +------------+
// CHECK-NEXT:  1  -     scalar  f16    @dev3 [] dev 3  []        scalar
// CHECK-EMPTY:
func.func @single_device(%x: tensor<4x4xf16> {polymesh.sharding = #polymesh.sharding<@dev3, [{}, {}]>},
                         %s: tensor<f16> {polymesh.sharding = #polymesh.sharding<@dev3, []>})
    -> (tensor<4x4xf16>, tensor<f16>) {
  return %x, %s : tensor<4x4xf16>, tensor<f16>
}

// -----

// Sub-axes from a reshape, declared partial sums, and a map too large to
// draw.

polymesh.mesh @m = <["x"=4, "y"=2]>
polymesh.mesh @big = <["a"=16, "b"=8]>

// CHECK-LABEL: func @subaxes_and_partial_sums: 3 results
// CHECK-NEXT:  #  leaf     shape  dtype  mesh                              sharding                        local tile
// CHECK-NEXT:  0  split    2x8    f32    @m ["x"=4, "y"=2] dev 0-7          [{"x":(1)2}, {"x":(2)2}]        1x4
// CHECK-NEXT:      tile map, 2x2 blocks:
// CHECK-NEXT:      +------------+------------+
// CHECK-NEXT:      | [0:1, 0:4] | [0:1, 4:8] |
// CHECK-NEXT:      | dev 0,1    | dev 2,3    |
// CHECK-NEXT:      +------------+------------+
// CHECK-NEXT:      | [1:2, 0:4] | [1:2, 4:8] |
// CHECK-NEXT:      | dev 4,5    | dev 6,7    |
// CHECK-NEXT:      +------------+------------+
// CHECK-NEXT:  1  partial  8x8    f32    @m ["x"=4, "y"=2] dev 0-7          [{"x"}, {}], unreduced={"y"}  2x8
// CHECK-NEXT:      tile map, 4x1 blocks:
// CHECK-NEXT:      +------------+
// CHECK-NEXT:      | [0:2, 0:8] |
// CHECK-NEXT:      | dev 0,1    |
// CHECK-NEXT:      +------------+
// CHECK:           | [6:8, 0:8] |
// CHECK-NEXT:      | dev 6,7    |
// CHECK-NEXT:      +------------+
// CHECK-NEXT:      unreduced over {"y"}: the holders of a block hold partial sums of it
// CHECK-NEXT:  2  big      64x64  bf16   @big ["a"=16, "b"=8] dev 0-127    [{"a"}, {"b"}]                  4x8
// CHECK-NEXT:      (128 blocks; map omitted)
// CHECK-EMPTY:
func.func @subaxes_and_partial_sums(
    %v: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>},
    %p: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}], unreduced={"y"}>},
    %g: tensor<64x64xbf16> {polymesh.sharding = #polymesh.sharding<@big, [{"a"}, {"b"}]>})
    -> (tensor<2x8xf32> {polymesh.leaf = "split"},
        tensor<8x8xf32> {polymesh.leaf = "partial",
                         polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}], unreduced={"y"}>},
        tensor<64x64xbf16> {polymesh.leaf = "big"}) {
  %split = tensor.expand_shape %v [[0, 1]] output_shape [2, 8] : tensor<16xf32> into tensor<2x8xf32>
  return %split, %p, %g : tensor<2x8xf32>, tensor<8x8xf32>, tensor<64x64xbf16>
}

// -----

// Wide maps wrap into bands of equal width; 64 blocks are drawn, more are
// not.

polymesh.mesh @wide = <["w"=8]>
polymesh.mesh @grid = <["a"=8, "b"=8]>
polymesh.mesh @line = <["l"=65]>

// CHECK-LABEL: func @wide_maps: 3 results
// CHECK-NEXT:  #  leaf  shape  dtype  mesh                             sharding        local tile
// CHECK-NEXT:  0  row   1024   f32    @wide ["w"=8] dev 0-7            [{"w"}]         128
// CHECK-NEXT:      tile map, 8 blocks:
// CHECK-NEXT:      +------------+------------+------------+------------+
// CHECK-NEXT:      | [0:128]    | [128:256]  | [256:384]  | [384:512]  |
// CHECK-NEXT:      | dev 0      | dev 1      | dev 2      | dev 3      |
// CHECK-NEXT:      +------------+------------+------------+------------+
// CHECK-EMPTY:
// CHECK-NEXT:      +------------+------------+------------+------------+
// CHECK-NEXT:      | [512:640]  | [640:768]  | [768:896]  | [896:1024] |
// CHECK-NEXT:      | dev 4      | dev 5      | dev 6      | dev 7      |
// CHECK-NEXT:      +------------+------------+------------+------------+
// CHECK-NEXT:  1  grid  16x16  f32    @grid ["a"=8, "b"=8] dev 0-63    [{"a"}, {"b"}]  2x2
// CHECK-NEXT:      tile map, 8x8 blocks:
// CHECK-NOT:       omitted
// CHECK:           | dev 63 |
// CHECK-NEXT:      +--------
// CHECK-NEXT:  2  line  130    f32    @line ["l"=65] dev 0-64          [{"l"}]         2
// CHECK-NEXT:      (65 blocks; map omitted)
// CHECK-EMPTY:
func.func @wide_maps(%r: tensor<1024xf32> {polymesh.sharding = #polymesh.sharding<@wide, [{"w"}]>},
                     %g: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@grid, [{"a"}, {"b"}]>},
                     %l: tensor<130xf32> {polymesh.sharding = #polymesh.sharding<@line, [{"l"}]>})
    -> (tensor<1024xf32> {polymesh.leaf = "row"}, tensor<16x16xf32> {polymesh.leaf = "grid"},
        tensor<130xf32> {polymesh.leaf = "line"}) {
  return %r, %g, %l : tensor<1024xf32>, tensor<16x16xf32>, tensor<130xf32>
}

// -----

// A function without results, and an external declaration (propagation
// leaves it alone): its leaf is unplaced.

// CHECK-LABEL: func @no_results: 0 results
// CHECK-EMPTY:
// CHECK-NEXT:  func @external: 1 result
// CHECK-NEXT:  #  leaf  shape  dtype  mesh      sharding  local tile
// CHECK-NEXT:  0  out   4      f32    unplaced  unplaced  unplaced
// CHECK-EMPTY:

// FILE-LABEL: func @no_results: 0 results
// FILE:       func @external: 1 result
// FILE-NEXT:  #  leaf  shape  dtype  mesh      sharding  local tile
// FILE-NEXT:  0  out   4      f32    unplaced  unplaced  unplaced
// FILE-NOT:   init_model_nnx_jit
func.func @no_results() {
  return
}
func.func private @external() -> (tensor<4xf32> {polymesh.leaf = "out"})

// The input of the unknown-mesh RUN line (not part of the chunks above:
// these lines are comments here).
// UNKNOWN-MESH-INPUT: polymesh.mesh @m = <["x"=4]>
// UNKNOWN-MESH-INPUT: func.func @lost(%a: tensor<8xf32>) -> (tensor<8xf32> {polymesh.leaf = "lost", polymesh.sharding = #polymesh.sharding<@nowhere, [{"x"}]>}) {
// UNKNOWN-MESH-INPUT:   return %a : tensor<8xf32>
// UNKNOWN-MESH-INPUT: }
