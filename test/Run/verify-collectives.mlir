// RUN: polymesh-run %s --verify | FileCheck %s --check-prefixes=CHECK,CPU
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu | FileCheck %s --check-prefix=LOWERED
// With the NCCL backend, the CUDA-lowered code (ncclAllGather, ncclAllReduce,
// ncclReduceScatter) on simulated GPUs; the matmul does not lower to CUDA.
// RUN: %if nccl %{ not polymesh-run %s --verify --backend=nccl --simulate-gpus 2>/dev/null \
// RUN:   | FileCheck %s --check-prefixes=CHECK,CUDA %}

// --verify on plans whose steps the CPU lowering runs as the runtime's
// collectives (polymesh_rt_all_gather, all_reduce, reduce_scatter, in place
// over the members), and on steps of the same kinds that fall back to
// grouped send/recv: unequal pieces, and an element type the runtime cannot
// sum (i1). Every device's tile must equal the reference bit for bit; the
// inputs are small integers, so sums are exact whatever their order.

polymesh.mesh @m4 = <["x"=4]>
polymesh.mesh @m22 = <["x"=2, "y"=2]>

// Equal row blocks gathered: one all-gather, 3 * 4 * 4 * 8 * 4 bytes.
// CHECK:      @gather_f32: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @gather_f32__part0(
// LOWERED:       llvm.call @polymesh_rt_all_gather(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.return
func.func @gather_f32(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %a : tensor<16x8xf32>
}

// Column blocks of bf16 gathered within each row of the 2x2 mesh: strided
// boxes packed at rank * chunk, one all-gather per group.
// CHECK-NEXT: @gather_bf16_strided: 1 leaf, 96 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @gather_bf16_strided__part0(
// LOWERED:       llvm.call @polymesh_rt_all_gather(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.return
func.func @gather_bf16_strided(%a: tensor<6x8xbf16> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>})
    -> (tensor<6x8xbf16> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}]>}) {
  return %a : tensor<6x8xbf16>
}

// 10 rows over 4 devices (3, 3, 3, 1): unequal, send/recv.
// CHECK-NEXT: @gather_uneven: 1 leaf, 480 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @gather_uneven__part0(
// LOWERED-NOT:   llvm.call @polymesh_rt_all_gather
// LOWERED:       llvm.call @polymesh_rt_send
// LOWERED-NOT:   llvm.call @polymesh_rt_all_gather
// LOWERED:       llvm.return
func.func @gather_uneven(%a: tensor<10x4xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<10x4xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %a : tensor<10x4xi32>
}

// Partial sums all-reduced over 4 devices in f32, bf16 and i32 (uneven
// extents: the pieces are 2, 2, 1 and 1 rows; an all-reduce needs no equal
// pieces).
// CHECK-NEXT: @all_reduce_f32: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @all_reduce_f32__part0(
// LOWERED:       llvm.call @polymesh_rt_all_reduce(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.return
func.func @all_reduce_f32(%p: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %p : tensor<8x8xf32>
}

// CHECK-NEXT: @all_reduce_bf16: 1 leaf, 360 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @all_reduce_bf16__part0(
// LOWERED:       llvm.call @polymesh_rt_all_reduce(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.return
func.func @all_reduce_bf16(%p: tensor<6x5xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<6x5xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %p : tensor<6x5xbf16>
}

// Reduction groups of two (unreduced y) inside the 2x2 mesh, i32.
// CHECK-NEXT: @all_reduce_i32: 1 leaf, 384 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @all_reduce_i32__part0(
// LOWERED:       llvm.call @polymesh_rt_all_reduce(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.return
func.func @all_reduce_i32(%p: tensor<8x6xi32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>})
    -> (tensor<8x6xi32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}]>}) {
  return %p : tensor<8x6xi32>
}

// A matmul over a sharded contraction: the partial products are
// all-reduced in f32.
// CUDA-NEXT:  @matmul: 1 leaf, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, FAIL: --polymesh-lower-to-cuda failed: {{.*}}cannot be lowered to CUDA
// CPU-NEXT:   @matmul: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @matmul__part0(
// LOWERED:       llvm.call @polymesh_rt_all_reduce(
// LOWERED:       llvm.return
func.func @matmul(%a: tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>},
                  %b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  %e = tensor.empty() : tensor<8x8xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
  %r = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// Partial sums reduce-scattered into equal row blocks, f32, bf16 and i32.
// CHECK-NEXT: @reduce_scatter_f32: 1 leaf, 1536 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @reduce_scatter_f32__part0(
// LOWERED:       llvm.call @polymesh_rt_reduce_scatter(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.return
func.func @reduce_scatter_f32(%p: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
  return %p : tensor<16x8xf32>
}

// Column pieces: each member packs four strided boxes.
// CHECK-NEXT: @reduce_scatter_bf16: 1 leaf, 288 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @reduce_scatter_bf16__part0(
// LOWERED:       llvm.call @polymesh_rt_reduce_scatter(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.return
func.func @reduce_scatter_bf16(%p: tensor<6x8xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<6x8xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>}) {
  return %p : tensor<6x8xbf16>
}

// CHECK-NEXT: @reduce_scatter_i32: 1 leaf, 256 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @reduce_scatter_i32__part0(
// LOWERED:       llvm.call @polymesh_rt_reduce_scatter(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.return
func.func @reduce_scatter_i32(%p: tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@m22, [{}, {}], unreduced={"x"}>})
    -> (tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}]>}) {
  return %p : tensor<8x4xi32>
}

// 6 rows over 4 devices: pieces of 2, 2, 1 and 1 rows, send/recv with
// generated additions.
// CHECK-NEXT: @reduce_scatter_uneven: 1 leaf, 288 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @reduce_scatter_uneven__part0(
// LOWERED-NOT:   llvm.call @polymesh_rt_reduce_scatter
// LOWERED:       llvm.call @polymesh_rt_send
// LOWERED:       llvm.fadd
// LOWERED-NOT:   llvm.call @polymesh_rt_reduce_scatter
// LOWERED:       llvm.return
func.func @reduce_scatter_uneven(%p: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
  return %p : tensor<6x4xf32>
}

// Two all-gathers in one function: over "y" of @m22, two disjoint groups of
// 2 side by side in one segment, then over "x" of @m4, one group of 4. Each
// device writes its own group's ids (from the relative members table) into
// one stack buffer of 4 entries, shared by both.
// CHECK-NEXT: @two_gathers: 2 leaves, 2048 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// LOWERED-LABEL: llvm.func @two_gathers__part0(
// LOWERED:       llvm.alloca
// LOWERED-NOT:   llvm.alloca
// LOWERED:       llvm.call @polymesh_rt_all_gather
// LOWERED-NOT:   llvm.alloca
// LOWERED:       llvm.call @polymesh_rt_all_gather
// LOWERED:       llvm.return
func.func @two_gathers(%b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>},
                       %a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}]>},
        tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %b, %a : tensor<16x8xf32>, tensor<16x8xf32>
}

// i1: no collective sum (the plan's sum of booleans is an or), so the
// all-reduce stays two send/recv phases with generated ors.
// CHECK-NEXT: @all_reduce_i1: 1 leaf, 144 bytes moved, reference {{[0-9]+\.[0-9][0-9][0-9]}} ms, sharded {{[0-9]+\.[0-9][0-9][0-9]}} ms on 4 devices, PASS
// CPU-NEXT:   13 passed, 0 failed
// CUDA-NEXT:  12 passed, 1 failed
// LOWERED-LABEL: llvm.func @all_reduce_i1__part0(
// LOWERED-NOT:   llvm.call @polymesh_rt_all_reduce
// LOWERED:       llvm.call @polymesh_rt_send
// LOWERED:       llvm.or {{.*}} : i1
// LOWERED-NOT:   llvm.call @polymesh_rt_all_reduce
// LOWERED:       llvm.return
func.func @all_reduce_i1(%p: tensor<4x6xi1> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}], unreduced={"x"}>})
    -> (tensor<4x6xi1> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) {
  return %p : tensor<4x6xi1>
}
