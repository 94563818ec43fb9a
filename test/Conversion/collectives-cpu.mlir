// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu -split-input-file | FileCheck %s --enable-var-scope

// Steps of a collective's shape call the runtime's collective, in place, over
// the members' table; the sums use the element type's POLYMESH_RT_* code
// (f32 0, bf16 3, i32 4) and POLYMESH_RT_SUM (0). Steps that do not have the
// shape (unequal pieces) or an element type the runtime cannot sum (i16)
// stay grouped send/recv.

// An all-gather of equal row blocks: one polymesh_rt_all_gather.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-DAG: llvm.mlir.global private constant @__polymesh_gather__plan0_members(dense<[0, 1, 2, 3]> : tensor<4xi64>)
// CHECK-LABEL: llvm.func @gather__part0(
// CHECK: llvm.call @polymesh_rt_staging
// CHECK: llvm.call @polymesh_rt_all_gather(
// CHECK-NOT: llvm.call @polymesh_rt_send
func.func @gather(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %a : tensor<16x8xf32>
}

// -----

// 10 rows over 4 devices: blocks of 3, 3, 3 and 1 row are no all-gather.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: llvm.func @gather_uneven__part0(
// CHECK-NOT: llvm.call @polymesh_rt_all_gather
// CHECK: llvm.call @polymesh_rt_group_start
// CHECK: llvm.call @polymesh_rt_send
// CHECK: llvm.call @polymesh_rt_recv
// CHECK: llvm.call @polymesh_rt_group_end
// CHECK-NOT: llvm.call @polymesh_rt_all_gather
func.func @gather_uneven(%a: tensor<10x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<10x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %a : tensor<10x4xf32>
}

// -----

// Partial sums of a matmul over a sharded contraction, f32: both phases of
// the all-reduce are one polymesh_rt_all_reduce (dtype f32 = 0, sum = 0) on
// a copy of the source tile; no element-wise additions are generated.
polymesh.mesh @m = <["y"=2]>

// CHECK-LABEL: llvm.func @matmul_sum__part0(
// CHECK-DAG: %[[ZERO:[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-DAG: llvm.call @malloc
// CHECK: llvm.call @polymesh_rt_all_reduce(%{{.*}}, %[[ZERO]], %[[ZERO]])
// CHECK-NOT: llvm.fadd
// CHECK-NOT: llvm.call @polymesh_rt_send
// CHECK: llvm.return
func.func @matmul_sum(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"y"}]>},
                      %b: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"y"}, {}]>})
    -> (tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  %e = tensor.empty() : tensor<4x4xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %r = linalg.matmul ins(%a, %b : tensor<4x6xf32>, tensor<6x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}

// -----

// A bf16 all-reduce of partials over 4 devices: dtype POLYMESH_RT_BF16 = 3.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-DAG: llvm.mlir.global private constant @__polymesh_sum_bf16__plan0_members(dense<[0, 1, 2, 3]> : tensor<4xi64>)
// CHECK-LABEL: llvm.func @sum_bf16__part0(
// CHECK-DAG: %[[BF16:[0-9]+]] = llvm.mlir.constant(3 : i32) : i32
// CHECK-DAG: %[[SUM:[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
// CHECK: llvm.call @polymesh_rt_all_reduce(%{{.*}}, %[[BF16]], %[[SUM]])
// CHECK-NOT: llvm.call @polymesh_rt_send
// CHECK: llvm.return
func.func @sum_bf16(%p: tensor<8x4xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<8x4xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %p : tensor<8x4xbf16>
}

// -----

// An i32 reduce-scatter into equal row blocks: dtype POLYMESH_RT_I32 = 4.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: llvm.func @scatter_i32__part0(
// CHECK-DAG: %[[I32:[0-9]+]] = llvm.mlir.constant(4 : i32) : i32
// CHECK-DAG: %[[SUM:[0-9]+]] = llvm.mlir.constant(0 : i32) : i32
// CHECK: llvm.call @polymesh_rt_reduce_scatter(%{{.*}}, %[[I32]], %[[SUM]])
// CHECK-NOT: llvm.add {{.*}} : i32
// CHECK-NOT: llvm.call @polymesh_rt_send
// CHECK: llvm.return
func.func @scatter_i32(%p: tensor<16x8xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<16x8xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
  return %p : tensor<16x8xi32>
}

// -----

// 6 rows over 4 devices: pieces of 2, 2, 1 and 1 row are no reduce-scatter;
// send/recv, and the receivers add element by element.
polymesh.mesh @m4 = <["x"=4]>

// CHECK-LABEL: llvm.func @scatter_uneven__part0(
// CHECK-NOT: llvm.call @polymesh_rt_reduce_scatter
// CHECK: llvm.call @polymesh_rt_send
// CHECK: llvm.fadd
// CHECK-NOT: llvm.call @polymesh_rt_reduce_scatter
// CHECK: llvm.return
func.func @scatter_uneven(%p: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
  return %p : tensor<6x4xf32>
}

// -----

// i16 has no runtime (or NCCL) sum: the all-reduce stays two send/recv
// phases with generated integer additions.
polymesh.mesh @m = <["y"=2]>

// CHECK-LABEL: llvm.func @sum_i16__part0(
// CHECK-NOT: llvm.call @polymesh_rt_all_reduce
// CHECK: llvm.call @polymesh_rt_send
// CHECK: llvm.add {{.*}} : i16
// CHECK: llvm.call @polymesh_rt_send
// CHECK-NOT: llvm.call @polymesh_rt_all_reduce
// CHECK: llvm.return
func.func @sum_i16(%p: tensor<4x4xi16> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}], unreduced={"y"}>})
    -> (tensor<4x4xi16> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  return %p : tensor<4x4xi16>
}

// -----

// Two collectives in one function share one stack buffer for their groups'
// device ids, in the entry block, grown to the larger group: the all-gather
// over "b" (groups of 2) is lowered first, the one over "x" (4) then grows
// the buffer to 4 entries. Each members table holds its group's shape
// once (ids relative to the first member).
polymesh.mesh @m4 = <["x"=4]>
polymesh.mesh @m22 = <["a"=2, "b"=2]>

// CHECK-DAG: llvm.mlir.global private constant @__polymesh_two_gathers__plan0_members(dense<[0, 1]> : tensor<2xi64>)
// CHECK-DAG: llvm.mlir.global private constant @__polymesh_two_gathers__plan1_members(dense<[0, 1, 2, 3]> : tensor<4xi64>)
// CHECK-LABEL: llvm.func @two_gathers__part0(
// CHECK: %[[SIZE:[0-9]+]] = llvm.mlir.constant(4 : i64) : i64
// CHECK-NEXT: %[[GROUP:[0-9]+]] = llvm.alloca %[[SIZE]] x i64
// CHECK-NOT: llvm.alloca
// CHECK: llvm.call @polymesh_rt_all_gather(%{{.*}}, %{{.*}}, %[[GROUP]],
// CHECK-NOT: llvm.alloca
// CHECK: llvm.call @polymesh_rt_all_gather(%{{.*}}, %{{.*}}, %[[GROUP]],
// CHECK: llvm.return
func.func @two_gathers(%b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"a"}, {"b"}]>},
                       %a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"a"}, {}]>},
        tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %b, %a : tensor<16x8xf32>, tensor<16x8xf32>
}
