// RUN: polymesh-run %s --verify | FileCheck %s
// RUN: polymesh-opt %s --polymesh-pipeline=target=cpu | FileCheck %s --check-prefix=LOWERED
// RUN: %if nccl %{ polymesh-run %s --verify --backend=nccl --simulate-gpus | FileCheck %s %}

// --verify on sums over large groups, which the plan writes as pieces and
// the lowering schedules from them (one collective per group, never the
// n^2 transfers the pieces stand for), and on one the collective does not
// fit (unequal pieces), which falls back to the expanded transfers. Every
// device's tile must equal the reference bit for bit: the inputs are small
// integers, so the sums are exact whatever their order.

polymesh.mesh @pod = <["dp"=256, "tp"=2]>
polymesh.mesh @data = <["x"=512]>
polymesh.mesh @odd = <["x"=256], device_ids=[511, 510, 509, 508, 507, 506, 505, 504, 503, 502, 501, 500, 499, 498, 497, 496, 495, 494, 493, 492, 491, 490, 489, 488, 487, 486, 485, 484, 483, 482, 481, 480, 479, 478, 477, 476, 475, 474, 473, 472, 471, 470, 469, 468, 467, 466, 465, 464, 463, 462, 461, 460, 459, 458, 457, 456, 455, 454, 453, 452, 451, 450, 449, 448, 447, 446, 445, 444, 443, 442, 441, 440, 439, 438, 437, 436, 435, 434, 433, 432, 431, 430, 429, 428, 427, 426, 425, 424, 423, 422, 421, 420, 419, 418, 417, 416, 415, 414, 413, 412, 411, 410, 409, 408, 407, 406, 405, 404, 403, 402, 401, 400, 399, 398, 397, 396, 395, 394, 393, 392, 391, 390, 389, 388, 387, 386, 385, 384, 383, 382, 381, 380, 379, 378, 377, 376, 375, 374, 373, 372, 371, 370, 369, 368, 367, 366, 365, 364, 363, 362, 361, 360, 359, 358, 357, 356, 355, 354, 353, 352, 351, 350, 349, 348, 347, 346, 345, 344, 343, 342, 341, 340, 339, 338, 337, 336, 335, 334, 333, 332, 331, 330, 329, 328, 327, 326, 325, 324, 323, 322, 321, 320, 319, 318, 317, 316, 315, 314, 313, 312, 311, 310, 309, 308, 307, 306, 305, 304, 303, 302, 301, 300, 299, 298, 297, 296, 295, 294, 293, 292, 291, 290, 289, 288, 287, 286, 285, 284, 283, 282, 281, 280, 279, 278, 277, 276, 275, 274, 273, 272, 271, 270, 269, 268, 267, 266, 265, 264, 263, 262, 261, 260, 259, 258, 257, 256]>
polymesh.mesh @small = <["x"=96]>

// Two groups of 256 side by side (one per "tp" column block), uneven
// pieces of 1,000 rows: one in-place all-reduce per group.
// CHECK: @sum_dp: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 512 devices, PASS
// LOWERED-LABEL: llvm.func @sum_dp__part0(
// LOWERED: llvm.call @polymesh_rt_all_reduce(
// LOWERED-NOT: llvm.call @polymesh_rt_send
// LOWERED: llvm.return
func.func @sum_dp(%a: tensor<1000x6xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{}, {"tp"}], unreduced={"dp"}>})
    -> (tensor<1000x6xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{}, {"tp"}]>}) {
  return %a : tensor<1000x6xf32>
}

// 512 equal row blocks: one reduce-scatter in place in the source tile.
// CHECK: @scatter: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 512 devices, PASS
// LOWERED-LABEL: llvm.func @scatter__part0(
// LOWERED: llvm.call @polymesh_rt_reduce_scatter(
// LOWERED-NOT: llvm.call @polymesh_rt_send
// LOWERED: llvm.return
func.func @scatter(%a: tensor<1024x2xi32> {polymesh.sharding = #polymesh.sharding<@data, [{}, {}], unreduced={"x"}>})
    -> (tensor<1024x2xi32> {polymesh.sharding = #polymesh.sharding<@data, [{"x"}, {}]>}) {
  return %a : tensor<1024x2xi32>
}

// Ids 511 down to 256: ranks follow the sorted ids, whatever the mesh's
// order.
// CHECK: @sum_odd_ids: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 256 devices, PASS
// LOWERED-LABEL: llvm.func @sum_odd_ids__part0(
// LOWERED: llvm.call @polymesh_rt_all_reduce(
// LOWERED: llvm.return
func.func @sum_odd_ids(%a: tensor<300x4xf64> {polymesh.sharding = #polymesh.sharding<@odd, [{}, {}], unreduced={"x"}>})
    -> (tensor<300x4xf64> {polymesh.sharding = #polymesh.sharding<@odd, [{}, {}]>}) {
  return %a : tensor<300x4xf64>
}

// 1,000 rows over 96 devices: pieces of 11 and 10 rows, no reduce-scatter
// of equal chunks; the step is expanded and runs as grouped send/recv.
// CHECK: @scatter_uneven: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 96 devices, PASS
// LOWERED-LABEL: llvm.func @scatter_uneven__part0(
// LOWERED-NOT: llvm.call @polymesh_rt_reduce_scatter(
// LOWERED: llvm.call @polymesh_rt_send
// LOWERED: llvm.return
func.func @scatter_uneven(%a: tensor<1000x3xf32> {polymesh.sharding = #polymesh.sharding<@small, [{}, {}], unreduced={"x"}>})
    -> (tensor<1000x3xf32> {polymesh.sharding = #polymesh.sharding<@small, [{"x"}, {}]>}) {
  return %a : tensor<1000x3xf32>
}

// CHECK: 4 passed, 0 failed
