//===- InputFill.cpp - Deterministic inputs per global element ------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// The pattern and the reasons for it are in InputFill.h.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/InputFill.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/Support/ErrorHandling.h"

#include <array>
#include <cassert>
#include <cstring>

using namespace polymesh::execution;

namespace {

/// The 256 f16 or bf16 values of the pattern, (k / 32 - 4) for k = h >> 24,
/// in their 16-bit encodings. Every one is exact, so converting through
/// APFloat once and looking up afterwards is both exact and fast.
std::array<uint16_t, 256> makeHalfTable(const llvm::fltSemantics &semantics) {
  std::array<uint16_t, 256> table;
  for (unsigned k = 0; k < 256; ++k) {
    llvm::APFloat value(static_cast<double>(k) / 32.0 - 4.0);
    bool losesInfo = false;
    value.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    assert(!losesInfo && "fill value is not exact");
    table[k] = static_cast<uint16_t>(value.bitcastToAPInt().getZExtValue());
  }
  return table;
}

const std::array<uint16_t, 256> &halfTable(ElementType type) {
  static const std::array<uint16_t, 256> f16 =
      makeHalfTable(llvm::APFloat::IEEEhalf());
  static const std::array<uint16_t, 256> bf16 =
      makeHalfTable(llvm::APFloat::BFloat());
  return type == ElementType::F16 ? f16 : bf16;
}

template <typename T> void store(void *dst, T value) {
  std::memcpy(dst, &value, sizeof(T));
}

} // namespace

uint32_t polymesh::execution::fillHash(uint64_t globalIndex, uint32_t stream) {
  // Unsigned 64-bit arithmetic wraps modulo 2^64; its low 32 bits are the
  // product modulo 2^32.
  uint64_t x = globalIndex + 1000003ull * stream;
  return static_cast<uint32_t>(x * 2654435761ull);
}

double polymesh::execution::fillValue(ElementType type, uint64_t globalIndex,
                                      uint32_t stream) {
  uint32_t h = fillHash(globalIndex, stream);
  switch (type) {
  case ElementType::F32:
  case ElementType::F64:
    return static_cast<double>(h >> 22) / 64.0 - 8.0;
  case ElementType::F16:
  case ElementType::BF16:
    return static_cast<double>(h >> 24) / 32.0 - 4.0;
  case ElementType::I1:
    return static_cast<double>(h >> 31);
  case ElementType::I8:
    return static_cast<double>(static_cast<int64_t>(h >> 28) - 8);
  case ElementType::I32:
    return static_cast<double>(static_cast<int64_t>(h >> 16) - 32768);
  case ElementType::I64:
    return static_cast<double>(static_cast<int64_t>(h) - (int64_t(1) << 31));
  }
  llvm_unreachable("unknown element type");
}

void polymesh::execution::fillElement(ElementType type, uint64_t globalIndex,
                                      uint32_t stream, void *dst) {
  uint32_t h = fillHash(globalIndex, stream);
  switch (type) {
  case ElementType::F32:
    store(dst, static_cast<float>(h >> 22) / 64.0f - 8.0f);
    return;
  case ElementType::F64:
    store(dst, static_cast<double>(h >> 22) / 64.0 - 8.0);
    return;
  case ElementType::F16:
  case ElementType::BF16:
    store(dst, halfTable(type)[h >> 24]);
    return;
  case ElementType::I1:
    store(dst, static_cast<uint8_t>(h >> 31));
    return;
  case ElementType::I8:
    store(dst, static_cast<int8_t>(static_cast<int32_t>(h >> 28) - 8));
    return;
  case ElementType::I32:
    store(dst, static_cast<int32_t>(h >> 16) - 32768);
    return;
  case ElementType::I64:
    store(dst, static_cast<int64_t>(h) - (int64_t(1) << 31));
    return;
  }
  llvm_unreachable("unknown element type");
}

HostTensor polymesh::execution::makeInput(ElementType type,
                                          const std::vector<int64_t> &shape,
                                          uint32_t stream) {
  HostTensor tensor(type, shape);
  fillTile(tensor, shape, std::vector<int64_t>(shape.size(), 0), stream);
  return tensor;
}

void polymesh::execution::fillTile(HostTensor &tile,
                                   const std::vector<int64_t> &globalShape,
                                   const std::vector<int64_t> &lo,
                                   uint32_t stream) {
  const std::vector<int64_t> &local = tile.getShape();
  const int64_t rank = tile.getRank();
  assert(static_cast<int64_t>(globalShape.size()) == rank &&
         static_cast<int64_t>(lo.size()) == rank && "tile rank differs");
  for (int64_t i = 0; i < rank; ++i)
    assert(0 <= lo[i] && lo[i] <= globalShape[i] && "tile outside tensor");
  const int64_t n = tile.getNumElements();
  if (n == 0)
    return;

  const ElementType type = tile.getElementType();
  const int64_t size = elementSize(type);
  uint8_t *dst = tile.getData();
  // Walk the tile row-major with an odometer over local indices, tracking
  // whether the current element lies inside the global tensor.
  std::vector<int64_t> index(rank, 0);
  for (int64_t e = 0; e < n; ++e, dst += size) {
    bool inside = true;
    uint64_t global = 0;
    for (int64_t i = 0; i < rank; ++i) {
      int64_t g = lo[i] + index[i];
      inside &= g < globalShape[i];
      global = global * globalShape[i] + g;
    }
    if (inside)
      fillElement(type, global, stream, dst);
    else
      std::memset(dst, 0, size);
    for (int64_t i = rank - 1; i >= 0; --i) {
      if (++index[i] < local[i])
        break;
      index[i] = 0;
    }
  }
}
