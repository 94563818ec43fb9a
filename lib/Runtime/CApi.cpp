//===- CApi.cpp - The C ABI over a runtime Backend ------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "CApiInternal.h"

#include "polymesh/Runtime/PolymeshRuntime.h"
#include "polymesh/Runtime/Runtime.h"

#include "absl/strings/str_cat.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>

using polymesh::runtime::Backend;
using polymesh::runtime::DataType;
using polymesh::runtime::LoopbackBackend;
using polymesh::runtime::LoopbackOptions;
using polymesh::runtime::ReduceOp;

namespace {

using polymesh::runtime::statusCodeOf;

/// Fails a call that the C layer itself rejects; the backend records the
/// error like its own so that every device sees the run fail.
int32_t reject(PolymeshRuntime *rt, absl::Status error) {
  if (rt->backend)
    rt->backend->abort(error);
  return statusCodeOf(error);
}

/// The runtime's backend; null when the runtime could not be created.
Backend *backendOf(PolymeshRuntime *rt) {
  return rt ? rt->backend.get() : nullptr;
}

int32_t unusable(PolymeshRuntime *rt) {
  return rt ? statusCodeOf(rt->createError) : POLYMESH_RT_INVALID_ARGUMENT;
}

/// The member list of a C call, or an error.
absl::StatusOr<absl::Span<const int64_t>>
membersOf(const char *call, const int64_t *members, int64_t numMembers) {
  if (numMembers <= 0 || !members)
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": empty or null member list (", numMembers, " members)"));
  return absl::Span<const int64_t>(members, static_cast<size_t>(numMembers));
}

} // namespace

PolymeshRuntime *polymesh::runtime::wrapBackend(
    absl::StatusOr<std::unique_ptr<Backend>> backend) {
  auto rt = std::make_unique<PolymeshRuntime>();
  if (!backend.ok())
    rt->createError = backend.status();
  else if (!*backend)
    rt->createError = absl::InvalidArgumentError("wrapBackend: null backend");
  else
    rt->backend = *std::move(backend);
  return rt.release();
}

extern "C" {

PolymeshRuntime *polymesh_rt_create_loopback(const int64_t *device_ids,
                                             int64_t num_devices,
                                             int64_t timeout_ms) {
  auto rt = std::make_unique<PolymeshRuntime>();
  if (num_devices <= 0 || !device_ids) {
    rt->createError = absl::InvalidArgumentError(
        absl::StrCat("polymesh_rt_create_loopback: empty or null device list (",
                     num_devices, " devices)"));
    return rt.release();
  }
  LoopbackOptions options;
  if (timeout_ms > 0)
    options.timeout = absl::Milliseconds(timeout_ms);
  absl::StatusOr<std::unique_ptr<LoopbackBackend>> backend =
      LoopbackBackend::create(
          std::vector<int64_t>(device_ids, device_ids + num_devices), options);
  if (backend.ok())
    rt->backend = *std::move(backend);
  else
    rt->createError = backend.status();
  return rt.release();
}

void polymesh_rt_destroy(PolymeshRuntime *rt) { delete rt; }

const char *polymesh_rt_last_error(PolymeshRuntime *rt) {
  if (!rt)
    return "null runtime";
  absl::Status error = rt->firstError();
  if (error.ok())
    return "";
  std::lock_guard<std::mutex> lock(rt->mu);
  if (!rt->lastErrorSet) {
    rt->lastError = std::string(error.message());
    rt->lastErrorSet = true;
  }
  return rt->lastError.c_str();
}

int32_t polymesh_rt_status(PolymeshRuntime *rt) {
  return rt ? statusCodeOf(rt->firstError()) : POLYMESH_RT_INVALID_ARGUMENT;
}

int64_t polymesh_rt_num_devices(PolymeshRuntime *rt) {
  Backend *backend = backendOf(rt);
  return backend ? static_cast<int64_t>(backend->devices().size()) : 0;
}

int64_t polymesh_rt_device_id(PolymeshRuntime *rt, int64_t index) {
  Backend *backend = backendOf(rt);
  if (!backend || index < 0 ||
      index >= static_cast<int64_t>(backend->devices().size()))
    return -1;
  return backend->devices()[index];
}

int64_t polymesh_rt_dtype_size(int32_t dtype) {
  absl::StatusOr<DataType> type = polymesh::runtime::dataTypeFromCode(dtype);
  return type.ok() ? polymesh::runtime::dataTypeSize(*type) : 0;
}

int32_t polymesh_rt_group_start(PolymeshRuntime *rt, int64_t device) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  return statusCodeOf(backend->groupStart(device));
}

int32_t polymesh_rt_group_end(PolymeshRuntime *rt, int64_t device) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  return statusCodeOf(backend->groupEnd(device));
}

int32_t polymesh_rt_send(PolymeshRuntime *rt, int64_t device, int64_t peer,
                         const void *buf, int64_t bytes) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  return statusCodeOf(backend->send(device, peer, buf, bytes));
}

int32_t polymesh_rt_recv(PolymeshRuntime *rt, int64_t device, int64_t peer,
                         void *buf, int64_t bytes) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  return statusCodeOf(backend->recv(device, peer, buf, bytes));
}

int64_t polymesh_rt_mpi_route(PolymeshRuntime *rt, int64_t device, int64_t peer,
                              int32_t is_send) {
  Backend *backend = backendOf(rt);
  if (!backend) {
    unusable(rt);
    return -1;
  }
  absl::StatusOr<std::optional<Backend::MpiRoute>> route =
      backend->mpiRoute(device, peer, is_send != 0);
  if (!route.ok() || !*route)
    return -1;
  return (static_cast<int64_t>((*route)->rank) << 32) |
         static_cast<uint32_t>((*route)->tag);
}

int32_t polymesh_rt_broadcast(PolymeshRuntime *rt, int64_t device,
                              const int64_t *members, int64_t num_members,
                              int64_t root, const void *send, void *recv,
                              int64_t bytes) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  auto group = membersOf("broadcast", members, num_members);
  if (!group.ok())
    return reject(rt, group.status());
  return statusCodeOf(
      backend->broadcast(device, *group, root, send, recv, bytes));
}

int32_t polymesh_rt_all_gather(PolymeshRuntime *rt, int64_t device,
                               const int64_t *members, int64_t num_members,
                               const void *send, void *recv,
                               int64_t bytes_per_rank) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  auto group = membersOf("all_gather", members, num_members);
  if (!group.ok())
    return reject(rt, group.status());
  return statusCodeOf(
      backend->allGather(device, *group, send, recv, bytes_per_rank));
}

int32_t polymesh_rt_all_to_all(PolymeshRuntime *rt, int64_t device,
                               const int64_t *members, int64_t num_members,
                               const void *send, void *recv,
                               int64_t bytes_per_peer) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  auto group = membersOf("all_to_all", members, num_members);
  if (!group.ok())
    return reject(rt, group.status());
  return statusCodeOf(
      backend->allToAll(device, *group, send, recv, bytes_per_peer));
}

int32_t polymesh_rt_all_reduce(PolymeshRuntime *rt, int64_t device,
                               const int64_t *members, int64_t num_members,
                               const void *send, void *recv, int64_t count,
                               int32_t dtype, int32_t op) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  auto group = membersOf("all_reduce", members, num_members);
  if (!group.ok())
    return reject(rt, group.status());
  absl::StatusOr<DataType> type = polymesh::runtime::dataTypeFromCode(dtype);
  if (!type.ok())
    return reject(rt, absl::InvalidArgumentError(
                          absl::StrCat("all_reduce on device ", device, ": ",
                                       type.status().message())));
  absl::StatusOr<ReduceOp> reduceOp = polymesh::runtime::reduceOpFromCode(op);
  if (!reduceOp.ok())
    return reject(rt, absl::InvalidArgumentError(
                          absl::StrCat("all_reduce on device ", device, ": ",
                                       reduceOp.status().message())));
  return statusCodeOf(
      backend->allReduce(device, *group, send, recv, count, *type, *reduceOp));
}

int32_t polymesh_rt_reduce_scatter(PolymeshRuntime *rt, int64_t device,
                                   const int64_t *members, int64_t num_members,
                                   const void *send, void *recv,
                                   int64_t recv_count, int32_t dtype,
                                   int32_t op) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  auto group = membersOf("reduce_scatter", members, num_members);
  if (!group.ok())
    return reject(rt, group.status());
  absl::StatusOr<DataType> type = polymesh::runtime::dataTypeFromCode(dtype);
  if (!type.ok())
    return reject(rt, absl::InvalidArgumentError(
                          absl::StrCat("reduce_scatter on device ", device,
                                       ": ", type.status().message())));
  absl::StatusOr<ReduceOp> reduceOp = polymesh::runtime::reduceOpFromCode(op);
  if (!reduceOp.ok())
    return reject(rt, absl::InvalidArgumentError(
                          absl::StrCat("reduce_scatter on device ", device,
                                       ": ", reduceOp.status().message())));
  return statusCodeOf(backend->reduceScatter(device, *group, send, recv,
                                             recv_count, *type, *reduceOp));
}

void *polymesh_rt_staging(PolymeshRuntime *rt, int64_t device, int64_t bytes) {
  if (!rt || bytes < 0)
    return nullptr;
  PolymeshRuntime::Staging *slot;
  {
    std::lock_guard<std::mutex> lock(rt->stagingMu);
    slot = &rt->staging[device];
  }
  if (slot->bytes < bytes || !slot->memory) {
    // 64-byte aligned, a multiple of 64 bytes, at least one line.
    int64_t size = std::max<int64_t>(64, (bytes + 63) / 64 * 64);
    slot->memory.reset(std::aligned_alloc(64, static_cast<size_t>(size)));
    slot->bytes = slot->memory ? size : 0;
    if (!slot->memory) {
      reject(rt, absl::ResourceExhaustedError(
                     absl::StrCat("polymesh_rt_staging: cannot allocate ", size,
                                  " bytes for device ", device)));
      return nullptr;
    }
  }
  return slot->memory.get();
}

int32_t polymesh_rt_copy(PolymeshRuntime *rt, int64_t device, void *dst,
                         const void *src, int64_t bytes) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  // A failed run stops every device at its next runtime call, copies too.
  if (absl::Status error = backend->firstError(); !error.ok())
    return POLYMESH_RT_ABORTED;
  bool known = false;
  for (int64_t id : backend->devices())
    known |= id == device;
  if (!known)
    return reject(rt, absl::InvalidArgumentError(
                          absl::StrCat("copy: calling device ", device,
                                       " is not a device of this runtime")));
  if (bytes < 0 || (bytes > 0 && (!dst || !src)))
    return reject(rt, absl::InvalidArgumentError(absl::StrCat(
                          "copy on device ", device, ": invalid buffers for ",
                          bytes, " bytes")));
  if (bytes > 0)
    std::memmove(dst, src, static_cast<size_t>(bytes));
  return POLYMESH_RT_OK;
}

int32_t polymesh_rt_run_devices(PolymeshRuntime *rt, PolymeshRtDeviceFn fn,
                                void *user) {
  Backend *backend = backendOf(rt);
  if (!backend)
    return unusable(rt);
  if (!fn)
    return reject(rt, absl::InvalidArgumentError(
                          "polymesh_rt_run_devices: null device function"));
  absl::Status status = polymesh::runtime::runOnDevices(
      *backend, [&](int64_t device) -> absl::Status {
        int32_t code = fn(rt, device, user);
        if (code == POLYMESH_RT_OK)
          return absl::OkStatus();
        // A code the runtime returned is already recorded as the first
        // error; a code of the program's own is the program's failure.
        return absl::UnknownError(
            absl::StrCat("device function returned status ", code));
      });
  return statusCodeOf(status);
}

} // extern "C"
