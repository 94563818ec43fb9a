// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu | FileCheck %s --check-prefix=LOWERED
// With the NCCL backend, the CUDA-lowered code (the all-to-all as one
// ncclSend and one ncclRecv per rank in a group) on simulated GPUs.
// RUN: %if nccl %{ polymesh-run %s --verify --backend=nccl --simulate-gpus \
// RUN:   | FileCheck %s %}

// --verify on exchanges of whole tiles (`all_to_all ... tiles`): every
// device's tile must equal the reference bit for bit. The schedule runs
// each as one all-to-all per device where its chunks lie in a mixed-radix
// pattern of the ranks (in id order, in the order of the source tiles or
// of the destination tiles), whatever the order of the axes or ids, and
// as send/recv where they do not.

polymesh.mesh @seq = <["x"=8]>
polymesh.mesh @m42 = <["x"=4, "y"=2]>
polymesh.mesh @odd = <["x"=4], device_ids=[7, 3, 11, 0]>
polymesh.mesh @m232 = <["a"=2, "b"=3, "c"=2], device_ids=[11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]>
polymesh.mesh @swap = <["p"=8], device_ids=[1, 0, 2, 3, 4, 5, 6, 7]>

// CHECK: @in_order: 1 leaf, 5376 bytes moved, {{.*}} on 8 devices, PASS
// LOWERED-LABEL: llvm.func @in_order__part0(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.call @polymesh_rt_all_to_all(
// LOWERED:       llvm.return
func.func @in_order(%q: tensor<32x48xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{"x"}, {}]>})
    -> (tensor<32x48xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{}, {"x"}]>}) {
  return %q : tensor<32x48xf32>
}

// Axes out of mesh order: the unpack loops over two digits of the rank.
// CHECK-NEXT: @axes_out_of_order: 1 leaf, 672 bytes moved, {{.*}} on 8 devices, PASS
// LOWERED-LABEL: llvm.func @axes_out_of_order__part0(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.call @polymesh_rt_all_to_all(
// LOWERED:       llvm.return
func.func @axes_out_of_order(%q: tensor<16x24xbf16> {polymesh.sharding = #polymesh.sharding<@m42, [{"y", "x"}, {}]>})
    -> (tensor<16x24xbf16> {polymesh.sharding = #polymesh.sharding<@m42, [{}, {"x", "y"}]>}) {
  return %q : tensor<16x24xbf16>
}

// Ids out of position order: the communicator lists them in tile order.
// CHECK-NEXT: @odd_ids: 1 leaf, 192 bytes moved, {{.*}} on 4 devices, PASS
// LOWERED-LABEL: llvm.func @odd_ids__part0(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.call @polymesh_rt_all_to_all(
// LOWERED:       llvm.return
func.func @odd_ids(%q: tensor<8x8xi32> {polymesh.sharding = #polymesh.sharding<@odd, [{"x"}, {}]>})
    -> (tensor<8x8xi32> {polymesh.sharding = #polymesh.sharding<@odd, [{}, {"x"}]>}) {
  return %q : tensor<8x8xi32>
}

// Three axes, each dimension's axes out of mesh order, reversed ids.
// CHECK-NEXT: @three_axes: 1 leaf, 2112 bytes moved, {{.*}} on 12 devices, PASS
// LOWERED-LABEL: llvm.func @three_axes__part0(
// LOWERED-NOT:   llvm.call @polymesh_rt_send
// LOWERED:       llvm.call @polymesh_rt_all_to_all(
// LOWERED:       llvm.return
func.func @three_axes(%q: tensor<8x12x6xf32> {polymesh.sharding = #polymesh.sharding<@m232, [{"c", "a"}, {}, {"b"}]>})
    -> (tensor<8x12x6xf32> {polymesh.sharding = #polymesh.sharding<@m232, [{}, {"b", "c", "a"}, {}]>}) {
  return %q : tensor<8x12x6xf32>
}

// Ids shuffled between the layouts: send/recv.
// CHECK-NEXT: @swapped: 1 leaf, 896 bytes moved, {{.*}} on 8 devices, PASS
// LOWERED-LABEL: llvm.func @swapped__part0(
// LOWERED-NOT:   llvm.call @polymesh_rt_all_to_all
// LOWERED:       llvm.call @polymesh_rt_send(
// LOWERED-NOT:   llvm.call @polymesh_rt_all_to_all
// LOWERED:       llvm.return
func.func @swapped(%q: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@seq, [{"x"}, {}]>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@swap, [{}, {"p"}]>}) {
  %r = polymesh.reshard %q <@swap, [{}, {"p"}]> : tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
