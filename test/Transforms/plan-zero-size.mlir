// RUN: polymesh-opt %s --polymesh-plan | FileCheck %s
polymesh.mesh @x4 = <["x"=4]>
// CHECK-LABEL: func.func @zero_elements
// CHECK: polymesh.transfer %arg0 <@x4, [{"x"}, {}]> -> <@x4, [{}, {"x"}]> steps [] : tensor<0x4xf32>
func.func @zero_elements(%x: tensor<0x4xf32> {polymesh.sharding = #polymesh.sharding<@x4, [{"x"}, {}]>}) -> tensor<0x4xf32> {
  %0 = polymesh.reshard %x <@x4, [{}, {"x"}]> : tensor<0x4xf32>
  return %0 : tensor<0x4xf32>
}
