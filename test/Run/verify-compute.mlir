// RUN: polymesh-run %s --verify | FileCheck %s
// The JIT's optimization level does not change a result (IEEE semantics at
// every level): the same checks at -O0 and -O3.
// RUN: polymesh-run %s --verify --opt-level=0 | FileCheck %s
// RUN: polymesh-run %s --verify --opt-level=3 | FileCheck %s

// --verify on functions that compute: each runs as the CPU pipeline compiles
// it (--polymesh-propagate, --polymesh-plan, --polymesh-partition,
// --polymesh-lower-to-cpu), one thread per device on the loopback runtime,
// every device on its exact tiles, and every device's tile of every result
// must equal the reference's box bit for bit. "bytes moved" is the sum of
// the plans' bytesMoved, checked here by hand per case.
//
// tosa.reshape, tosa.transpose and tosa.matmul have no sharding rule in
// --polymesh-propagate yet: it computes them replicated (with a warning on
// stderr) after gathering their operands, so those cases check the gathers
// and the replicated local programs, not a sharded TOSA op.

polymesh.mesh @pair = <["x"=2]>
polymesh.mesh @quad = <["x"=4]>
polymesh.mesh @m4 = <["x"=4]>
polymesh.mesh @m8 = <["x"=8]>
polymesh.mesh @m22 = <["x"=2, "y"=2]>
polymesh.mesh @stage0 = <["dp"=2, "tp"=2], device_ids=[0, 1, 2, 3]>
polymesh.mesh @stage1 = <["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]>
polymesh.mesh @rev = <["x"=4], device_ids=[3, 2, 1, 0]>
polymesh.mesh @dev5 = <[], device_ids=[5]>

// Elementwise arith and math on 2x2 tiles of a 2x2 mesh: nothing moves.
// CHECK:      @arith: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @arith(%a: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>},
                 %b: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>}) -> tensor<8x6xf32> {
  %0 = arith.subf %a, %b : tensor<8x6xf32>
  %1 = arith.mulf %0, %a : tensor<8x6xf32>
  %2 = math.absf %1 : tensor<8x6xf32>
  %3 = arith.maximumf %2, %b : tensor<8x6xf32>
  return %3 : tensor<8x6xf32>
}

// TOSA elementwise, with a shift operand that stays replicated.
// CHECK-NEXT: @tosa_elementwise: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @tosa_elementwise(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>},
                            %b: tensor<16x8xf32>) -> tensor<16x8xf32> {
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %0 = tosa.add %a, %b : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  %1 = tosa.mul %0, %b, %shift : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<1xi8>) -> tensor<16x8xf32>
  %2 = tosa.maximum %1, %a : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  return %2 : tensor<16x8xf32>
}

// A dense constant: each device slices its own tile out of it.
// CHECK-NEXT: @constant: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @constant(%a: tensor<4x2xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<4x2xi32> {
  %c = arith.constant dense<[[1, 2], [3, 4], [5, 6], [7, 8]]> : tensor<4x2xi32>
  %0 = arith.muli %a, %c : tensor<4x2xi32>
  return %0 : tensor<4x2xi32>
}

// Reshapes keep their tiles: a split axis becomes sub-axes and merges back.
// CHECK-NEXT: @reshapes: 2 leaves, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS
func.func @reshapes(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m8, [{"x"}, {}]>}) -> (tensor<4x4x8xf32>, tensor<16x8xf32>) {
  %e = tensor.expand_shape %a [[0, 1], [2]] output_shape [4, 4, 8] : tensor<16x8xf32> into tensor<4x4x8xf32>
  %n = arith.negf %e : tensor<4x4x8xf32>
  %c = tensor.collapse_shape %n [[0, 1], [2]] : tensor<4x4x8xf32> into tensor<16x8xf32>
  %d = arith.addf %c, %a : tensor<16x8xf32>
  return %n, %d : tensor<4x4x8xf32>, tensor<16x8xf32>
}

// tosa.reshape, replicated after an all-gather: 4 * 12 * 8 * 4 bytes.
// CHECK-NEXT: @tosa_reshape: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @tosa_reshape(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<16x2x4xf32> {
  %s = tosa.const_shape {values = dense<[16, 2, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %r = tosa.reshape %a, %s : (tensor<16x8xf32>, !tosa.shape<3>) -> tensor<16x2x4xf32>
  return %r : tensor<16x2x4xf32>
}

// linalg.transpose moves the sharded dimensions with the data;
// tosa.transpose runs replicated after an all-gather (4 * 96 * 4 bytes) and
// each device keeps its tile of the sum.
// CHECK-NEXT: @transposes: 2 leaves, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @transposes(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>}) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %e = tensor.empty() : tensor<8x16xf32>
  %t = linalg.transpose ins(%a : tensor<16x8xf32>) outs(%e : tensor<8x16xf32>) permutation = [1, 0]
  %u = tosa.transpose %a {perms = array<i32: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %v = tosa.add %u, %t : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %t, %v : tensor<8x16xf32>, tensor<8x16xf32>
}

// linalg.matmul with the contracting dimension sharded: every device
// computes a partial sum (zero init), and the replicated result is its
// all-reduce. Each of the 4 devices owns a 2x8 piece and receives the other
// 3 pieces' partials (phase 0) then the 3 reduced pieces (phase 1):
// 4 * 2 * 3 * 16 * 4 bytes.
// CHECK-NEXT: @matmul_all_reduce: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @matmul_all_reduce(%a: tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>},
                             %b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// A result that keeps its partial sums is compared as their sum per
// reduction group; nothing moves.
// CHECK-NEXT: @matmul_unreduced: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @matmul_unreduced(%a: tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>},
                            %b: tensor<16x8xf32>)
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>}) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// tosa.matmul, batched, zero points as constants: both operands are
// gathered (4 * 96 * 4 bytes each), the product is computed replicated and
// each device keeps its 2 rows.
// CHECK-NEXT: @tosa_matmul: 1 leaf, 3072 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @tosa_matmul(%a: tensor<1x8x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}, {"x"}]>},
                       %b: tensor<1x16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}, {}]>})
    -> (tensor<1x8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}, {}]>}) {
  %zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %r = tosa.matmul %a, %b, %zp, %zp : (tensor<1x8x16xf32>, tensor<1x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x8xf32>
  return %r : tensor<1x8x8xf32>
}

// bf16: every product rounds, so the sharded sum must keep the reference's
// order of additions within a tile; elementwise ops are exact per element.
// CHECK-NEXT: @bf16: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @bf16(%a: tensor<8x8xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>},
                %b: tensor<8x8xbf16>) -> tensor<8x8xbf16> {
  %0 = arith.mulf %a, %b : tensor<8x8xbf16>
  %1 = arith.addf %0, %a : tensor<8x8xbf16>
  %2 = arith.divf %1, %b : tensor<8x8xbf16>
  return %2 : tensor<8x8xbf16>
}

// i1: logic and a comparison.
// CHECK-NEXT: @i1: 2 leaves, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @i1(%a: tensor<8x8xi1> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>},
              %b: tensor<8x8xi1>,
              %c: tensor<8x8xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>},
              %d: tensor<8x8xi32>) -> (tensor<8x8xi1>, tensor<8x8xi1>) {
  %0 = arith.xori %a, %b : tensor<8x8xi1>
  %1 = arith.andi %0, %a : tensor<8x8xi1>
  %2 = arith.cmpi slt, %c, %d : tensor<8x8xi32>
  return %1, %2 : tensor<8x8xi1>, tensor<8x8xi1>
}

// Compute on one mesh, reshard across meshes (all-to-all on @m4, then to
// the disjoint devices of @stage1), compute again there.
// 4 * 12 * 4 * 4 bytes, then 16 * 16 * 4 bytes.
// CHECK-NEXT: @cross_mesh: 1 leaf, 1792 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS
func.func @cross_mesh(%a: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<16x16xf32> {
  %0 = arith.negf %a : tensor<16x16xf32>
  %1 = polymesh.reshard %0 <@m4, [{}, {"x"}]> : tensor<16x16xf32>
  %2 = arith.mulf %1, %1 : tensor<16x16xf32>
  %3 = polymesh.reshard %2 <@stage1, [{"dp"}, {"tp"}]> : tensor<16x16xf32>
  %4 = arith.addf %3, %3 : tensor<16x16xf32>
  return %4 : tensor<16x16xf32>
}

// Pipeline stages on disjoint devices: a matmul on each stage, the
// activations cross between them; each device of stage 1 receives the 4
// rows of its "dp" shard: 4 * 32 * 4 bytes.
// CHECK-NEXT: @stages: 1 leaf, 512 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS
func.func @stages(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"dp"}, {}]>},
                  %w0: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{}, {"tp"}]>},
                  %w1: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@stage1, [{}, {"tp"}]>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@stage1, [{"dp"}, {"tp"}]>}) {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<8x8xf32>
  %f0 = linalg.fill ins(%z : f32) outs(%e0 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %h = linalg.matmul ins(%x, %w0 : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f0 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %h1 = polymesh.reshard %h <@stage1, [{"dp"}, {}]> : tensor<8x8xf32>
  %e1 = tensor.empty() : tensor<8x8xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<8x8xf32>) -> tensor<8x8xf32>
  %y = linalg.matmul ins(%h1, %w1 : tensor<8x8xf32>, tensor<8x8xf32>) outs(%f1 : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// Reversed device ids: position order is not mesh order.
// CHECK-NEXT: @reversed: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @reversed(%a: tensor<8x4xf32> {polymesh.sharding = #polymesh.sharding<@rev, [{"x"}, {}]>},
                    %b: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = arith.subf %a, %b : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// An uneven dimension: 10 rows over 4 devices are tiles of 3, 3, 3 and 1
// rows, so devices run different classes; the gather sends each device the
// 7 to 9 rows it lacks: (7 + 7 + 7 + 9) * 4 * 4 bytes.
// CHECK-NEXT: @uneven: 1 leaf, 480 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @uneven(%a: tensor<10x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>},
                  %b: tensor<10x4xf32>) -> (tensor<10x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  %0 = arith.mulf %a, %b : tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// An empty tile inside a mesh: 6 rows over 4 devices are 2, 2, 2 and 0
// rows. Each device gathers its column: devices 0-2 receive 4 elements,
// device 3 all 6: 18 * 4 bytes.
// CHECK-NEXT: @empty_tile: 1 leaf, 72 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @empty_tile(%a: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>},
                      %b: tensor<6x4xf32>) -> (tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>}) {
  %0 = arith.addf %a, %b : tensor<6x4xf32>
  return %0 : tensor<6x4xf32>
}

// An argument of partial sums (the first device of each reduction group
// holds the values, the other zeros) is reduce-scattered before it is
// computed on: each device receives its partner's partial of its 4x4 piece,
// 4 * 16 * 4 bytes.
// CHECK-NEXT: @unreduced_input: 1 leaf, 256 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @unreduced_input(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>}) {
  %0 = arith.negf %a : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// Sub-axes: the 8 devices split rows 4 ways and columns 2 ways.
// CHECK-NEXT: @sub_axes: 1 leaf, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 8 devices, PASS
func.func @sub_axes(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m8, [{"x":(1)4}, {"x":(4)2}]>},
                    %b: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = arith.addf %a, %b : tensor<8x8xf32>
  %1 = math.floor %0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// A value computed on one device and fills placed elsewhere: devices
// outside a value's mesh hold empty tiles and compute nothing.
// CHECK-NEXT: @one_device: 2 leaves, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 5 devices, PASS
func.func @one_device(%a: tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@dev5, [{}, {}]>})
    -> (tensor<4x4xf32>, tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
  %0 = arith.addf %a, %a : tensor<4x4xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0, %f : tensor<4x4xf32>, tensor<4x4xf32>
}

// Regressions. One value as both operands of a matmul in two layouts (rows
// on the left, replicated on the right): only the right operand is
// resharded.
// CHECK-NEXT: @square: 1 leaf, 144 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 2 devices, PASS
func.func @square(%a: tensor<6x6xf32> {polymesh.sharding = #polymesh.sharding<@pair, [{"x"}, {}]>}) -> tensor<6x6xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<6x6xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<6x6xf32>) -> tensor<6x6xf32>
  %r = linalg.matmul ins(%a, %a : tensor<6x6xf32>, tensor<6x6xf32>) outs(%f : tensor<6x6xf32>) -> tensor<6x6xf32>
  return %r : tensor<6x6xf32>
}

// A contracting dimension and the result's rows on the same axis: the
// zero init is placed by rows and resharded, and stays a zero init (a
// reduce-scatter then sums the partials).
// CHECK-NEXT: @rows_of_partial_sums: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @rows_of_partial_sums(%a: tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@quad, [{}, {"x"}]>}, %b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@quad, [{"x"}, {}]>}) -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@quad, [{"x"}, {}]>}) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x8xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// One value returned twice (upstream's buffer-results-to-out-params crashed
// on it): each result gets its own buffer.
// CHECK-NEXT: @returned_twice: 2 leaves, 0 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
func.func @returned_twice(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@quad, [{"x"}]>}) -> (tensor<8xf32>, tensor<8xf32>) {
  %s = arith.addf %a, %a : tensor<8xf32>
  return %s, %s : tensor<8xf32>, tensor<8xf32>
}

// CHECK-NEXT: 22 passed, 0 failed
