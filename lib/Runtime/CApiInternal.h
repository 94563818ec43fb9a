//===- CApiInternal.h - What a PolymeshRuntime handle holds -----*- C++ -*-===//
//
// Part of Polymesh. Internal to lib/Runtime: the C ABI (CApi.cpp) and the
// CUDA code generation ABI (CudaCodegen.cpp) share the handle.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_RUNTIME_CAPIINTERNAL_H
#define POLYMESH_LIB_RUNTIME_CAPIINTERNAL_H

#include "polymesh/Runtime/PolymeshRuntime.h"
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

namespace polymesh::runtime {

/// The POLYMESH_RT_* code of a status: the one table that every C entry
/// point (the runtime ABI and the CUDA code generation ABI) returns from.
inline int32_t statusCodeOf(const absl::Status &status) {
  switch (status.code()) {
  case absl::StatusCode::kOk:
    return POLYMESH_RT_OK;
  case absl::StatusCode::kInvalidArgument:
    return POLYMESH_RT_INVALID_ARGUMENT;
  case absl::StatusCode::kDeadlineExceeded:
    return POLYMESH_RT_TIMEOUT;
  case absl::StatusCode::kAborted:
    return POLYMESH_RT_ABORTED;
  case absl::StatusCode::kFailedPrecondition:
    return POLYMESH_RT_FAILED_PRECONDITION;
  case absl::StatusCode::kUnknown: // what run_devices records for a device
    return POLYMESH_RT_DEVICE_FAILED;
  default:
    return POLYMESH_RT_INTERNAL;
  }
}

} // namespace polymesh::runtime

#endif // POLYMESH_LIB_RUNTIME_CAPIINTERNAL_H
