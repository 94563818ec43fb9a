// RUN: polymesh-opt %s --polymesh-pipeline=target=cuda -split-input-file -verify-diagnostics
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu -split-input-file -o /dev/null

// A CUDA host function takes and returns device pointers to tiles, so every
// argument and result must be a statically shaped tensor of integers or
// floats. Anything else is refused at the function (it crashed, issue 13
// item 7). The CPU target lowers the same inputs: scalars by value, memrefs
// as descriptors (upstream's conventions).

polymesh.mesh @m = <["a"=2]>

// expected-error @+1 {{argument #0 has type 'f32': the cuda target passes only statically shaped tensors of integers or floats (as device pointers)}}
func.func @scalar(%s: f32, %t: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> (f32, tensor<8xf32>) {
  return %s, %t : f32, tensor<8xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// expected-error @+1 {{argument #1 has type 'index'}}
func.func @index(%t: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}, %i: index) -> (tensor<8xf32>, index) {
  return %t, %i : tensor<8xf32>, index
}

// -----

polymesh.mesh @m = <["a"=2]>

// A scalar result alone is refused too, even when no argument is one.
// expected-error @+1 {{result #1 has type 'i64'}}
func.func @i64_result(%t: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> (tensor<8xf32>, i64) {
  %c = arith.constant 7 : i64
  return %t, %c : tensor<8xf32>, i64
}

// -----

polymesh.mesh @m = <["a"=2]>

// expected-error @+1 {{argument #0 has type 'memref<4xf32>'}}
func.func @memref(%s: memref<4xf32>, %t: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> (memref<4xf32>, tensor<8xf32>) {
  return %s, %t : memref<4xf32>, tensor<8xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// expected-error @+1 {{argument #0 has type 'vector<4xf32>'}}
func.func @vector(%s: vector<4xf32>, %t: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> (tensor<8xf32>, vector<4xf32>) {
  return %t, %s : tensor<8xf32>, vector<4xf32>
}

// -----

polymesh.mesh @m = <["a"=2]>

// A tensor of elements without a fixed size in bytes has no tile layout (the
// diagnostic names the device's tile type).
// expected-error @+1 {{argument #0 has type 'tensor<4xindex>'}}
func.func @index_tensor(%t: tensor<8xindex> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> (tensor<8xindex>, tensor<8xindex>) {
  return %t, %t : tensor<8xindex>, tensor<8xindex>
}

// -----

polymesh.mesh @m = <["a"=2]>

// expected-error @+1 {{argument #0 has type 'tensor<*xf32>'}}
func.func @unranked(%s: tensor<*xf32>, %t: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> (tensor<*xf32>, tensor<8xf32>) {
  return %s, %t : tensor<*xf32>, tensor<8xf32>
}
