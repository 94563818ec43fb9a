// RUN: polymesh-opt %s --polymesh-propagate -split-input-file -verify-diagnostics | FileCheck %s
// RUN: not polymesh-opt %s --polymesh-propagate -split-input-file 2>&1 >/dev/null | FileCheck %s --check-prefix=LOC

// Calls: propagation is inter-procedural by specialization. Each call of a
// function with a body gets its own copy of that body before anything is
// propagated, so each site is placed by its own operands and uses, and
// nothing moves at the call boundary. The callee's argument and result
// shardings, and a call op's own, become sharding constraints at the site.
// Private callees left without calls are erased.

polymesh.mesh @m = <["a"=2, "b"=4]>

func.func private @scale(%x: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %0 = math.exp %x : tensor<16x32xf32>
  %1 = arith.mulf %0, %x : tensor<16x32xf32>
  return %1 : tensor<16x32xf32>
}

// Two sites with two shardings: one copy each, placed as its operand.
// CHECK-NOT: func.func private @scale
// CHECK-LABEL: func.func @two_sites
// CHECK-SAME: -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}, tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>})
// CHECK-NEXT: %[[E0:.*]] = math.exp %arg0 {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}
// CHECK-NEXT: %[[M0:.*]] = arith.mulf %[[E0]], %arg0 {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}
// CHECK-NEXT: %[[E1:.*]] = math.exp %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>}
// CHECK-NEXT: %[[M1:.*]] = arith.mulf %[[E1]], %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>}
// CHECK-NEXT: return %[[M0]], %[[M1]]
func.func @two_sites(%p: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                     %q: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>})
    -> (tensor<16x32xf32>, tensor<16x32xf32>) {
  %0 = func.call @scale(%p) : (tensor<16x32xf32>) -> tensor<16x32xf32>
  %1 = func.call @scale(%q) : (tensor<16x32xf32>) -> tensor<16x32xf32>
  return %0, %1 : tensor<16x32xf32>, tensor<16x32xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// The callee's declared argument sharding holds at every site: an operand
// placed otherwise is resharded at the site; the declared result sharding
// places the site's result, which a later op then follows.
func.func private @layer(%x: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>})
    -> (tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>}) {
  %0 = math.tanh %x : tensor<16x32xf32>
  return %0 : tensor<16x32xf32>
}

// CHECK-LABEL: func.func @declared
// CHECK-NEXT: %[[IN:.*]] = polymesh.reshard %arg0 <@m, [{"b"}, {}]>
// CHECK-NEXT: %[[ARG:.*]] = polymesh.sharding_constraint %[[IN]] <@m, [{"b"}, {}]>
// CHECK-NEXT: %[[T:.*]] = math.tanh %[[ARG]] {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK-NEXT: %[[OUT:.*]] = polymesh.reshard %[[T]] <@m, [{}, {"b"}]>
// CHECK-NEXT: %[[RES:.*]] = polymesh.sharding_constraint %[[OUT]] <@m, [{}, {"b"}]>
// CHECK-NEXT: %[[N:.*]] = arith.negf %[[RES]] {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>}
// CHECK-NEXT: return %[[N]]
func.func @declared(%p: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>})
    -> tensor<16x32xf32> {
  %0 = func.call @layer(%p) : (tensor<16x32xf32>) -> tensor<16x32xf32>
  %1 = arith.negf %0 : tensor<16x32xf32>
  return %1 : tensor<16x32xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// Calls nested three deep, a public callee and a call op's own sharding:
// every call of a body is gone; the public callee stays as an entry point
// of its own (propagated for itself); the call's `polymesh.sharding`
// constrains its result.
func.func private @inner(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = arith.addf %x, %x : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func private @middle(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = func.call @inner(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = func.call @inner(%0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
// CHECK-LABEL: func.func @outer_public
// CHECK-COUNT-2: arith.addf %{{.*}}, %{{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{}, {"a"}]>}
// CHECK-NOT: func.call
// CHECK: return
func.func @outer_public(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"a"}]>}) -> tensor<8x8xf32> {
  %0 = func.call @middle(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
// @middle's two copies of @inner follow %x; the public callee's declared
// argument sharding moves them; the call's own sharding moves its result.
// CHECK-LABEL: func.func @top
// CHECK-COUNT-2: arith.addf %{{.*}}, %{{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
// CHECK-NEXT: polymesh.reshard %{{.*}} <@m, [{}, {"a"}]>
// CHECK-NEXT: polymesh.sharding_constraint
// CHECK-COUNT-2: arith.addf %{{.*}}, %{{.*}} {polymesh.sharding = #polymesh.sharding<@m, [{}, {"a"}]>}
// CHECK-NEXT: %[[R:.*]] = polymesh.reshard %{{.*}} <@m, [{"a"}, {}]>
// CHECK-NEXT: %[[C:.*]] = polymesh.sharding_constraint %[[R]] <@m, [{"a"}, {}]>
// CHECK-NEXT: return %[[C]]
func.func @top(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}) -> tensor<8x8xf32> {
  %0 = func.call @middle(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = func.call @outer_public(%0) {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
// CHECK-NOT: func.func private @middle
// CHECK-NOT: func.func private @inner

// -----

polymesh.mesh @m = <["a"=2]>

// A call of a declaration has no body to copy; it stays.
func.func private @external(tensor<4xf32>) -> tensor<4xf32>
// CHECK-LABEL: func.func @declaration
// CHECK: call @external
func.func @declaration(%x: tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<4xf32> {
  // expected-warning @+1 {{no sharding rule for 'func.call'; computing it replicated on @m}}
  %0 = func.call @external(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @self(%x: tensor<4xf32>) -> tensor<4xf32> attributes {polymesh.ambient_mesh = @m} {
  // expected-error @+1 {{'func.call' op is a recursive call (@self -> @self): recursive call graphs are not supported}}
  %0 = func.call @self(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func @entry(%x: tensor<4xf32>) -> tensor<4xf32> attributes {polymesh.ambient_mesh = @m} {
  %0 = func.call @ping(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @ping(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @pong(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @pong(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'func.call' op is a recursive call (@ping -> @pong -> @ping): recursive call graphs are not supported}}
  %0 = func.call @ping(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

func.func private @branches(%x: tensor<4xf32>) -> tensor<4xf32> {
  llvm.br ^exit
^exit:
  return %x : tensor<4xf32>
}
func.func @multi_block(%x: tensor<4xf32>) -> tensor<4xf32> attributes {polymesh.ambient_mesh = @m} {
  // expected-error @+1 {{cannot specialize the call of @branches for propagation: its body has 2 blocks, and only single-block callees are copied into their call sites}}
  %0 = func.call @branches(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// An op of a copied body keeps its own line, and says which call it was
// copied to.
func.func private @mismatch(%x: tensor<8xf32>) -> tensor<8xf32> {
  // LOC: propagate-calls.mlir:[[@LINE+2]]:3: error: sharding group 0 has members
  // expected-error @+1 {{sharding group 0 has members of types 'tensor<4xf32>' and 'tensor<8xf32>'}}
  polymesh.sharding_group %x group_id=0 : tensor<8xf32>
  return %x : tensor<8xf32>
}
func.func @located(%x: tensor<8xf32>, %y: tensor<4xf32>) -> tensor<8xf32>
    attributes {polymesh.ambient_mesh = @m} {
  polymesh.sharding_group %y group_id=0 : tensor<4xf32>
  // LOC: propagate-calls.mlir:[[@LINE+1]]:8: note: called from
  %0 = func.call @mismatch(%x) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
