// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// User priorities, as Shardy writes them: `{"a"}p1`, lower numbers first,
// a dimension without one is p0. Shardings of priority i spread as far as
// they can before those of priority i+1 are sources, and where two meet
// the better priority wins over bytes. Priorities stay on the annotations;
// propagation's own shardings carry none, and leave a dimension without
// axes open (`?`), as Shardy does, so that a later priority may split it.

polymesh.mesh @m = <["a"=2, "b"=4]>

// Without priorities the fewest bytes decide: moving %x to "b" moves 1024
// bytes, %y to "a" 3072.
// CHECK-LABEL: func.func @bytes
// CHECK: %[[X:.*]] = polymesh.reshard %arg0 <@m, [{"b"}, {}]>
// CHECK: arith.addf %[[X]], %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}
func.func @bytes(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                 %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}) -> tensor<16x16xf32> {
  %z = arith.addf %x, %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// With %x at p0 and %y at p1, %y moves, though it costs three times more.
// CHECK-LABEL: func.func @priority_beats_bytes
// CHECK-SAME: {polymesh.sharding = #polymesh.sharding<@m, [{"a"}p0, {}]>}
// CHECK-SAME: {polymesh.sharding = #polymesh.sharding<@m, [{"b"}p1, {}]>}
// CHECK: %[[Y:.*]] = polymesh.reshard %arg1 <@m, [{"a"}, {}]>
// CHECK: arith.addf %arg0, %[[Y]] {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {?}]>}
func.func @priority_beats_bytes(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}p0, {}]>},
                                %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}p1, {}]>}) -> tensor<16x16xf32> {
  %z = arith.addf %x, %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// The same with the priorities the other way: %x moves.
// CHECK-LABEL: func.func @priority_swapped
// CHECK: %[[X:.*]] = polymesh.reshard %arg0 <@m, [{"b"}, {}]>
// CHECK: arith.addf %[[X]], %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {?}]>}
func.func @priority_swapped(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}p1, {}]>},
                            %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}p0, {}]>}) -> tensor<16x16xf32> {
  %z = arith.addf %x, %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// Stages: p0 reaches the unannotated %w first, though %w's p1 use comes
// first in the program; the p1 operand is resharded where they meet.
// Without priorities, program order lets the first use decide.
// CHECK-LABEL: func.func @stages
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {?}]>}
// CHECK: %[[Y:.*]] = polymesh.reshard %arg2 <@m, [{"a"}, {}]>
// CHECK: arith.addf %arg0, %[[Y]]
// CHECK-NOT: polymesh.reshard
// CHECK: arith.addf %arg0, %arg1
func.func @stages(%w: tensor<16x16xf32>,
                  %x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}p0, {}]>},
                  %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"a"}p1]>}) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  %u = arith.addf %w, %y : tensor<16x16xf32>
  %v = arith.addf %w, %x : tensor<16x16xf32>
  return %u, %v : tensor<16x16xf32>, tensor<16x16xf32>
}

// CHECK-LABEL: func.func @program_order
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"a"}]>}
// CHECK: arith.addf %arg0, %arg2 {polymesh.sharding = #polymesh.sharding<@m, [{}, {"a"}]>}
// CHECK: %[[W:.*]] = polymesh.reshard %arg0 <@m, [{"a"}, {}]>
// CHECK: arith.addf %[[W]], %arg1
func.func @program_order(%w: tensor<16x16xf32>,
                         %x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                         %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"a"}]>}) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  %u = arith.addf %w, %y : tensor<16x16xf32>
  %v = arith.addf %w, %x : tensor<16x16xf32>
  return %u, %v : tensor<16x16xf32>, tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=4]>

// Three rounds, as in incremental partitioning (batch, then model, then
// the rest): p0 splits the rows of the matmul chain, p1 its columns, which
// p0 left open, and p2 comes last and is resharded where it meets them.
// CHECK-LABEL: func.func @three_rounds
// CHECK: linalg.matmul {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b", ?}]>}
// CHECK: %[[Z:.*]] = polymesh.reshard %arg2 <@m, [{"a"}, {"b"}]>
// CHECK: arith.addf %{{.*}}, %[[Z]] {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b", ?}]>}
func.func @three_rounds(%x: tensor<16x32xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}p0, {?}]>},
                        %w: tensor<32x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}, {"b"}p1]>},
                        %z: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}p2, {}]>}) -> tensor<16x16xf32> {
  %init = arith.constant dense<0.0> : tensor<16x16xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<16x32xf32>, tensor<32x16xf32>) outs(%init : tensor<16x16xf32>) -> tensor<16x16xf32>
  %r = arith.addf %mm, %z : tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}

// -----

polymesh.mesh @m = <["a"=2, "b"=2, "c"=2]>

// Priorities are per dimension: %x's dimension 0 is p1, its dimension 1
// p0. At p0, %y's "a" takes dimension 0 and %x's "b" dimension 1; %x's
// p1 "c" loses to "a".
// CHECK-LABEL: func.func @per_dimension
// CHECK: %[[X:.*]] = polymesh.reshard %arg0 <@m, [{"a"}, {"b"}]>
// CHECK: arith.addf %[[X]], %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}
func.func @per_dimension(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"c"}p1, {"b"}]>},
                         %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {?}]>}) -> tensor<16x16xf32> {
  %z = arith.addf %x, %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// CHECK-LABEL: func.func @per_dimension_swapped
// CHECK: %[[Y:.*]] = polymesh.reshard %arg1 <@m, [{"c"}, {"b"}]>
// CHECK: arith.addf %arg0, %[[Y]] {polymesh.sharding = #polymesh.sharding<@m, [{"c"}, {"b"}]>}
func.func @per_dimension_swapped(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"c"}, {"b"}]>},
                                 %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}p1, {?}]>}) -> tensor<16x16xf32> {
  %z = arith.addf %x, %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}
