// Found by utils/gen-programs.py --seed 12 --gathers (module 30, compute);
// shrunk. Failure: --polymesh-partition refused "tensors inside regions are
// not supported": propagation cloned the constant %v3, used both outside and
// inside the gather's linalg body, into the body (a copy per use, each
// before its user). Copies now go before the outermost op with regions
// that is not control flow, and the body reads the copy from above.
// RUN: polymesh-run %s --verify | FileCheck %s
// CHECK: @f30_7: {{.*}}, PASS
// CHECK: 1 passed, 0 failed
polymesh.mesh @m0 = <[], device_ids=[0]>
polymesh.mesh @m4 = <[]>

func.func @f30_7(%v0: tensor<1x1xi32>, %v1: tensor<1xf32>, %v2: tensor<1x1xi32>) -> (tensor<1xf32>, tensor<1x1xi32>, tensor<1x1xi32>) attributes {polymesh.ambient_mesh = @m4} {
  %v3 = arith.constant dense<1.0> : tensor<1xf32>
  %v4 = arith.minimumf %v1, %v3 : tensor<1xf32>
  %t5_e = tensor.empty() : tensor<1x1xi32>
  %v5 = linalg.transpose ins(%v0 : tensor<1x1xi32>) outs(%t5_e : tensor<1x1xi32>) permutation = [1, 0]
  %v6 = polymesh.sharding_constraint %v5 <@m4, [{}, {}]> : tensor<1x1xi32>
  %v7 = polymesh.reshard %v1 <@m0, [{}]> : tensor<1xf32>
  %t8_e = tensor.empty() : tensor<1x1xf32>
  %v8 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%v6 : tensor<1x1xi32>) outs(%t8_e : tensor<1x1xf32>) {
  ^bb0(%id: i32, %o: f32):
    %row = arith.index_cast %id : i32 to index
    %c0 = arith.constant 0 : index
    %last = arith.constant 0 : index
    %lo = arith.maxsi %row, %c0 : index
    %at = arith.minsi %lo, %last : index
    %x = tensor.extract %v3[%at] : tensor<1xf32>
    linalg.yield %x : f32
  } -> tensor<1x1xf32>
  %t9_z = arith.constant 0 : i32
  %t9_e = tensor.empty() : tensor<1x1xi32>
  %t9_f = linalg.fill ins(%t9_z : i32) outs(%t9_e : tensor<1x1xi32>) -> tensor<1x1xi32>
  %v9 = linalg.matmul ins(%v5, %v2 : tensor<1x1xi32>, tensor<1x1xi32>) outs(%t9_f : tensor<1x1xi32>) -> tensor<1x1xi32>
  return %v1, %v5, %v9 : tensor<1xf32>, tensor<1x1xi32>, tensor<1x1xi32>
}
