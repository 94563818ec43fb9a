// Found by utils/gen-programs.py --seed 7 (modules 5 and 7, compute); shrunk.
// Failure: opt and loopback: crash: exit -11 in mlir::BaseMemRefType::hasRank
// under mlir::bufferization::promoteBufferResultsToOutParams
// (--polymesh-lower-to-cpu). `maximumf %v1, %v1` folds to %v1, so the
// partitioned function returns the received value %v1 twice; the same crash
// comes from `minsi %g, %g` on a tensor.generate result. `negf` or
// `addf %v1, %v1` instead pass, and so does `return %v1, %v1` written out.
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu -o /dev/null
// RUN: polymesh-run %s --verify | FileCheck %s
// CHECK: @f: {{.*}}, PASS
// CHECK: @select_same: {{.*}}, PASS
// CHECK: 2 passed, 0 failed

polymesh.mesh @m0 = <["x"=8]>
polymesh.mesh @m3 = <["dp"=2], device_ids=[3, 4]>

func.func @f(%v0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {polymesh.ambient_mesh = @m3} {
  %v1 = polymesh.reshard %v0 <@m0, [{}]> : tensor<4xf32>
  %v2 = arith.maximumf %v1, %v1 : tensor<4xf32>
  return %v1, %v2 : tensor<4xf32>, tensor<4xf32>
}

// The same crash, found by the CI batch (seed 1, module 3, --avoid-known)
// and shrunk: `select %c, %x, %x` folds to %x, which is returned as well.
func.func @select_same(%v0: tensor<1x1xf32>, %v1: tensor<1x1xf32>, %v2: tensor<1x1xi1>) -> (tensor<1x1xf32>, tensor<1x1xf32>) attributes {polymesh.ambient_mesh = @m3} {
  %v3 = arith.minimumf %v0, %v1 : tensor<1x1xf32>
  %v4 = arith.select %v2, %v3, %v3 : tensor<1x1xi1>, tensor<1x1xf32>
  return %v3, %v4 : tensor<1x1xf32>, tensor<1x1xf32>
}
