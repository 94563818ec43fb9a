//===- Passes.td - Polymesh lowering passes ----------------*- tablegen -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_CONVERSION_PASSES_TD
#define POLYMESH_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def PolymeshExchangeToCpu
    : Pass<"polymesh-exchange-to-cpu", "mlir::ModuleOp"> {
  let summary = "Rewrites each polymesh.exchange into its device's share of "
                "the plan: loops over tables and loopback runtime calls";
  let description = [{
    The first stage of `--polymesh-lower-to-cpu`, on its own so that its
    output can be read and tested: every `polymesh.exchange` of a
    partitioned module is rewritten, by one `OpConversionPattern` with
    `polymesh.exchange` illegal, into `scf` loops over the plan's tables
    (`memref.global` constants, built once per plan before the conversion),
    `llvm.intr.memcpy`/`memset` runs, element-wise sums, and `llvm.call`s
    of the runtime's C ABI, between a `bufferization.to_buffer` of the
    input tile and a `bufferization.to_tensor` of the result. Everything
    else (plans, meshes, the rest of the tensor code) is left for
    `--polymesh-lower-to-cpu`'s later stages. `--polymesh-lower-to-cpu`
    describes the tables and the code.
  }];
  let options = [
    Option<"directCollectives", "direct-collectives", "bool",
           /*default=*/"true",
           "Let collectives go straight from source to destination tiles "
           "(NCCL's out-of-place forms) where the tiles allow; false: "
           "every collective in place">,
  ];
  let dependentDialects = ["::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::arith::ArithDialect"];
}

def PolymeshExchangeToMpi
    : Pass<"polymesh-exchange-to-mpi", "mlir::ModuleOp"> {
  let summary = "Rewrites each polymesh.exchange as --polymesh-exchange-to-cpu "
                "does, with messages between processes as upstream mpi.send "
                "and mpi.recv";
  let description = [{
    The first stage of `--polymesh-lower-to-cpu=transport=mpi`, for
    programs that run as several processes of an MPI job
    (`polymesh-run --backend=mpi`, docs/multi-process.md). The code is
    `--polymesh-exchange-to-cpu`'s, except for the rows of send/recv
    segments: each asks the runtime where its message goes
    (`polymesh_rt_mpi_route`). A peer in the same process (or any peer,
    on a runtime that is not MPI) is a `polymesh_rt_send`/`recv` as
    before; a peer in another process is a blocking `mpi.send` or
    `mpi.recv` of the bytes, as a `memref<?xi8>` view, on
    `mpi.comm_world` with the rank and tag the runtime gave, in pieces of
    at most 1 GiB (MPI counts are ints).

    Blocking calls in row order cannot deadlock: every device's rows of a
    segment follow the plan's transfer order, which all devices share, so
    the first pending message is the next call of both its ends
    (`planner::SegmentMethod::SendRecv`; the schedule property tests run
    every random schedule that way). Messages inside a process go through
    the runtime's mailboxes, which never block before `group_end`.

    Collectives stay runtime calls: upstream's `mpi` dialect has no
    broadcast, all-gather or reduce-scatter, and its `mpi.allreduce`
    reduces in an order MPI chooses over processes, where a device group
    spans several devices of a process and partial sums must add in
    member order to match the one-process result bit for bit.

    The module gets `dlti.map = #dlti.map<"MPI:Implementation" = ...>`
    (`mpi-implementation`: OpenMPI or MPICH), which upstream's
    MPI-to-LLVM patterns read for the ABI's handles and datatypes.
  }];
  let options = [
    Option<"directCollectives", "direct-collectives", "bool",
           /*default=*/"true",
           "Let collectives go straight from source to destination tiles "
           "(NCCL's out-of-place forms) where the tiles allow; false: "
           "every collective in place">,
    Option<"mpiImplementation", "mpi-implementation", "std::string",
           /*default=*/"\"OpenMPI\"",
           "The MPI whose ABI the mpi ops lower to: OpenMPI or MPICH">,
  ];
  let dependentDialects = ["::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::bufferization::BufferizationDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::mpi::MPIDialect",
                           "::mlir::DLTIDialect"];
}

def PolymeshLowerToCpu : Pass<"polymesh-lower-to-cpu", "mlir::ModuleOp"> {
  let summary = "Lowers partitioned programs to the LLVM dialect: generated "
                "copy loops and calls into the loopback runtime";
  let description = [{
    Runs after `--polymesh-partition`. Each `polymesh.exchange` becomes
    (`--polymesh-exchange-to-cpu`, the first stage) the calling device's
    share of its plan, derived from the plan's global
    `polymesh.transfer` (`DeviceSchedule`, `include/polymesh/Planner/`):

    * **Segments.** Step phases of the plan, in order, the same code on
      every device; phases that communicate the same way on disjoint
      devices (one per group of a collective) share a segment. Per segment a device runs its *before* copies
      (packing boxes into its staging buffer, or local copies that must read
      before anything is written), its communication, then its *after*
      copies (unpacking, adding partial sums, local copies, zero fills), in
      the plan's transfer order.
    * **Tables.** What differs between devices lives in `memref.global`
      constants: a row per strided copy (buffers, byte offsets, per-loop
      counts and byte strides, contiguous run length: strided boxes are
      collapsed to as few runs as both tiles allow), a row per runtime call,
      each segment's row ranges, each staging size and each collective
      group. They are stored per distinct *block* (a device's rows, with
      peers and ranks relative to the device, groups by their shape and the
      device's rank in them, read off its position where the group is an
      iota pattern, so that a group's members share a block), which a
      table indexed by the device's position picks, so devices that do the
      same thing share rows. Tables are stored once per plan and shared by
      every class of devices that runs it. They hold the rows of the
      devices that run the module's classes: a module partitioned for one
      process's devices (`--polymesh-partition=devices=...`) has -1 in the
      `blocks` entry of every other device. Positions count the devices of
      the meshes a class names (`polymesh.meshes`).
    * **Kernels** are generated loops: a loop nest per copy row whose
      innermost contiguous run is an `llvm.intr.memcpy` (or `memset` for
      zero fills); partial sums add element by element in the element type
      (f16 and bf16 through f32, rounded per addition, as the simulator and
      the plan executor do).
    * **Communication** calls the runtime's C ABI (`PolymeshRuntime.h`): a
      step with a collective's exact shape is one `polymesh_rt_broadcast`,
      `all_gather`, `all_reduce` or `reduce_scatter` call per group, in
      place in staging or a tile, or (`direct-collectives`, the default)
      straight from the source tile into the destination tile where the
      tiles allow, taking over the plan's local copies around it; every
      other step with remote transfers is `polymesh_rt_send`/
      `polymesh_rt_recv` rows inside `polymesh_rt_group_start`/`group_end`,
      which carries any step.
      Generated code does not check call statuses: the runtime keeps the
      first error and fails every later call, and the caller reads
      `polymesh_rt_status` after the run.
    * A schedule that writes its source buffer (a sum in place) runs on a
      copy of the source tile; one that adds into its destination starts
      from zeros.

    With `transport=mpi` the first stage is `--polymesh-exchange-to-mpi`
    instead: messages between processes are upstream `mpi.send` and
    `mpi.recv`, which the last stage lowers with upstream's MPI-to-LLVM
    patterns to calls of `MPI_Send` and `MPI_Recv`.

    Then the whole module is lowered to the LLVM dialect by upstream passes
    (`buildHostLoweringPipeline`): TOSA to linalg, one-shot bufferization
    with identity layouts at function boundaries (arguments of partitioned
    functions are not writable), results as caller-allocated out-parameters,
    loops, f16/bf16 emulation in f32, and the conversions to LLVM (the
    `mpi` dialect's among them).
  }];
  let options = [
    Option<"directCollectives", "direct-collectives", "bool",
           /*default=*/"true",
           "Let collectives go straight from source to destination tiles "
           "(NCCL's out-of-place forms) where the tiles allow; false: "
           "every collective in place">,
    Option<"transportName", "transport", "std::string",
           /*default=*/"\"runtime\"",
           "How messages between processes move: runtime (the runtime's "
           "send/recv) or mpi (mpi.send/mpi.recv in the code)">,
    Option<"mpiImplementation", "mpi-implementation", "std::string",
           /*default=*/"\"OpenMPI\"",
           "transport=mpi: the MPI whose ABI the mpi ops lower to, OpenMPI "
           "or MPICH">,
  ];
}

def PolymeshExchangeToCuda
    : Pass<"polymesh-exchange-to-cuda", "mlir::ModuleOp"> {
  let summary = "Rewrites each partitioned function into a host function "
                "over device pointers: kernel launches and NCCL calls";
  let description = [{
    The first stage of `--polymesh-lower-to-cuda`, on its own so that its
    output can be read and tested before LLVM. It is a dialect conversion:
    a type converter maps each tile (a statically shaped tensor of
    integers or floats) to a device pointer, `!llvm.ptr`, and partition's
    tables of tile offsets to `memref<...xi64>` globals; one
    `OpConversionPattern` per op kind rewrites a partitioned function's
    ops, with every op on tensors in a partitioned function illegal:

    * `func.func`: the host function `(runtime, device, position, input
      pointers..., result pointers...)` with `llvm.emit_c_interface`, and
      a prologue that gets the device's stream
      (`polymesh_rt_cuda_stream`) and the communicator of the program's
      devices (`polymesh_rt_nccl_comm`);
    * `polymesh.exchange`: the device's share of its plan from the plan's
      tables (as for the CPU), copy rows as `gpu.launch_func` of generated
      kernels, communication as NCCL calls;
    * dense constants, `linalg.fill` of a constant and `tensor.empty`:
      fill kernels and uploads; `tensor.extract` of an offset table and
      `tensor.extract_slice` of a constant: a load and a strided copy
      kernel; `tensor.expand_shape`/`collapse_shape`: the same pointer;
    * `func.return`: copies into the caller's buffers that were not
      written in place, a stream synchronization, and frees.

    Kernels are created as the patterns ask for them, in
    `gpu.module @polymesh_kernels` with an NVVM target (`chip`,
    `features`). Plans, meshes and other functions are left for
    `--polymesh-lower-to-cuda`'s later stages. A function the target
    cannot lower is refused, with a diagnostic at its op, before the
    conversion starts (`--polymesh-lower-to-cuda` describes what it
    lowers).
  }];
  let options = [
    Option<"directCollectives", "direct-collectives", "bool",
           /*default=*/"true",
           "Let collectives go straight from source to destination tiles "
           "(NCCL's out-of-place forms) where the tiles allow; false: "
           "every collective in place">,
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90\"",
           "NVVM target chip of the kernels: an NVPTX processor (sm_NN, "
           "sm_NNa, sm_NNf)">,
    Option<"features", "features", "std::string", /*default=*/"\"+ptx80\"",
           "NVPTX features: one PTX version, +ptxNN, that the chip "
           "accepts (sm_90: +ptx78 or newer)">,
  ];
}

def PolymeshLowerToCuda : Pass<"polymesh-lower-to-cuda", "mlir::ModuleOp"> {
  let summary = "Lowers partitioned data movement and placement to PTX "
                "kernels and NCCL calls on the host";
  let description = [{
    Runs after `--polymesh-partition`; the plan ops are the same as for the
    CPU, and so are the tables (`--polymesh-lower-to-cpu` describes them).
    Its first stage is `--polymesh-exchange-to-cuda`, a dialect conversion;
    then plans and meshes are dropped and upstream passes lower host code
    and kernels to the LLVM dialect and the kernels to PTX. What differs
    from the CPU:

    * **Buffers are GPU memory.** Each partitioned function becomes a host
      function `(runtime, device, position, input pointers..., result
      pointers...)` over device pointers, with `llvm.emit_c_interface`. An
      exchange whose result is returned once writes straight into the
      caller's buffer; other values get device memory from the runtime
      (`polymesh_rt_device_alloc`). The function synchronizes the device's
      stream before it returns.
    * **Kernels.** Each copy row is one launch, on the device's stream
      (`polymesh_rt_cuda_stream`), of a generated grid-stride kernel over
      the row's loops and contiguous runs: 16-byte vector loads and stores
      when both addresses, every stride and the run are 16-byte aligned
      (checked per row at run time), bytes otherwise; zero fills and partial
      sums (in the element type; f16/bf16 through f32) have their own
      kernels. At most 4,096 blocks of 256 threads per launch. Kernels live
      in one `gpu.module @polymesh_kernels` with an NVVM target (`chip`,
      `features`) and are compiled in-process through NVVM and LLVM's NVPTX
      backend to PTX (`gpu.binary`, `isa` format); the CUDA driver
      JIT-compiles the PTX when the module is loaded. No nvcc.
    * **Communication calls NCCL directly**: `ncclGroupStart`, `ncclSend` /
      `ncclRecv` (bytes, `ncclUint8`, the peer's rank in the world
      communicator of the program's devices), `ncclGroupEnd`; broadcast
      steps are `ncclBroadcast` in place on the communicator of the step's
      members, and steps of a collective's shape `ncclAllGather`,
      `ncclAllReduce` or `ncclReduceScatter` in place (docs/codegen.md).
      Communicators come from `polymesh_rt_nccl_comm` (created once per
      member list and cached by the runtime). Every result goes to
      `polymesh_rt_nccl_check` with its communicator: the runtime's
      communicators are non-blocking, so `ncclInProgress` is waited out
      before the next call, and errors become the runtime's error.
    * **Data placement** besides exchanges: a splat constant, or a
      `linalg.fill` of a constant into a `tensor.empty`, is a fill kernel
      (the element's bit pattern, 1 to 8 bytes); any other dense constant is
      uploaded from a host image (`polymesh_rt_device_upload`), and the
      slice of it that partitioning takes at offsets read from a table of
      index constants at the device's position is a strided copy kernel;
      `tensor.expand_shape` and `tensor.collapse_shape` alias their operand
      (tiles are row-major).

    Any other op computes and is refused with a diagnostic at the op (it
    would need kernels of its own), and so is a function with an argument
    or result that is not a statically shaped tensor of integers or floats
    (a scalar, an index, a memref, a vector): the host function passes
    only device pointers to tiles.

    `chip` and `features` are checked before any pass runs: the chip must
    be a processor of LLVM's NVPTX backend (`sm_NN`, `sm_NNa`, `sm_NNf`) and
    the features exactly one of its PTX versions, `+ptxNN`, at least the
    oldest that supports the chip (sm_90: `+ptx78`; sm_90a: `+ptx80`;
    sm_100: `+ptx86`). The minimum versions are a table in
    `CudaKernels.cpp` (LLVM keeps them where a version that is too old is a
    fatal error). The host side is left in
    the LLVM dialect with `gpu.launch_func` on a `gpu.binary`;
    `polymesh-translate --mlir-to-llvmir` turns it into LLVM IR whose
    launches call the `mgpu*` wrappers, and `--polymesh-to-ptx` prints the
    kernels' PTX.
  }];
  let options = [
    Option<"directCollectives", "direct-collectives", "bool",
           /*default=*/"true",
           "Let collectives go straight from source to destination tiles "
           "(NCCL's out-of-place forms) where the tiles allow; false: "
           "every collective in place">,
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90\"",
           "NVVM target chip of the kernels: an NVPTX processor (sm_NN, "
           "sm_NNa, sm_NNf)">,
    Option<"features", "features", "std::string", /*default=*/"\"+ptx80\"",
           "NVPTX features: one PTX version, +ptxNN, that the chip "
           "accepts (sm_90: +ptx78 or newer)">,
  ];
}

#endif // POLYMESH_CONVERSION_PASSES_TD
