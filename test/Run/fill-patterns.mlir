// RUN: polymesh-run %s --print-results | FileCheck %s

// The deterministic inputs, per element type (docs/execution.md): argument
// s, element g (row-major global index) holds a value of
// h = ((g + 1000003 * s) * 2654435761) mod 2^32. Each function returns its
// arguments, so the printed results are the inputs themselves.

module attributes {polymesh.ambient_mesh = @mesh} {
polymesh.mesh @mesh = <["x"=2]>

// f32 and f64: (h >> 22) / 64 - 8. Argument i is stream i.
// CHECK-LABEL: @floats: 3 leaves
// CHECK-NEXT: result #0: 2x4xf32 [-8, 1.875, -4.234375, 5.65625, -0.453125, -6.5625, 3.328125, -2.78125]
// CHECK-NEXT: result #1: 8xf64 [5.453125, -0.671875, -6.78125, 3.109375, -3, 6.890625, 0.78125, -5.328125]
// CHECK-NEXT: result #2: f32 [2.90625]
func.func @floats(%a: tensor<2x4xf32>, %b: tensor<8xf64>, %c: tensor<f32>)
    -> (tensor<2x4xf32>, tensor<8xf64>, tensor<f32>) {
  return %a, %b, %c : tensor<2x4xf32>, tensor<8xf64>, tensor<f32>
}

// f16 and bf16: (h >> 24) / 32 - 4.
// CHECK-LABEL: @halves: 2 leaves
// CHECK-NEXT: result #0: 8xf16 [-4, 0.9375, -2.125, 2.8125, -0.25, -3.28125, 1.65625, -1.40625]
// CHECK-NEXT: result #1: 2x2x2xbf16 [2.71875, -0.34375, -3.40625, 1.53125, -1.5, 3.4375, 0.375, -2.6875]
func.func @halves(%a: tensor<8xf16>, %b: tensor<2x2x2xbf16>)
    -> (tensor<8xf16>, tensor<2x2x2xbf16>) {
  return %a, %b : tensor<8xf16>, tensor<2x2x2xbf16>
}

// i1: h >> 31; i8: (h >> 28) - 8; i32: (h >> 16) - 2^15; i64: h - 2^31.
// CHECK-LABEL: @integers: 4 leaves
// CHECK-NEXT: result #0: 8xi1 [false, true, false, true, false, false, true, false]
// CHECK-NEXT: result #1: 8xi8 [5, -1, -7, 3, -3, 6, 0, -6]
// CHECK-NEXT: result #2: 8xi32 [11910, -13122, 27381, 2349, -22684, 17820, -7213, -32245]
// CHECK-NEXT: result #3: 8xi64 [97153529, -1543378006, 1111057755, -529473780, 2124961981, 484430446, -1156101089, 1498334672]
func.func @integers(%p: tensor<8xi1>, %a: tensor<8xi8>, %b: tensor<8xi32>, %c: tensor<8xi64>)
    -> (tensor<8xi1>, tensor<8xi8>, tensor<8xi32>, tensor<8xi64>) {
  return %p, %a, %b, %c : tensor<8xi1>, tensor<8xi8>, tensor<8xi32>, tensor<8xi64>
}

// A little arithmetic: bf16 and f16 round once per op (a * b + a is
// -10.875 - 4 = -14.875 in element 0). Floats print as the shortest
// decimal that reads back to the same f32 (or f64) value.
// CHECK-LABEL: @arith: 4 leaves
// CHECK-NEXT: result #0: 4xbf16 [-14.875, 0.6171875, 5.125, 7.125]
// CHECK-NEXT: result #1: 4xi1 [true, false, false, false]
// CHECK-NEXT: result #2: 4xi32 [23820, -26244, 54762, 4698]
// CHECK-NEXT: result #3: 4xf16 [0.024414062, 8.265625, 4.2539062, 1]
func.func @arith(%a: tensor<4xbf16>, %b: tensor<4xbf16>, %i: tensor<4xi32>, %h: tensor<4xf16>)
    -> (tensor<4xbf16>, tensor<4xi1>, tensor<4xi32>, tensor<4xf16>) {
  %m = arith.mulf %a, %b : tensor<4xbf16>
  %s = arith.addf %m, %a : tensor<4xbf16>
  %lt = arith.cmpf olt, %a, %b : tensor<4xbf16>
  %d = arith.addi %i, %i : tensor<4xi32>
  %hh = arith.mulf %h, %h : tensor<4xf16>
  return %s, %lt, %d, %hh : tensor<4xbf16>, tensor<4xi1>, tensor<4xi32>, tensor<4xf16>
}
}

// CHECK: 4 ran, 0 failed
