// RUN: polymesh-opt %s --polymesh-propagate -verify-diagnostics -o /dev/null

// Specializing calls copies a callee's body into every site: a chain in
// which each function calls the next twice doubles at every level, so 21
// levels would copy millions of ops. Refused up front, before anything is
// copied, at the first function past the budget (docs/limits.md).

polymesh.mesh @m = <["a"=2]>

func.func @f0(%x: tensor<4xf32>) -> tensor<4xf32> attributes {polymesh.ambient_mesh = @m} {
  %0 = func.call @f1(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f1(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f1(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f2(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f2(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// expected-error @+1 {{specializing its calls for propagation would copy 1310716 ops into @f2, more than 1048576 (docs/limits.md)}}
func.func private @f2(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f3(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f3(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f3(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f4(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f4(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f4(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f5(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f5(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f5(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f6(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f6(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f6(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f7(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f7(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f7(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f8(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f8(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f8(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f9(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f9(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f9(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f10(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f10(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f10(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f11(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f11(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f11(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f12(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f12(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f12(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f13(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f13(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f13(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f14(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f14(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f14(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f15(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f15(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f15(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f16(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f16(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f16(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f17(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f17(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f17(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f18(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f18(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f18(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f19(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f19(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f19(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f20(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f20(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f20(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.negf %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
