//===- CudaDriverFake.h - A simulated CUDA driver for generated code C++
//-*-===//
//
// Part of Polymesh. Internal to the runtime's tests and tools: library
// PolymeshRuntimeNcclFake.
//
//===----------------------------------------------------------------------===//
//
// With the simulated CUDA runtime and NCCL (NcclFake.h), this lets code that
// --polymesh-lower-to-cuda generated run where there is no GPU: its host
// code, tables, kernel arguments and NCCL calls run for real; its kernels run
// on the host, interpreted from their names and the argument ABI that
// LowerToCuda.cpp defines (copy_outer<k>_u<bytes>, zero_outer<k>_u<bytes>,
// accumulate_outer<k>_<type>: src, dst, units per run, per loop its count,
// src stride and dst stride in bytes, then the total number of units;
// fill_u<bytes>: dst, the element's bit pattern, the element count). What
// it cannot check is the PTX itself; ptxas does that (lower-to-cuda-ptxas).
//
// The simulation is strict where the driver is lenient: a kernel that the
// PTX does not define, a launch with an empty grid, one on a stream the
// simulated runtime does not know, or a module loaded without a context are
// errors. A kernel runs when its stream is idle (in stream order, after the
// copies and NCCL calls enqueued before it), on the launching thread.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_RUNTIME_CUDADRIVERFAKE_H
#define POLYMESH_LIB_RUNTIME_CUDADRIVERFAKE_H

#include "CudaDriverApi.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace polymesh::runtime {

/// The simulated driver, over FakeNccl's streams (contexts are devices).
const CudaDriverApi &fakeCudaDriverApi();

// simulatedCudaCodegenSymbols() and createSimulatedCodegenRuntime() are
// declared in polymesh/Runtime/CudaCodegenSymbols.h.

class FakeCudaDriver {
public:
  struct Counts {
    /// Module loads (once per context that launched one of its kernels).
    int64_t moduleLoads = 0;
    int64_t moduleUnloads = 0;
    /// Launches per kernel name.
    std::map<std::string, int64_t> launches;
  };
  static Counts counts();
  static void reset();
};

} // namespace polymesh::runtime

#endif // POLYMESH_LIB_RUNTIME_CUDADRIVERFAKE_H
