//===- Tolerance.cpp - Comparing results with a derived float bound -------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// See Tolerance.h for the bound and docs/execution.md for its derivation.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/Tolerance.h"

#include "polymesh/Runtime/Runtime.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace polymesh;
using namespace polymesh::execution;

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

bool isFloat(ElementType type) {
  return type == ElementType::F32 || type == ElementType::F64 ||
         type == ElementType::F16 || type == ElementType::BF16;
}

bool isNarrow(ElementType type) {
  return type == ElementType::F16 || type == ElementType::BF16;
}

template <typename T> T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

double narrowToDouble(const llvm::fltSemantics &semantics, uint16_t bits) {
  llvm::APFloat value(semantics, llvm::APInt(16, bits));
  bool lost = false;
  value.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
                &lost);
  return value.convertToDouble();
}

double toDouble(ElementType type, const uint8_t *p) {
  switch (type) {
  case ElementType::F32:
    return load<float>(p);
  case ElementType::F64:
    return load<double>(p);
  case ElementType::F16:
    return narrowToDouble(llvm::APFloat::IEEEhalf(), load<uint16_t>(p));
  case ElementType::BF16:
    return narrowToDouble(llvm::APFloat::BFloat(), load<uint16_t>(p));
  case ElementType::I1:
  case ElementType::I8:
    return static_cast<double>(load<int8_t>(p));
  case ElementType::I32:
    return static_cast<double>(load<int32_t>(p));
  case ElementType::I64:
    return static_cast<double>(load<int64_t>(p));
  }
  return 0;
}

/// Precision (significand bits, implicit bit included) and smallest normal
/// exponent of a float type.
std::pair<int, int> precisionAndMinExponent(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return {24, -126};
  case ElementType::F64:
    return {53, -1022};
  case ElementType::F16:
    return {11, -14};
  case ElementType::BF16:
    return {8, -126};
  default:
    return {0, 0};
  }
}

std::string formatDouble(double value, const char *format = "%.2g") {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::format(format, value);
  return text;
}

} // namespace

//===----------------------------------------------------------------------===//
// The bound
//===----------------------------------------------------------------------===//

double execution::unitRoundoff(ElementType type) {
  if (!isFloat(type))
    return 0;
  return std::ldexp(1.0, -precisionAndMinExponent(type).first);
}

double execution::gammaBound(int64_t k, double u) {
  if (k <= 0)
    return 0;
  double ku = static_cast<double>(k) * u;
  if (ku >= 1)
    return kInfinity;
  return ku / (1 - ku);
}

double execution::halfUlp(ElementType type, double value) {
  if (!isFloat(type))
    return 0;
  auto [precision, minExponent] = precisionAndMinExponent(type);
  int exponent = minExponent;
  if (value != 0 && std::isfinite(value)) {
    // |value| = m * 2^e with m in [0.5, 1): the leading bit is 2^(e - 1).
    std::frexp(value, &exponent);
    exponent = std::max(exponent - 1, minExponent);
  }
  return std::ldexp(1.0, exponent - precision);
}

double execution::sumErrorBound(ElementType type, int64_t terms,
                                double computedMagnitude, double value) {
  if (!isFloat(type) || terms <= 1)
    return 0;
  double u = unitRoundoff(type);
  double gamma = gammaBound(terms - 1, u);
  if (!std::isfinite(gamma) || !std::isfinite(computedMagnitude))
    return kInfinity;
  double magnitude = std::fabs(computedMagnitude) / (1 - gamma);
  double bound = 2 * gamma * magnitude;
  // f16 and bf16 partials may also be added in f32 and rounded once.
  if (isNarrow(type))
    bound += halfUlp(type, value);
  return bound;
}

uint64_t execution::ulpDistance(ElementType type, const uint8_t *a,
                                const uint8_t *b) {
  // Sign-magnitude bits to a line where neighbouring floats are 1 apart.
  auto ordered = [&](const uint8_t *p) -> int64_t {
    uint64_t bits = 0;
    int width = static_cast<int>(elementSize(type)) * 8;
    std::memcpy(&bits, p, elementSize(type));
    uint64_t sign = uint64_t(1) << (width - 1);
    uint64_t magnitude = bits & (sign - 1);
    return (bits & sign) ? -static_cast<int64_t>(magnitude)
                         : static_cast<int64_t>(magnitude);
  };
  int64_t x = ordered(a), y = ordered(b);
  return x > y ? static_cast<uint64_t>(x) - static_cast<uint64_t>(y)
               : static_cast<uint64_t>(y) - static_cast<uint64_t>(x);
}

double execution::elementAsDouble(const HostTensor &tensor, int64_t linear) {
  ElementType type = tensor.getElementType();
  return toDouble(type, tensor.getData() + linear * elementSize(type));
}

//===----------------------------------------------------------------------===//
// The comparison
//===----------------------------------------------------------------------===//

std::string LeafComparison::summary() const {
  std::string text = "max " + std::to_string(maxUlps) + " ulp, rel " +
                     formatDouble(maxRelativeError) + ", " +
                     std::to_string(differing) + " of " +
                     std::to_string(elements) + " elements differ";
  if (bounded)
    text += ", largest error " + formatDouble(100 * maxBoundFraction) +
            "% of its bound";
  return text;
}

std::string LeafComparison::failureMessage() const {
  if (!firstFailure)
    return "";
  std::string text = firstFailure->message() + firstFailureDetail;
  if (firstFailure->mismatch.kind != "value")
    return text;
  int64_t failingTiles = 0;
  for (const TileComparison &tile : tiles)
    failingTiles += tile.failing > 0;
  text += " (" + std::to_string(failing) + " of " + std::to_string(elements) +
          " elements " + (bounded ? "beyond the bound" : "differ") + ", in " +
          std::to_string(failingTiles) + " of " + std::to_string(tiles.size()) +
          (tiles.size() == 1 ? " tile" : " tiles");
  int64_t listed = 0;
  for (const TileComparison &tile : tiles) {
    if (tile.failing == 0)
      continue;
    if (listed == 4) {
      text += ", ...";
      break;
    }
    text += (listed++ ? ", device " : ": device ") +
            std::to_string(tile.device) + " " + std::to_string(tile.failing) +
            " of " + std::to_string(tile.elements);
  }
  return text + ")";
}

LeafComparison execution::compareLeaf(const HostTensor &reference,
                                      const ShardedTensor &actual,
                                      const SumBound *bound) {
  LeafComparison result;
  const planner::TensorLayout &layout = actual.layout;
  ElementType type = actual.elementType;
  int64_t firstDevice = layout.mesh().deviceAt(0);
  if (reference.getElementType() != type) {
    result.firstFailure =
        TileMismatch{firstDevice,
                     {},
                     {"element type",
                      {},
                      -1,
                      elementTypeName(reference.getElementType()),
                      elementTypeName(type)}};
    return result;
  }
  if (reference.getShape() != layout.shape()) {
    result.firstFailure = TileMismatch{
        firstDevice,
        {},
        {"shape",
         {},
         -1,
         formatTensorType(reference.getElementType(), reference.getShape()),
         formatTensorType(type, layout.shape())}};
    return result;
  }
  // A bound for integers or for a tensor of another shape would be a
  // caller's mistake; comparing bit for bit is then the safe reading.
  if (bound && (!isFloat(type) || bound->magnitudes.getElementType() != type ||
                bound->magnitudes.getShape() != reference.getShape()))
    bound = nullptr;
  result.bounded = bound != nullptr;

  int64_t size = elementSize(type);
  for (const std::vector<int64_t> &group : layout.reductionGroups()) {
    std::optional<planner::Box> box = layout.boxOfDevice(group.front());
    if (!box || box->empty())
      continue;
    // A process of a multi-process run holds its own devices' tiles (and
    // the partials of the groups it checks): another process checks this.
    if (!actual.tiles.count(group.front()))
      continue;
    HostTensor got = groupTile(actual, group, *box);
    HostTensor expected = reference.extractBox(box->lo, box->hi);
    std::optional<HostTensor> magnitudes;
    if (bound)
      magnitudes = bound->magnitudes.extractBox(box->lo, box->hi);

    TileComparison tile{group.front(), got.getNumElements(), 0, 0};
    for (int64_t i = 0, e = got.getNumElements(); i < e; ++i) {
      const uint8_t *x = expected.getData() + i * size;
      const uint8_t *y = got.getData() + i * size;
      if (std::memcmp(x, y, size) == 0)
        continue;
      ++tile.differing;
      double want = toDouble(type, x), have = toDouble(type, y);
      bool finite = std::isfinite(want) && std::isfinite(have);
      bool within = false;
      double limit = 0;
      if (bound && std::isnan(want) && std::isnan(have)) {
        within = true;
      } else if (finite) {
        double diff = std::fabs(have - want);
        if (isFloat(type)) {
          result.maxUlps = std::max(result.maxUlps, ulpDistance(type, x, y));
          result.maxRelativeError =
              std::max(result.maxRelativeError,
                       want == 0 ? kInfinity : diff / std::fabs(want));
        }
        if (bound) {
          limit =
              sumErrorBound(type, bound->terms, elementAsDouble(*magnitudes, i),
                            std::max(std::fabs(want), std::fabs(have)));
          within = std::isfinite(limit) && diff <= limit;
          if (std::isfinite(limit) && limit > 0)
            result.maxBoundFraction =
                std::max(result.maxBoundFraction, diff / limit);
        }
      }
      if (within)
        continue;
      ++tile.failing;
      if (result.firstFailure)
        continue;
      std::vector<int64_t> index = expected.delinearize(i);
      TileMismatch mismatch{group.front(), index,
                            Mismatch{"value", index, i,
                                     expected.formatElement(i),
                                     got.formatElement(i)}};
      for (size_t d = 0; d < index.size(); ++d)
        mismatch.globalIndex[d] += box->lo[d];
      result.firstFailure = std::move(mismatch);
      if (bound) {
        result.firstFailureDetail =
            !finite ? ", not finite"
            : std::isfinite(limit)
                ? ", |diff| " + formatDouble(std::fabs(have - want), "%.3g") +
                      " > bound " + formatDouble(limit, "%.3g") +
                      " (n = " + std::to_string(bound->terms) + ")"
                : ", and no bound holds (n = " + std::to_string(bound->terms) +
                      ": n u >= 1, or an infinite magnitude)";
      }
    }
    result.elements += tile.elements;
    result.differing += tile.differing;
    result.failing += tile.failing;
    result.tiles.push_back(tile);
  }
  return result;
}
