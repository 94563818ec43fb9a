// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: %if nccl %{ polymesh-run %s --verify --backend=nccl --simulate-gpus | FileCheck %s %}
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cpu | FileCheck %s --check-prefix=TABLES
// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-cpu | FileCheck %s --check-prefix=NO-DIGITS

// A collective group whose positions are no iota pattern: the mesh @a
// holds devices 0, 1 and 3, and device 2 (of @b) sits between them among
// the program's devices, so the sum's group is at positions 0, 1 and 3.
// The rank cannot be read off the position: each member's range row
// stores it (columns 8-11: members end, constant rank, no rank digits),
// so the three members have a block each. Both sums go from the source
// tile into the result tile; every device's tiles must equal the
// reference bit for bit, on the CPU and on simulated GPUs.
// TABLES-DAG: memref.global "private" constant @__polymesh_irregular__plan0_members : memref<3xi64> = dense<[0, 1, 3]>
// TABLES-DAG: memref.global "private" constant @__polymesh_irregular__plan0_blocks : memref<4xi64> = dense<[0, 1, 2, 3]>
// TABLES-DAG: memref.global "private" constant @__polymesh_irregular__plan0_ranges : memref<8x12xi64> = dense<{{\[}}[0, 0, 0, 1, 0, 0, 0, 0, 3, 0, 0, 0], [0, 0, 1, 2, 0, 0, 0, 0, 3, 1, 0, 0], [0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 2, 3, 0, 0, 0, 0, 3, 2, 0, 0],
// NO-DIGITS-NOT: @__polymesh_irregular__plan{{[0-9]}}_ranks
// CHECK: @irregular: 3 leaves, 1152 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// CHECK-NEXT: 1 passed, 0 failed
polymesh.mesh @a = <["x"=3], device_ids=[0, 1, 3]>
polymesh.mesh @b = <["y"=1], device_ids=[2]>

func.func @irregular(%g: tensor<6x8xi32> {polymesh.sharding = #polymesh.sharding<@a, [{}, {}], unreduced={"x"}>},
                     %h: tensor<4xi32> {polymesh.sharding = #polymesh.sharding<@b, [{}]>})
    -> (tensor<6x8xi32> {polymesh.sharding = #polymesh.sharding<@a, [{}, {}]>},
        tensor<6x8xi32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>},
        tensor<4xi32> {polymesh.sharding = #polymesh.sharding<@b, [{}]>}) {
  return %g, %g, %h : tensor<6x8xi32>, tensor<6x8xi32>, tensor<4xi32>
}
