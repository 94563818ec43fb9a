// Found by utils/gen-programs.py --seed 11 --gathers (module 0, compute);
// shrunk. Failure: --polymesh-partition refused a gather whose table is
// placed [{"a"}, {}] on a mesh with "a"=1: whole on every device, but the
// check of tensors read from above compared the sharding's text, not the
// tiles. It now compares the tiles (and so does the check of control-flow
// decisions).
// RUN: polymesh-run %s --verify | FileCheck %s
// CHECK: @f0_7: {{.*}}, PASS
// CHECK: 1 passed, 0 failed
polymesh.mesh @m0 = <["a"=1]>
polymesh.mesh @m2 = <[]>

func.func @f0_7(%v0: tensor<1x9xi32> {polymesh.sharding = #polymesh.sharding<@m0, [{"a"}, {}]>}, %v1: tensor<1x1xf32>, %v2: tensor<1x1xf32>) -> (tensor<1x1xf32>) attributes {polymesh.ambient_mesh = @m0} {
  %v3 = arith.ori %v0, %v0 : tensor<1x9xi32>
  %t4_e = tensor.empty() : tensor<1x9x9xi32>
  %v4 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v3 : tensor<1x9xi32>) outs(%t4_e : tensor<1x9x9xi32>) {
  ^bb0(%id: i32, %o: i32):
    %row = arith.index_cast %id : i32 to index
    %c0 = arith.constant 0 : index
    %last = arith.constant 0 : index
    %lo = arith.maxsi %row, %c0 : index
    %at = arith.minsi %lo, %last : index
    %j1 = linalg.index 2 : index
    %x = tensor.extract %v0[%at, %j1] : tensor<1x9xi32>
    linalg.yield %x : i32
  } -> tensor<1x9x9xi32>
  %v5 = polymesh.reshard %v4 <@m2, [{}, {}, {}]> : tensor<1x9x9xi32>
  %v6 = tensor.expand_shape %v5 [[0], [1, 2], [3]] output_shape [1, 3, 3, 9] : tensor<1x9x9xi32> into tensor<1x3x3x9xi32>
  %v7 = arith.minimumf %v1, %v2 : tensor<1x1xf32>
  return %v7 : tensor<1x1xf32>
}
