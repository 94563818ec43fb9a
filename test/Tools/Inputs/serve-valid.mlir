polymesh.mesh @m = <["x"=4]>
func.func @f(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
  %b = arith.negf %a : tensor<8xf32>
  return %b : tensor<8xf32>
}
