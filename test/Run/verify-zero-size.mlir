// RUN: polymesh-run %s --verify 2>/dev/null | FileCheck %s
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan 2>/dev/null | FileCheck %s --check-prefix=PLAN
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOWER --allow-empty

// Tensors with a zero extent anywhere (issue 14, item 7): arguments,
// results, reshards, constants and the operands of a concat (what
// `lax.scan(..., unroll=True)` leaves). They propagate, plan to nothing
// moved, partition, lower and verify. Before, a zero-size concat operand
// after the last element broke the reference lowering: upstream's
// bufferization put it in a subview at the end of the dimension ("offset 0
// is out-of-bounds: 4 >= 4").

// LOWER-NOT: error

polymesh.mesh @m = <["a"=2, "b"=2]>
polymesh.mesh @n = <["x"=4], device_ids=[7, 5, 3, 1]>

// A zero-size operand first: the concatenated dim is replicated (the 6x4
// operand is gathered; the empty one moves nothing).
// CHECK-LABEL: @concat_first: 1 leaf, 192 bytes moved, {{.*}} on 4 devices, PASS
func.func @concat_first(%arg0: tensor<0x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                        %arg1: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<6x4xf32> {
  %0 = tensor.concat dim(0) %arg0, %arg1 : (tensor<0x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>
  return %0 : tensor<6x4xf32>
}

// Zero-size operands last and in the middle, along dims 0 and 1.
// CHECK-LABEL: @concat_last: 1 leaf, 0 bytes moved, {{.*}} on 4 devices, PASS
func.func @concat_last(%arg0: tensor<4xf32>, %arg1: tensor<0xf32>) -> tensor<4xf32>
    attributes {polymesh.ambient_mesh = @m} {
  %0 = tensor.concat dim(0) %arg0, %arg1 : (tensor<4xf32>, tensor<0xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: @concat_middle: 1 leaf, 0 bytes moved, {{.*}} on 4 devices, PASS
func.func @concat_middle(%arg0: tensor<3x2xf32>, %arg1: tensor<3x0xf32>, %arg2: tensor<3x5xf32>,
                         %arg3: tensor<3x0xf32>) -> tensor<3x7xf32>
    attributes {polymesh.ambient_mesh = @m} {
  %0 = tensor.concat dim(1) %arg0, %arg1, %arg2, %arg3 : (tensor<3x2xf32>, tensor<3x0xf32>, tensor<3x5xf32>, tensor<3x0xf32>) -> tensor<3x7xf32>
  return %0 : tensor<3x7xf32>
}

// Nothing but empty operands: an empty result.
// CHECK-LABEL: @concat_empty: 1 leaf, 0 bytes moved, {{.*}} on 4 devices, PASS
func.func @concat_empty(%arg0: tensor<0x4xf32>, %arg1: tensor<0x4xf32>) -> tensor<0x4xf32>
    attributes {polymesh.ambient_mesh = @m} {
  %0 = tensor.concat dim(0) %arg0, %arg1 : (tensor<0x4xf32>, tensor<0x4xf32>) -> tensor<0x4xf32>
  return %0 : tensor<0x4xf32>
}

// A reshard of an empty tensor onto another mesh with odd device ids: a
// plan with nothing to send.
// CHECK-LABEL: @reshard: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// PLAN-LABEL: func.func @reshard
// PLAN: polymesh.transfer %arg0 <@m, [{"a"}, {"b"}]> -> <@n, [{}, {"x"}]> steps [] : tensor<0x6xf32>
func.func @reshard(%arg0: tensor<0x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<0x6xf32> {
  %0 = polymesh.reshard %arg0 <@n, [{}, {"x"}]> : tensor<0x6xf32>
  return %0 : tensor<0x6xf32>
}

// An empty constant (`dense<>`) added to a sharded empty argument.
// CHECK-LABEL: @constant: 1 leaf, 0 bytes moved, {{.*}} on 4 devices, PASS
func.func @constant(%arg0: tensor<4x0xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}) -> tensor<4x0xf32> {
  %c = arith.constant dense<> : tensor<4x0xf32>
  %0 = arith.addf %arg0, %c : tensor<4x0xf32>
  return %0 : tensor<4x0xf32>
}

// Elementwise on an empty tensor split over both axes, then resharded.
// CHECK-LABEL: @negf: 1 leaf, 0 bytes moved, {{.*}} on 6 devices, PASS
// PLAN-LABEL: func.func @negf
// PLAN: polymesh.transfer %{{.*}} -> <@n, [{"x"}, {}]> steps [] : tensor<0x8xf32>
func.func @negf(%arg0: tensor<0x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"a", "b"}]>}) -> tensor<0x8xf32> {
  %0 = arith.negf %arg0 : tensor<0x8xf32>
  %1 = polymesh.reshard %0 <@n, [{"x"}, {}]> : tensor<0x8xf32>
  return %1 : tensor<0x8xf32>
}

// CHECK: 7 passed, 0 failed
