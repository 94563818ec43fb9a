// Found by utils/gen-programs.py --seed 1 (modules 1, 2, 3): every module with
// a maximal sharding on a tensor of rank > 0 is refused before anything runs.
// DESIGN.md: "Also accepted, as in Shardy: a *maximal* sharding
// `#polymesh.sharding<@dev3, []>` on a mesh with no axes and one device id,
// for a tensor of any rank". The verifier says: "sharding has 0 dimension
// shardings but the tensor type 'tensor<16x7xi8>' has rank 2" (arguments,
// polymesh.reshard and polymesh.sharding_constraint alike). A refusal of a
// valid program (or the contract should change).
// RUN: polymesh-run %s --verify | FileCheck %s
// CHECK: @f: {{.*}}, PASS
// CHECK: 1 passed, 0 failed

polymesh.mesh @m0 = <["x"=2]>
polymesh.mesh @dev3 = <[], device_ids=[3]>

func.func @f(%v0: tensor<4x2xf32> {polymesh.sharding = #polymesh.sharding<@dev3, []>}) -> (tensor<4x2xf32> {polymesh.sharding = #polymesh.sharding<@m0, [{"x"}, {}]>}) {
  %v1 = polymesh.reshard %v0 <@dev3, []> : tensor<4x2xf32>
  return %v1 : tensor<4x2xf32>
}
