// RUN: polymesh-opt %s --polymesh-propagate -split-input-file | FileCheck %s

// Open dimensions (`?`) may be extended by propagation; closed ones never
// change, and `replicated` axes are never added.

polymesh.mesh @m = <["a"=2, "b"=4]>

// CHECK-LABEL: func.func @open_extends
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", ?}, {}]>}
// CHECK-NOT: polymesh.reshard
// CHECK: arith.addf %arg0, %arg1 {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}
func.func @open_extends(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}, {}]>},
                        %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<16x16xf32> {
  %0 = arith.addf %x, %y : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// The same with a closed dimension: the argument is resliced explicitly.
// CHECK-LABEL: func.func @closed_reshards
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@m, [{"a"}, {}]>
// CHECK: arith.addf %[[R]], %arg1
func.func @closed_reshards(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>},
                           %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<16x16xf32> {
  %0 = arith.addf %x, %y : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// `replicated={"a"}` forbids the extension by "a".
// CHECK-LABEL: func.func @replicated_forbids
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}, {}], replicated={"a"}>}
// CHECK: %[[R:.*]] = polymesh.reshard %arg0 <@m, [{"a"}, {}]>
func.func @replicated_forbids(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}, {}], replicated={"a"}>},
                              %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<16x16xf32> {
  %0 = arith.addf %x, %y : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// An open dimension grows only by appending: [{"a", ?}] becomes
// [{"a", "b", ?}], through a constraint back into the argument.
// CHECK-LABEL: func.func @open_prefix
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", "b", ?}, {}]>}
// CHECK-NOT: polymesh.reshard
// CHECK: polymesh.sharding_constraint %arg0 <@m, [{"a", "b", ?}, {?}]>
func.func @open_prefix(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", ?}, {}]>},
                       %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", "b"}, {}]>}) -> tensor<16x16xf32> {
  %c = polymesh.sharding_constraint %x <@m, [{"a", ?}, {?}]> : tensor<16x16xf32>
  %0 = arith.addf %c, %y : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// An open dimension is not rewritten into a different prefix.
// CHECK-LABEL: func.func @open_not_prefix
// CHECK: polymesh.reshard %arg0 <@m, [{"b"}, {}]>
func.func @open_not_prefix(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", ?}, {}]>},
                           %y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>}) -> tensor<16x16xf32> {
  %0 = arith.addf %x, %y : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}

// A declared result's open dimensions take the axes the returned value has
// there, as an argument's do (and as in Shardy): no reshard at the return.
// CHECK-LABEL: func.func @open_result
// CHECK-SAME: -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", ?}, {"b", ?}]>})
// CHECK-NOT: polymesh.reshard
// CHECK: return
func.func @open_result(%y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{?}, {"b", ?}]>}) {
  %z = arith.negf %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}

// A closed declared dimension keeps its axes: the result is resharded.
// CHECK-LABEL: func.func @closed_result
// CHECK-SAME: -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b", ?}]>})
// CHECK: polymesh.reshard %{{.*}} <@m, [{}, {"b", ?}]>
// CHECK-NEXT: return
func.func @closed_result(%y: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b", ?}]>}) {
  %z = arith.negf %y : tensor<16x16xf32>
  return %z : tensor<16x16xf32>
}
