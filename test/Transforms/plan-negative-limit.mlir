// RUN: polymesh-opt %s --polymesh-plan=memory-limit-bytes=-1 -verify-diagnostics
// expected-error @+1 {{memory-limit-bytes must not be negative, got -1}}
module {
  polymesh.mesh @m = <["a"=2]>
  func.func @f(%x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}]>}) -> tensor<8xf32> {
    %0 = polymesh.reshard %x <@m, [{}]> : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
