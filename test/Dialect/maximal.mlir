// RUN: polymesh-opt %s | polymesh-opt | FileCheck %s
// RUN: polymesh-opt %s --polymesh-propagate | FileCheck %s --check-prefix=PROP

// A maximal sharding, as Shardy writes it: `[]` on a mesh without axes puts
// the whole tensor, of any rank, on that mesh's one device. It prints back
// as written, and propagation keeps the user's spelling on the annotations
// it was given.

polymesh.mesh @dev3 = <[], device_ids=[3]>
polymesh.mesh @grid = <["x"=2, "y"=2], device_ids=[6, 4, 2, 0]>

// CHECK-LABEL: func.func @maximal_any_rank
// CHECK-SAME: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@dev3, []>}
// CHECK-SAME: tensor<4x4x2xi8> {polymesh.sharding = #polymesh.sharding<@dev3, []>}
// CHECK-SAME: tensor<f32> {polymesh.sharding = #polymesh.sharding<@dev3, []>}
// CHECK: polymesh.reshard %{{.*}} <@dev3, []> : tensor<16x8xf32>
// CHECK: polymesh.sharding_constraint %{{.*}} <@dev3, []> : tensor<16x8xf32>
// PROP-LABEL: func.func @maximal_any_rank
// PROP-SAME: {polymesh.sharding = #polymesh.sharding<@dev3, []>}
// PROP-SAME: {polymesh.sharding = #polymesh.sharding<@dev3, []>}
// PROP-SAME: {polymesh.sharding = #polymesh.sharding<@dev3, []>}
// PROP-SAME: -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@dev3, []>})
// PROP: arith.negf %{{.*}} {polymesh.sharding = #polymesh.sharding<@dev3, []>}
func.func @maximal_any_rank(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@dev3, []>},
                            %b: tensor<4x4x2xi8> {polymesh.sharding = #polymesh.sharding<@dev3, []>},
                            %c: tensor<f32> {polymesh.sharding = #polymesh.sharding<@dev3, []>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@dev3, []>}) {
  %0 = arith.negf %a {polymesh.sharding = #polymesh.sharding<@dev3, []>} : tensor<16x8xf32>
  %1 = polymesh.reshard %0 <@dev3, []> : tensor<16x8xf32>
  %2 = polymesh.sharding_constraint %1 <@dev3, []> : tensor<16x8xf32>
  return %2 : tensor<16x8xf32>
}
