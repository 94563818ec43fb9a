// RUN: timeout 120 polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition | FileCheck %s

// Partitioning a program over 2^20 devices is a bounded run (0.4 s here):
// tiles are computed in one pass per layout (TensorLayout::allBoxes) and
// kept in flat arrays, and every device lands in one class because every
// tile has the same extents. This input, from test/limits/overflow.mlir,
// was a slow unit for the pipeline fuzzer (11 s under ASan) before.

polymesh.mesh @m = <["a"=1024, "b"=1024]>

// CHECK-LABEL: func.func @most_tiles__part0(
// CHECK-SAME: tensor<1xf32>, %{{.*}}: tensor<4398046511104xf32>)
// CHECK-SAME: polymesh.devices = array<i64: 0, 1, 2, 3,
// CHECK-NOT: func.func @most_tiles__part1
func.func @most_tiles(%x: tensor<1048576xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a", "b"}]>},
                      %y: tensor<4611686018427387904xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b", "a"}]>}) {
  return
}
