//===- Passes.td - Polymesh lowering passes ----------------*- tablegen -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_CONVERSION_PASSES_TD
#define POLYMESH_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def PolymeshLowerToCpu : Pass<"polymesh-lower-to-cpu", "mlir::ModuleOp"> {
  let summary = "Lowers partitioned programs to the LLVM dialect: generated "
                "copy loops and calls into the loopback runtime";
  let description = [{
    Runs after `--polymesh-partition`. Each `polymesh.exchange` becomes
    the calling device's share of its plan, derived from the plan's global
    `polymesh.transfer` (`DeviceSchedule`, `include/polymesh/Planner/`):

    * **Segments.** One per step phase of the plan, in order, the same code
      on every device. Per segment a device runs its *before* copies
      (packing boxes into its staging buffer, or local copies that must read
      before anything is written), its communication, then its *after*
      copies (unpacking, adding partial sums, local copies, zero fills), in
      the plan's transfer order.
    * **Tables.** What differs between devices lives in `memref.global`
      constants indexed by the device's position: a row per strided copy
      (buffers, byte offsets, per-loop counts and byte strides, contiguous
      run length: strided boxes are collapsed to as few runs as both tiles
      allow), a row per runtime call, each segment's row ranges per device,
      and each device's staging size. Tables are stored once per plan and
      shared by every class of devices that runs it.
    * **Kernels** are generated loops: a loop nest per copy row whose
      innermost contiguous run is an `llvm.intr.memcpy` (or `memset` for
      zero fills); partial sums add element by element in the element type
      (f16 and bf16 through f32, rounded per addition, as the simulator and
      the plan executor do).
    * **Communication** calls the runtime's C ABI (`PolymeshRuntime.h`): a
      broadcast step whose root sends the same boxes to every other member
      is one `polymesh_rt_broadcast` in place in staging; every other step
      with remote transfers is `polymesh_rt_send`/`polymesh_rt_recv` rows
      inside `polymesh_rt_group_start`/`group_end`, which carries any step.
      Generated code does not check call statuses: the runtime keeps the
      first error and fails every later call, and the caller reads
      `polymesh_rt_status` after the run.
    * A plan that sums into its source buffer runs on a copy of the source
      tile; one that adds into its destination starts from zeros.

    Then the whole module is lowered to the LLVM dialect by upstream passes
    (`buildHostLoweringPipeline`): TOSA to linalg, one-shot bufferization
    with identity layouts at function boundaries (arguments of partitioned
    functions are not writable), results as caller-allocated out-parameters,
    loops, f16/bf16 emulation in f32, and the conversions to LLVM.
  }];
}

#endif // POLYMESH_CONVERSION_PASSES_TD
