//===- Runtime.h - Communication backends for generated code ----*- C++ -*-===//
//
// Part of Polymesh. Plain C++17 and Abseil: no MLIR or LLVM types, and no
// CUDA (the NCCL backend implements Backend in a library of its own).
//
//===----------------------------------------------------------------------===//
//
// A Backend carries the communication calls that lowered transfer plans make:
// grouped send/recv and NCCL's collectives over communicators named by their
// member lists. The semantics (matching order, groups, in-place rules, rank
// order, reductions, errors) are those documented in PolymeshRuntime.h, the C
// ABI that forwards to a Backend.
//
// LoopbackBackend runs every device as a thread of this process and moves
// bytes with memcpy. Its purpose is to check plans and generated code on a
// CPU, so it is strict: mismatched calls are errors, no call waits past a
// deadline, and a deadlock is reported with every device it involves.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_RUNTIME_RUNTIME_H
#define POLYMESH_RUNTIME_RUNTIME_H

#include "polymesh/Runtime/PolymeshRuntime.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

struct PolymeshRuntime;

namespace polymesh::runtime {

/// Element types of reductions; values equal the POLYMESH_RT_* dtype codes.
enum class DataType : int32_t {
  F32 = POLYMESH_RT_F32,
  F64 = POLYMESH_RT_F64,
  F16 = POLYMESH_RT_F16,
  BF16 = POLYMESH_RT_BF16,
  I32 = POLYMESH_RT_I32,
  I64 = POLYMESH_RT_I64,
  I8 = POLYMESH_RT_I8,
  U8 = POLYMESH_RT_U8,
};
constexpr int kNumDataTypes = 8;

/// Reduction operators; values equal the POLYMESH_RT_* op codes.
enum class ReduceOp : int32_t {
  Sum = POLYMESH_RT_SUM,
  Prod = POLYMESH_RT_PROD,
  Max = POLYMESH_RT_MAX,
  Min = POLYMESH_RT_MIN,
};
constexpr int kNumReduceOps = 4;

/// Bytes of one element.
int64_t dataTypeSize(DataType type);
/// "f32", "bf16", ...
const char *dataTypeName(DataType type);
/// "sum", "prod", "max", "min".
const char *reduceOpName(ReduceOp op);
/// The DataType of a dtype code, or an error naming the code.
absl::StatusOr<DataType> dataTypeFromCode(int32_t code);
absl::StatusOr<ReduceOp> reduceOpFromCode(int32_t code);

/// IEEE binary16 and bfloat16 conversions. To 16 bits: round to
/// nearest-even, overflow to infinity, NaN stays NaN (quiet).
float f16ToFloat(uint16_t bits);
uint16_t floatToF16(float value);
float bf16ToFloat(uint16_t bits);
uint16_t floatToBf16(float value);

/// Combines `numInputs` arrays of `count` elements into `out` element-wise,
/// inputs in order, with the rounding rules of PolymeshRuntime.h (f16/bf16
/// combined in f32 and rounded once). `out` may alias an input.
void reduceArrays(DataType type, ReduceOp op, const void *const *inputs,
                  int64_t numInputs, int64_t count, void *out);

/// The communication interface generated code runs against. Every call names
/// the calling device; a device is driven by one thread at a time.
class Backend {
public:
  virtual ~Backend();

  /// Device ids of this run, in creation order.
  virtual absl::Span<const int64_t> devices() const = 0;

  virtual absl::Status groupStart(int64_t device) = 0;
  virtual absl::Status groupEnd(int64_t device) = 0;

  virtual absl::Status send(int64_t device, int64_t peer, const void *buf,
                            int64_t bytes) = 0;
  virtual absl::Status recv(int64_t device, int64_t peer, void *buf,
                            int64_t bytes) = 0;

  virtual absl::Status broadcast(int64_t device,
                                 absl::Span<const int64_t> members,
                                 int64_t root, const void *send, void *recv,
                                 int64_t bytes) = 0;
  virtual absl::Status allGather(int64_t device,
                                 absl::Span<const int64_t> members,
                                 const void *send, void *recv,
                                 int64_t bytesPerRank) = 0;
  virtual absl::Status allToAll(int64_t device,
                                absl::Span<const int64_t> members,
                                const void *send, void *recv,
                                int64_t bytesPerPeer) = 0;
  virtual absl::Status allReduce(int64_t device,
                                 absl::Span<const int64_t> members,
                                 const void *send, void *recv, int64_t count,
                                 DataType type, ReduceOp op) = 0;
  virtual absl::Status reduceScatter(int64_t device,
                                     absl::Span<const int64_t> members,
                                     const void *send, void *recv,
                                     int64_t recvCount, DataType type,
                                     ReduceOp op) = 0;

  /// The first error of the run (OK when none). Once set it never changes.
  virtual absl::Status firstError() const = 0;
  /// Records `error` as the first error unless there is one already, and
  /// releases every device blocked in a call (they fail as aborted).
  virtual void abort(const absl::Status &error) = 0;

  /// Where a message of `device` to `peer` (`isSend`) or from it goes when
  /// generated code moves it itself (the MPI lowering: upstream's mpi.send
  /// and mpi.recv on MPI_COMM_WORLD): the peer's MPI rank and the tag, or
  /// nullopt when the runtime carries it through send/recv (the peer lives
  /// in this process, or the backend is not MPI).
  struct MpiRoute {
    int rank = 0;
    int tag = 0;
  };
  virtual absl::StatusOr<std::optional<MpiRoute>>
  mpiRoute(int64_t device, int64_t peer, bool isSend) {
    return std::optional<MpiRoute>();
  }

  /// runOnDevices marks a device finished when its function returns, so a
  /// backend that detects deadlocks knows which devices will make no more
  /// calls, and unmarks every device before it starts and after it joins:
  /// outside a launcher run nothing is known about any device.
  virtual void setDeviceFinished(int64_t device, bool finished) {}
};

/// Runs `fn(device)` on one thread per device of `backend` and joins them.
/// A device function that fails aborts the backend (so no other device waits
/// on it). Returns the backend's first error, or OK.
absl::Status runOnDevices(Backend &backend,
                          const std::function<absl::Status(int64_t)> &fn);

struct LoopbackOptions {
  /// The longest any call blocks before it fails with a diagnostic.
  absl::Duration timeout = absl::Seconds(10);
  /// Fail at once, instead of at the timeout, when every device is blocked
  /// in a call that cannot complete or has finished its device function.
  bool detectDeadlocks = true;
};

class LoopbackState;

/// One thread per device in one process; bytes move with memcpy, done by
/// the thread whose call completes a send/recv pair or a collective.
class LoopbackBackend final : public Backend {
public:
  /// `devices`: distinct non-negative ids, at least one.
  static absl::StatusOr<std::unique_ptr<LoopbackBackend>>
  create(std::vector<int64_t> devices, LoopbackOptions options = {});
  ~LoopbackBackend() override;

  absl::Span<const int64_t> devices() const override;
  absl::Status groupStart(int64_t device) override;
  absl::Status groupEnd(int64_t device) override;
  absl::Status send(int64_t device, int64_t peer, const void *buf,
                    int64_t bytes) override;
  absl::Status recv(int64_t device, int64_t peer, void *buf,
                    int64_t bytes) override;
  absl::Status broadcast(int64_t device, absl::Span<const int64_t> members,
                         int64_t root, const void *send, void *recv,
                         int64_t bytes) override;
  absl::Status allGather(int64_t device, absl::Span<const int64_t> members,
                         const void *send, void *recv,
                         int64_t bytesPerRank) override;
  absl::Status allToAll(int64_t device, absl::Span<const int64_t> members,
                        const void *send, void *recv,
                        int64_t bytesPerPeer) override;
  absl::Status allReduce(int64_t device, absl::Span<const int64_t> members,
                         const void *send, void *recv, int64_t count,
                         DataType type, ReduceOp op) override;
  absl::Status reduceScatter(int64_t device, absl::Span<const int64_t> members,
                             const void *send, void *recv, int64_t recvCount,
                             DataType type, ReduceOp op) override;
  absl::Status firstError() const override;
  void abort(const absl::Status &error) override;
  void setDeviceFinished(int64_t device, bool finished) override;

  /// Communicators created so far (for tests of the cache).
  int64_t numCommunicators() const;

private:
  explicit LoopbackBackend(std::unique_ptr<LoopbackState> state);
  std::unique_ptr<LoopbackState> state;
};

/// A C ABI handle (PolymeshRuntime.h) over `backend`, e.g. an NCCL backend
/// made with options the C constructors do not take. Destroy it with
/// polymesh_rt_destroy. A backend that failed to come up (an error, or null)
/// gives a handle in the failed state with that error
/// (polymesh_rt_last_error), as the C constructors do.
PolymeshRuntime *wrapBackend(absl::StatusOr<std::unique_ptr<Backend>> backend);

} // namespace polymesh::runtime

#endif // POLYMESH_RUNTIME_RUNTIME_H
