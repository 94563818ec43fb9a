//===- Runtime.cpp - Data types, reductions and the device launcher -------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Runtime/Runtime.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <cstring>
#include <system_error>
#include <thread>
#include <type_traits>

namespace polymesh::runtime {

Backend::~Backend() = default;

int64_t dataTypeSize(DataType type) {
  switch (type) {
  case DataType::F32:
  case DataType::I32:
    return 4;
  case DataType::F64:
  case DataType::I64:
    return 8;
  case DataType::F16:
  case DataType::BF16:
    return 2;
  case DataType::I8:
  case DataType::U8:
    return 1;
  }
  return 0;
}

const char *dataTypeName(DataType type) {
  switch (type) {
  case DataType::F32:
    return "f32";
  case DataType::F64:
    return "f64";
  case DataType::F16:
    return "f16";
  case DataType::BF16:
    return "bf16";
  case DataType::I32:
    return "i32";
  case DataType::I64:
    return "i64";
  case DataType::I8:
    return "i8";
  case DataType::U8:
    return "u8";
  }
  return "unknown";
}

const char *reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return "sum";
  case ReduceOp::Prod:
    return "prod";
  case ReduceOp::Max:
    return "max";
  case ReduceOp::Min:
    return "min";
  }
  return "unknown";
}

absl::StatusOr<DataType> dataTypeFromCode(int32_t code) {
  if (code < 0 || code >= kNumDataTypes)
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown dtype code ", code, "; expected 0..", kNumDataTypes - 1));
  return static_cast<DataType>(code);
}

absl::StatusOr<ReduceOp> reduceOpFromCode(int32_t code) {
  if (code < 0 || code >= kNumReduceOps)
    return absl::InvalidArgumentError(absl::StrCat("unknown reduction op code ",
                                                   code, "; expected 0..",
                                                   kNumReduceOps - 1));
  return static_cast<ReduceOp>(code);
}

//===----------------------------------------------------------------------===//
// 16-bit floats
//===----------------------------------------------------------------------===//

namespace {

uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float bitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

} // namespace

float f16ToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in f32.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31)
    return bitsFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t floatToF16(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: keep the top payload bits, force quiet.
    return sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu);
  // 65520 is halfway between the largest f16 (65504) and 2^16; the tie goes
  // to the even neighbour, which is infinity.
  if (magnitude >= 0x477ff000u)
    return sign | 0x7c00u;
  if (magnitude < 0x38800000u) {
    // Below the smallest normal f16 (2^-14): the result is subnormal, its
    // mantissa is value * 2^24 rounded to nearest-even. Scaling by a power of
    // two is exact, and a mantissa of 0x400 is the smallest normal's encoding.
    float scaled = bitsFloat(magnitude) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t result =
      ((magnitude >> 23) - 112) << 10 | ((magnitude >> 13) & 0x3ffu);
  uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u)))
    ++result; // A carry into the exponent is the correct rounding.
  return sign | static_cast<uint16_t>(result);
}

float bf16ToFloat(uint16_t bits) { return bitsFloat(uint32_t(bits) << 16); }

uint16_t floatToBf16(float value) {
  uint32_t bits = floatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {

template <typename T> T combine(ReduceOp op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
    case ReduceOp::Sum:
      return a + b;
    case ReduceOp::Prod:
      return a * b;
    case ReduceOp::Max:
      if (std::isnan(a) || std::isnan(b))
        return std::isnan(a) ? a : b;
      return a < b ? b : a;
    case ReduceOp::Min:
      if (std::isnan(a) || std::isnan(b))
        return std::isnan(a) ? a : b;
      return b < a ? b : a;
    }
  } else {
    // Wrap-around arithmetic in the unsigned type: signed overflow is UB.
    using U = std::make_unsigned_t<T>;
    switch (op) {
    case ReduceOp::Sum:
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    case ReduceOp::Prod:
      return static_cast<T>(
          static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::Max:
      return a < b ? b : a;
    case ReduceOp::Min:
      return b < a ? b : a;
    }
  }
  return a;
}

/// Reduces in T, through a temporary so that `out` may alias any input and
/// unaligned buffers are fine.
template <typename T>
void reduceNative(ReduceOp op, const void *const *inputs, int64_t numInputs,
                  int64_t count, void *out) {
  std::vector<T> acc(count), next(count);
  size_t bytes = sizeof(T) * static_cast<size_t>(count);
  if (numInputs > 0 && count > 0)
    std::memcpy(acc.data(), inputs[0], bytes);
  for (int64_t i = 1; i < numInputs && count > 0; ++i) {
    std::memcpy(next.data(), inputs[i], bytes);
    for (int64_t e = 0; e < count; ++e)
      acc[e] = combine<T>(op, acc[e], next[e]);
  }
  if (count > 0)
    std::memcpy(out, acc.data(), bytes);
}

/// f16/bf16: widen to f32, combine in f32, round once.
void reduceHalf(ReduceOp op, bool isBf16, const void *const *inputs,
                int64_t numInputs, int64_t count, void *out) {
  auto widen = isBf16 ? bf16ToFloat : f16ToFloat;
  auto narrow = isBf16 ? floatToBf16 : floatToF16;
  std::vector<float> acc(count);
  std::vector<uint16_t> next(count);
  size_t bytes = sizeof(uint16_t) * static_cast<size_t>(count);
  for (int64_t i = 0; i < numInputs && count > 0; ++i) {
    std::memcpy(next.data(), inputs[i], bytes);
    for (int64_t e = 0; e < count; ++e)
      acc[e] =
          i == 0 ? widen(next[e]) : combine<float>(op, acc[e], widen(next[e]));
  }
  for (int64_t e = 0; e < count; ++e)
    next[e] = narrow(acc[e]);
  if (count > 0)
    std::memcpy(out, next.data(), bytes);
}

} // namespace

void reduceArrays(DataType type, ReduceOp op, const void *const *inputs,
                  int64_t numInputs, int64_t count, void *out) {
  switch (type) {
  case DataType::F32:
    return reduceNative<float>(op, inputs, numInputs, count, out);
  case DataType::F64:
    return reduceNative<double>(op, inputs, numInputs, count, out);
  case DataType::F16:
    return reduceHalf(op, /*isBf16=*/false, inputs, numInputs, count, out);
  case DataType::BF16:
    return reduceHalf(op, /*isBf16=*/true, inputs, numInputs, count, out);
  case DataType::I32:
    return reduceNative<int32_t>(op, inputs, numInputs, count, out);
  case DataType::I64:
    return reduceNative<int64_t>(op, inputs, numInputs, count, out);
  case DataType::I8:
    return reduceNative<int8_t>(op, inputs, numInputs, count, out);
  case DataType::U8:
    return reduceNative<uint8_t>(op, inputs, numInputs, count, out);
  }
}

//===----------------------------------------------------------------------===//
// Launcher
//===----------------------------------------------------------------------===//

absl::Status runOnDevices(Backend &backend,
                          const std::function<absl::Status(int64_t)> &fn) {
  std::vector<int64_t> devices(backend.devices().begin(),
                               backend.devices().end());
  // Mark every device live before any thread runs, so that a deadlock check
  // never counts a device that has not started yet as finished.
  for (int64_t device : devices)
    backend.setDeviceFinished(device, false);
  std::vector<std::thread> threads;
  threads.reserve(devices.size());
  for (int64_t device : devices) {
    auto body = [&backend, &fn, device] {
      absl::Status status = fn(device);
      // A failed device makes no more calls: release everyone waiting on it.
      // When the backend already failed this records nothing new.
      if (!status.ok())
        backend.abort(
            absl::Status(status.code(), absl::StrCat("device ", device, ": ",
                                                     status.message())));
      backend.setDeviceFinished(device, true);
    };
    // The system may run out of threads (RLIMIT_NPROC, or address space for
    // their stacks under ulimit -v): the devices already started are
    // released by the abort and joined, and the run fails with the limit
    // named instead of an uncaught std::system_error.
    try {
      threads.emplace_back(body);
    } catch (const std::system_error &error) {
      backend.abort(absl::ResourceExhaustedError(absl::StrCat(
          "cannot start the thread of device ", device, " (", threads.size(),
          " of ", devices.size(), " started): ", error.what(),
          "; a run takes one thread per device, within the process's "
          "thread and address-space limits (ulimit -u, ulimit -v; "
          "docs/limits.md)")));
      break;
    }
  }
  for (std::thread &thread : threads)
    thread.join();
  // Threads the caller starts next are not known to have finished.
  for (int64_t device : devices)
    backend.setDeviceFinished(device, false);
  return backend.firstError();
}

} // namespace polymesh::runtime
