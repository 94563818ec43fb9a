// RUN: polymesh-opt %s | FileCheck %s
// RUN: polymesh-opt %s | polymesh-opt | FileCheck %s
// RUN: polymesh-opt %s --mlir-print-op-generic | polymesh-opt | FileCheck %s

// polymesh.transfer: a planned reshard, printed one step per line.

polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=2, "tp"=2]>
polymesh.mesh @m = <["a"=2]>

// CHECK-LABEL: func.func @broadcast
// CHECK: polymesh.transfer %arg0 <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [0, 4] : [4, 8]},
// CHECK-NEXT: broadcast chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [4, 4]},
// CHECK-NEXT: broadcast chunk 0 devices [1, 3] {1 -> [3], [0, 4] : [4, 8]}
// CHECK-NEXT: ] : tensor<4x8xf32>
func.func @broadcast(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = polymesh.transfer %x <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [0, 4] : [4, 8]},
    broadcast chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [4, 4]},
    broadcast chunk 0 devices [1, 3] {1 -> [3], [0, 4] : [4, 8]}
  ] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// Device-equivalent shardings need no step.
// CHECK-LABEL: func.func @identity
// CHECK: polymesh.transfer %arg0 <@train, [{"dp", "tp"}]> -> <@train, [{"dp", "tp"}]> steps [] : tensor<8xf32>
func.func @identity(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = polymesh.transfer %x <@train, [{"dp", "tp"}]> -> <@train, [{"dp", "tp"}]> steps [] : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// Reductions: phases, accumulation and buffer flags.
// CHECK-LABEL: func.func @all_reduce
// CHECK: all_reduce chunk 0 devices [0, 1] {1 -> [0], [0] : [2], accumulate} {0 -> [1], [2] : [4], accumulate} {0 -> [1], [0] : [2], phase = 1} {1 -> [0], [2] : [4], phase = 1}
// CHECK: local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [4], from_destination, into_source}
func.func @all_reduce(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = polymesh.transfer %x <@m, [{}], unreduced={"a"}> -> <@m, [{}]> steps [
    all_reduce chunk 0 devices [0, 1] {1 -> [0], [0] : [2], accumulate} {0 -> [1], [2] : [4], accumulate} {0 -> [1], [0] : [2], phase = 1} {1 -> [0], [2] : [4], phase = 1},
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [4], from_destination, into_source}
  ] : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Symbolic reductions: the pieces and their owners stand for the
// transfers (an all-reduce over 4 members: 4 pieces for 16 transfers); a
// rank-0 tensor's pieces are empty corners.
polymesh.mesh @r4 = <["r"=4], device_ids=[7, 2, 5, 0]>

// CHECK-LABEL: func.func @symbolic
// CHECK: all_reduce chunk 0 devices [0, 2, 5, 7] pieces {0: [0, 0] : [2, 3]} {2: [2, 0] : [4, 3]} {5: [4, 0] : [6, 3]} {7: [6, 0] : [8, 3]},
// CHECK-NEXT: local_copy chunk 1 devices [0, 2, 5, 7]
// CHECK: reduce_scatter chunk 0 devices [0, 2, 5, 7] pieces {7: [0, 0] : [2, 3]} {2: [2, 0] : [4, 3]} {5: [4, 0] : [6, 3]} {0: [6, 0] : [8, 3]}
// CHECK: all_reduce chunk 0 devices [0, 2, 5, 7] pieces {0: [] : []}
func.func @symbolic(%x: tensor<8x3xf32>, %s: tensor<f32>) -> (tensor<8x3xf32>, tensor<8x3xf32>, tensor<f32>) {
  %0 = polymesh.transfer %x <@r4, [{}, {}], unreduced={"r"}> -> <@r4, [{}, {}]> steps [
    all_reduce chunk 0 devices [0, 2, 5, 7] pieces {0: [0, 0] : [2, 3]} {2: [2, 0] : [4, 3]} {5: [4, 0] : [6, 3]} {7: [6, 0] : [8, 3]},
    local_copy chunk 1 devices [0, 2, 5, 7] {0 -> [0], [0, 0] : [8, 3], into_source} {2 -> [2], [0, 0] : [8, 3], into_source} {5 -> [5], [0, 0] : [8, 3], into_source} {7 -> [7], [0, 0] : [8, 3], into_source}
  ] : tensor<8x3xf32>
  %1 = polymesh.transfer %x <@r4, [{}, {}], unreduced={"r"}> -> <@r4, [{"r"}, {}]> steps [
    reduce_scatter chunk 0 devices [0, 2, 5, 7] pieces {7: [0, 0] : [2, 3]} {2: [2, 0] : [4, 3]} {5: [4, 0] : [6, 3]} {0: [6, 0] : [8, 3]}
  ] : tensor<8x3xf32>
  %2 = polymesh.transfer %s <@r4, [], unreduced={"r"}> -> <@r4, []> steps [
    all_reduce chunk 0 devices [0, 2, 5, 7] pieces {0: [] : []}
  ] : tensor<f32>
  return %0, %1, %2 : tensor<8x3xf32>, tensor<8x3xf32>, tensor<f32>
}

// An exchange of whole tiles: the members' ids stand for the n(n-1)
// transfers between their tiles (12 here), on a mesh whose ids are not in
// position order.
// CHECK-LABEL: func.func @exchange
// CHECK: local_copy chunk 0 devices [0, 2, 5, 7]
// CHECK-NEXT: all_to_all chunk 0 devices [0, 2, 5, 7] tiles
// CHECK-NEXT: ] : tensor<8x8xf32>
func.func @exchange(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = polymesh.transfer %x <@r4, [{"r"}, {}]> -> <@r4, [{}, {"r"}]> steps [
    local_copy chunk 0 devices [0, 2, 5, 7] {7 -> [7], [0, 0] : [2, 2]} {2 -> [2], [2, 2] : [4, 4]} {5 -> [5], [4, 4] : [6, 6]} {0 -> [0], [6, 6] : [8, 8]},
    all_to_all chunk 0 devices [0, 2, 5, 7] tiles
  ] : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// A batched plan: the steps of cell 0, repeated over "a" (rows) and "b"
// (no dimension). Cell 0 is devices 0 and 1 of @g.
polymesh.mesh @g = <["a"=2, "b"=2, "c"=2]>

// CHECK-LABEL: func.func @batched
// CHECK: polymesh.transfer %arg0 <@g, [{"a", "c"}]> -> <@g, [{"a"}]> batch [#polymesh.batch_axis<"a" -> "a", dim = 0>, #polymesh.batch_axis<"b" -> "b">] steps [
// CHECK-NEXT: local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [2]} {1 -> [1], [2] : [4]},
// CHECK-NEXT: all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]} {1 -> [0], [2] : [4]}
// CHECK-NEXT: ] : tensor<8xf32>
func.func @batched(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = polymesh.transfer %x <@g, [{"a", "c"}]> -> <@g, [{"a"}]>
      batch [#polymesh.batch_axis<"a" -> "a", dim = 0>, #polymesh.batch_axis<"b" -> "b">] steps [
    local_copy chunk 0 devices [0, 1] {0 -> [0], [0] : [2]} {1 -> [1], [2] : [4]},
    all_gather chunk 0 devices [0, 1] {0 -> [1], [0] : [2]} {1 -> [0], [2] : [4]}
  ] : tensor<8xf32>
  return %0 : tensor<8xf32>
}
