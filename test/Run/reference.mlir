// RUN: polymesh-run %s | FileCheck %s
// RUN: polymesh-run %s --print-results | FileCheck %s --check-prefix=RESULTS
// RUN: polymesh-run %s --entry=matmul | FileCheck %s --check-prefix=ENTRY

// polymesh-run runs every public function on the deterministic inputs and
// prints one line per function: its leaves and the reference's wall time.
// Sharding annotations do not change what the reference computes.

module attributes {polymesh.ambient_mesh = @mesh} {
polymesh.mesh @mesh = <["x"=2, "y"=2]>
polymesh.mesh @dev1 = <[], device_ids=[1]>

// CHECK: @add_mul: 1 leaf, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms
// RESULTS-LABEL: @add_mul: 1 leaf
// (a + b) * a with a = [-8, 1.875, ...] and b = [5.453125, -0.671875, ...],
// printed as the shortest decimals that read back to the same floats.
// RESULTS-NEXT: result #0 (leaf "out"): 2x4xf32 [20.375, 2.2558594, 46.644287, 49.580566, 1.5646973, -2.1533203, 13.676514, 22.5542]
func.func @add_mul(%a: tensor<2x4xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{"x"}, {"y"}]>},
                   %b: tensor<2x4xf32>)
    -> (tensor<2x4xf32> {polymesh.leaf = "out"}) {
  %s = arith.addf %a, %b : tensor<2x4xf32>
  %m = arith.mulf %s, %a : tensor<2x4xf32>
  return %m : tensor<2x4xf32>
}

// CHECK-NEXT: @matmul: 1 leaf, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms
// RESULTS-LABEL: @matmul: 1 leaf
// RESULTS-NEXT: result #0: 2x2xf32 [-43.63672, -17.972412, 53.604492, -50.428955]
func.func @matmul(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32>
    attributes {polymesh.ambient_mesh = @mesh} {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %m = linalg.matmul ins(%a, %b : tensor<2x3xf32>, tensor<3x2xf32>)
                     outs(%f : tensor<2x2xf32>) -> tensor<2x2xf32>
  return %m : tensor<2x2xf32>
}

// A reshard to a single device, then an expand_shape.
// CHECK-NEXT: @moved: 2 leaves, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms
// RESULTS-LABEL: @moved: 2 leaves
// RESULTS-NEXT: result #0 (leaf "expanded"): 1x2x4xf32 [-8, 1.875, -4.234375, 5.65625, -0.453125, -6.5625, 3.328125, -2.78125]
// RESULTS-NEXT: result #1 (leaf "doubled"): 2x4xf32 [-16, 3.75, -8.46875, 11.3125, -0.90625, -13.125, 6.65625, -5.5625]
func.func @moved(%a: tensor<2x4xf32> {polymesh.sharding = #polymesh.sharding<@mesh, [{"x"}, {}]>})
    -> (tensor<1x2x4xf32> {polymesh.leaf = "expanded"},
        tensor<2x4xf32> {polymesh.leaf = "doubled"}) {
  %r = polymesh.reshard %a <@dev1, [{}, {}]> : tensor<2x4xf32>
  %e = tensor.expand_shape %r [[0, 1], [2]] output_shape [1, 2, 4]
      : tensor<2x4xf32> into tensor<1x2x4xf32>
  %d = arith.addf %r, %r : tensor<2x4xf32>
  return %e, %d : tensor<1x2x4xf32>, tensor<2x4xf32>
}

}

// CHECK-NEXT: 3 ran, 0 failed

// ENTRY-NOT: @add_mul
// ENTRY: @matmul: 1 leaf
// ENTRY-NOT: @moved
// ENTRY: 1 ran, 0 failed
