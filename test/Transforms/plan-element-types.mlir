// RUN: polymesh-opt %s --polymesh-plan -split-input-file -verify-diagnostics
// The refused cases make the run fail; the movable one is still printed.
// RUN: not polymesh-opt %s --polymesh-plan -split-input-file 2>/dev/null | FileCheck %s

// Element types that cannot be moved byte for byte are refused, with the
// size LLVM gives them (issue 13, item 4). The planner used to size an i17
// as 3 bytes, an i48 as 6 and an f80 as 10, while LLVM stores them in 4, 8
// and 16 (with undefined padding), so plans copied the wrong bytes.

polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=4], device_ids=[2, 3, 4, 5]>

func.func @i17(%x: tensor<8x8xi17>) -> tensor<8x8xi17> {
  %0 = polymesh.sharding_constraint %x <@a, [{"x"}, {}]> : tensor<8x8xi17>
  // expected-error @+1 {{cannot be planned: element type 'i17' cannot be moved: LLVM stores its 17 bits in 4 bytes with undefined padding; use a width whose whole bytes are a power of two}}
  %1 = polymesh.reshard %0 <@b, [{"y"}, {}]> : tensor<8x8xi17>
  return %1 : tensor<8x8xi17>
}

// -----

polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=4], device_ids=[2, 3, 4, 5]>

func.func @i48(%x: tensor<8xi48>) -> tensor<8xi48> {
  %0 = polymesh.sharding_constraint %x <@a, [{"x"}]> : tensor<8xi48>
  // expected-error @+1 {{element type 'i48' cannot be moved: LLVM stores its 48 bits in 8 bytes}}
  %1 = polymesh.reshard %0 <@b, [{"y"}]> : tensor<8xi48>
  return %1 : tensor<8xi48>
}

// -----

polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=4], device_ids=[2, 3, 4, 5]>

func.func @f80(%x: tensor<8xf80>) -> tensor<8xf80> {
  %0 = polymesh.sharding_constraint %x <@a, [{"x"}]> : tensor<8xf80>
  // expected-error @+1 {{element type 'f80' cannot be moved: LLVM stores its 80 bits in 16 bytes}}
  %1 = polymesh.reshard %0 <@b, [{"y"}]> : tensor<8xf80>
  return %1 : tensor<8xf80>
}

// -----

// A planned transfer of such a type does not verify either.
polymesh.mesh @one = <[], device_ids=[0]>
polymesh.mesh @two = <[], device_ids=[1]>

func.func @transfer_i24(%x: tensor<4xi24>) -> tensor<4xi24> {
  // expected-error @+1 {{element type 'i24' cannot be moved: LLVM stores its 24 bits in 4 bytes}}
  %0 = polymesh.transfer %x <@one, [{}]> -> <@two, [{}]> steps [
    send_recv chunk 0 devices [0, 1] {0 -> [1], [0] : [4]}
  ] : tensor<4xi24>
  return %0 : tensor<4xi24>
}

// -----

// Widths whose whole bytes are a power of two move as those bytes: i1 and
// i4 as one byte, i128 as sixteen.
polymesh.mesh @a = <["x"=2]>
polymesh.mesh @b = <["y"=4], device_ids=[2, 3, 4, 5]>

// CHECK-LABEL: func.func @movable
// CHECK-COUNT-3: polymesh.transfer
func.func @movable(%p: tensor<8xi1>, %q: tensor<8xi4>, %r: tensor<8xi128>) -> (tensor<8xi1>, tensor<8xi4>, tensor<8xi128>) {
  %0 = polymesh.sharding_constraint %p <@a, [{"x"}]> : tensor<8xi1>
  %1 = polymesh.reshard %0 <@b, [{"y"}]> : tensor<8xi1>
  %2 = polymesh.sharding_constraint %q <@a, [{"x"}]> : tensor<8xi4>
  %3 = polymesh.reshard %2 <@b, [{"y"}]> : tensor<8xi4>
  %4 = polymesh.sharding_constraint %r <@a, [{"x"}]> : tensor<8xi128>
  %5 = polymesh.reshard %4 <@b, [{"y"}]> : tensor<8xi128>
  return %1, %3, %5 : tensor<8xi1>, tensor<8xi4>, tensor<8xi128>
}
