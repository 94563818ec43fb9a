//===- MpiTarget.h - Sharded runs over an MPI job's processes --*- C++ -*-===//
//
// Part of Polymesh. Header only: PolymeshExecution links no MPI, so the
// tools that run as several processes (polymesh-run --backend=mpi,
// polymesh-mpi-bench) include this and link PolymeshRuntimeMpi themselves.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_EXECUTION_MPITARGET_H
#define POLYMESH_EXECUTION_MPITARGET_H

#include "polymesh/Execution/ShardedRunner.h"
#include "polymesh/Runtime/MpiBackend.h"

namespace polymesh::execution {

/// Makes `options` run this process's share of every sharded run: the
/// devices `ownership` gives this rank of `world` (only their classes are
/// compiled, only their tiles come back), over an MPI backend whose waits
/// last at most `timeout`. Every rank must make the same runs in the same
/// order (a run's index names its messages). With `messagesInCode`, the
/// generated code sends and receives the messages between processes itself
/// (mpi.send and mpi.recv of the MPI lowering); otherwise the runtime's
/// send and recv carry them.
inline void useMpiBackend(ShardedRunnerOptions &options,
                          runtime::MpiWorld &world,
                          runtime::DeviceOwnership ownership,
                          absl::Duration timeout, bool messagesInCode = true) {
  if (messagesInCode) {
    options.mpiImplementation = runtime::mpiImplementationName();
    for (auto &symbol : runtime::mpiCodegenSymbols())
      options.jit.symbols.push_back(symbol);
  }
  int rank = world.rank();
  options.runsDevice = [ownership, rank](int64_t device) {
    return ownership.ownerOf(device) == rank;
  };
  options.createRuntime = [&world, ownership,
                           timeout](const std::vector<int64_t> &devices,
                                    int64_t, int64_t runIndex) {
    runtime::MpiOptions mpi;
    mpi.timeout = timeout;
    mpi.ownership = ownership;
    mpi.epoch = runIndex;
    return runtime::wrapBackend(
        runtime::MpiBackend::create(world, devices, mpi));
  };
}

} // namespace polymesh::execution

#endif // POLYMESH_EXECUTION_MPITARGET_H
