// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition="max-step-copies=7" -split-input-file -verify-diagnostics

// Budgets for the whole module, not only per plan (issue 13, item 10):
// every class of devices runs every step of its function's plans, so the
// lowered code grows with classes x steps. --polymesh-partition counts them
// over the module's functions and refuses the function that crosses its
// budget (`max-step-copies`, 65,536 by default; 7 here). The module budget
// on transfers is in module-transfers.test.

polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=3], device_ids=[2, 3, 4]>

// Three classes (devices 0-1 with @a rows, 2-3 with 3-row tiles of @b,
// device 4 with 2 rows) x 1 step: 3 step copies.
func.func @first(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@b, [{"y"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// The second function alone would fit; with the first it does not.
// expected-error @+1 {{cannot be partitioned: its 3 device classes would each run the 2 steps of its plans, 9 step copies in the module with the functions before it, more than the budget of 7 (docs/limits.md)}}
func.func @second(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %x <@b, [{"y"}, {}]> : tensor<8x8xf32>
  %1 = polymesh.reshard %0 <@a, [{}, {"x"}]> : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
