//===- HostTensor.cpp - Tensors in host memory ----------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/HostTensor.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/APInt.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cassert>
#include <charconv>
#include <cstring>

using namespace polymesh::execution;

namespace {

constexpr ElementType kAllTypes[] = {
    ElementType::F32, ElementType::F64, ElementType::F16, ElementType::BF16,
    ElementType::I1,  ElementType::I8,  ElementType::I32, ElementType::I64};

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

template <typename T> T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

/// Prints a float as the shortest decimal that reads back to the same value
/// of its type's precision (f16 and bf16 through their exact f32 value),
/// then its bits: two NaNs, or 0 and -0, print differently, which a
/// bit-exact comparison must show.
template <typename T> std::string shortest(T value) {
  char buffer[64];
  std::to_chars_result r =
      std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, r.ptr);
}

std::string formatFloat(const llvm::fltSemantics &semantics, uint64_t bits,
                        unsigned width) {
  llvm::APFloat value(semantics, llvm::APInt(width, bits));
  std::string text;
  if (&semantics == &llvm::APFloat::IEEEdouble()) {
    text = shortest(value.convertToDouble());
  } else {
    // f16 and bf16 widen to f32 exactly.
    bool losesInfo = false;
    value.convert(llvm::APFloat::IEEEsingle(),
                  llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    text = shortest(value.convertToFloat());
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  os << text << " (" << llvm::format_hex(bits, 2 + width / 4) << ")";
  return out;
}

std::string formatIndex(const std::vector<int64_t> &index) {
  std::string out = "[";
  for (size_t i = 0; i < index.size(); ++i)
    out += (i ? ", " : "") + std::to_string(index[i]);
  return out + "]";
}

} // namespace

int64_t polymesh::execution::elementSize(ElementType type) {
  switch (type) {
  case ElementType::F32:
  case ElementType::I32:
    return 4;
  case ElementType::F64:
  case ElementType::I64:
    return 8;
  case ElementType::F16:
  case ElementType::BF16:
    return 2;
  case ElementType::I1:
  case ElementType::I8:
    return 1;
  }
  llvm_unreachable("unknown element type");
}

const char *polymesh::execution::elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::F64:
    return "f64";
  case ElementType::F16:
    return "f16";
  case ElementType::BF16:
    return "bf16";
  case ElementType::I1:
    return "i1";
  case ElementType::I8:
    return "i8";
  case ElementType::I32:
    return "i32";
  case ElementType::I64:
    return "i64";
  }
  llvm_unreachable("unknown element type");
}

std::optional<ElementType>
polymesh::execution::parseElementType(const std::string &name) {
  for (ElementType type : kAllTypes)
    if (name == elementTypeName(type))
      return type;
  return std::nullopt;
}

std::string
polymesh::execution::formatTensorType(ElementType type,
                                      const std::vector<int64_t> &shape) {
  std::string out;
  for (int64_t d : shape)
    out += std::to_string(d) + "x";
  return out + elementTypeName(type);
}

HostTensor::HostTensor(ElementType type, std::vector<int64_t> shape)
    : type(type), shape(std::move(shape)) {
  for ([[maybe_unused]] int64_t d : this->shape)
    assert(d >= 0 && "negative dimension");
  bytes.assign(product(this->shape) * elementSize(type), 0);
}

int64_t HostTensor::getNumElements() const { return product(shape); }

int64_t HostTensor::linearize(const std::vector<int64_t> &index) const {
  assert(index.size() == shape.size() && "index rank differs");
  int64_t linear = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    assert(index[i] >= 0 && index[i] < shape[i] && "index out of bounds");
    linear = linear * shape[i] + index[i];
  }
  return linear;
}

std::vector<int64_t> HostTensor::delinearize(int64_t linear) const {
  std::vector<int64_t> index(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    index[i] = shape[i] ? linear % shape[i] : 0;
    linear = shape[i] ? linear / shape[i] : 0;
  }
  return index;
}

HostTensor HostTensor::extractBox(const std::vector<int64_t> &lo,
                                  const std::vector<int64_t> &hi) const {
  assert(lo.size() == shape.size() && hi.size() == shape.size() &&
         "box rank differs");
  std::vector<int64_t> boxShape(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    assert(0 <= lo[i] && lo[i] <= hi[i] && hi[i] <= shape[i] &&
           "box outside the tensor");
    boxShape[i] = hi[i] - lo[i];
  }
  HostTensor box(type, boxShape);
  if (box.getNumElements() == 0)
    return box;

  // Copy whole rows of the innermost dimension; an odometer walks the outer
  // dimensions of the box.
  const int64_t size = elementSize(type);
  const int64_t rank = getRank();
  const int64_t rowBytes = rank ? boxShape.back() * size : size;
  std::vector<int64_t> strides(rank, 1);
  for (int64_t i = rank - 1; i > 0; --i)
    strides[i - 1] = strides[i] * shape[i];
  std::vector<int64_t> outer(rank, 0);
  uint8_t *dst = box.getData();
  while (true) {
    int64_t offset = 0;
    for (int64_t i = 0; i < rank; ++i)
      offset += (lo[i] + outer[i]) * strides[i];
    std::memcpy(dst, bytes.data() + offset * size, rowBytes);
    dst += rowBytes;
    // Advance the odometer over all dimensions but the innermost.
    int64_t i = rank - 2;
    for (; i >= 0; --i) {
      if (++outer[i] < boxShape[i])
        break;
      outer[i] = 0;
    }
    if (i < 0)
      break;
  }
  return box;
}

std::string HostTensor::formatElement(int64_t linear) const {
  assert(linear >= 0 && linear < getNumElements() && "element out of range");
  const uint8_t *p = bytes.data() + linear * elementSize(type);
  switch (type) {
  case ElementType::F32:
    return formatFloat(llvm::APFloat::IEEEsingle(), load<uint32_t>(p), 32);
  case ElementType::F64:
    return formatFloat(llvm::APFloat::IEEEdouble(), load<uint64_t>(p), 64);
  case ElementType::F16:
    return formatFloat(llvm::APFloat::IEEEhalf(), load<uint16_t>(p), 16);
  case ElementType::BF16:
    return formatFloat(llvm::APFloat::BFloat(), load<uint16_t>(p), 16);
  case ElementType::I1: {
    // Generated code stores 0 or 1; anything else is printed as a byte so a
    // corrupt value is visible.
    uint8_t b = *p;
    return b == 0 ? "false" : b == 1 ? "true" : "byte " + std::to_string(b);
  }
  case ElementType::I8:
    return std::to_string(load<int8_t>(p));
  case ElementType::I32:
    return std::to_string(load<int32_t>(p));
  case ElementType::I64:
    return std::to_string(load<int64_t>(p));
  }
  llvm_unreachable("unknown element type");
}

std::string HostTensor::toString(int64_t maxElements) const {
  std::string out = formatTensorType(type, shape) + " [";
  int64_t n = getNumElements();
  for (int64_t i = 0; i < n && i < maxElements; ++i) {
    std::string element = formatElement(i);
    // Without the bits: a listing is for reading values.
    out += (i ? ", " : "") + element.substr(0, element.find(" ("));
  }
  if (n > maxElements)
    out += ", ...";
  return out + "]";
}

std::string Mismatch::message() const {
  if (kind != "value")
    return kind + ": expected " + expected + ", got " + actual;
  return "value at " + formatIndex(index) + " (linear " +
         std::to_string(linearIndex) + "): expected " + expected + ", got " +
         actual;
}

std::optional<Mismatch>
polymesh::execution::compareBitExact(const HostTensor &expected,
                                     const HostTensor &actual) {
  if (expected.getElementType() != actual.getElementType())
    return Mismatch{"element type",
                    {},
                    -1,
                    elementTypeName(expected.getElementType()),
                    elementTypeName(actual.getElementType())};
  if (expected.getShape() != actual.getShape())
    return Mismatch{"shape",
                    {},
                    -1,
                    formatIndex(expected.getShape()),
                    formatIndex(actual.getShape())};
  const int64_t size = elementSize(expected.getElementType());
  const int64_t total = expected.getSizeInBytes();
  const uint8_t *e = expected.getData();
  const uint8_t *a = actual.getData();
  // memcmp finds equal tensors fast; only a difference needs the element.
  if (total == 0 || std::memcmp(e, a, total) == 0)
    return std::nullopt;
  for (int64_t offset = 0; offset < total; offset += size) {
    if (std::memcmp(e + offset, a + offset, size) == 0)
      continue;
    int64_t linear = offset / size;
    return Mismatch{"value", expected.delinearize(linear), linear,
                    expected.formatElement(linear),
                    actual.formatElement(linear)};
  }
  llvm_unreachable("memcmp found a difference that no element has");
}
