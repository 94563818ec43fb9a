//===- CApiInternal.h - What a PolymeshRuntime handle holds -----*- C++ -*-===//
//
// Part of Polymesh. Internal to lib/Runtime: the C ABI (CApi.cpp) and the
// CUDA code generation ABI (CudaCodegen.cpp) share the handle.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_RUNTIME_CAPIINTERNAL_H
#define POLYMESH_LIB_RUNTIME_CAPIINTERNAL_H

#include "polymesh/Runtime/Runtime.h"

#include "absl/status/status.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

struct PolymeshRuntime {
  /// Null when creation failed; `createError` says why.
  std::unique_ptr<polymesh::runtime::Backend> backend;
  absl::Status createError;

  /// The first error's message, copied once so that the pointer handed out
  /// by polymesh_rt_last_error stays valid while other threads keep calling.
  std::mutex mu;
  std::string lastError;
  bool lastErrorSet = false;

  /// Per device: the staging buffer generated code packs into
  /// (polymesh_rt_staging), kept for the run and grown on demand. Each
  /// device is driven by one thread; the map itself is guarded.
  struct FreeDeleter {
    void operator()(void *p) const { std::free(p); }
  };
  struct Staging {
    std::unique_ptr<void, FreeDeleter> memory;
    int64_t bytes = 0;
  };
  std::mutex stagingMu;
  std::map<int64_t, Staging> staging;

  absl::Status firstError() const {
    return backend ? backend->firstError() : createError;
  }
};

#endif // POLYMESH_LIB_RUNTIME_CAPIINTERNAL_H
