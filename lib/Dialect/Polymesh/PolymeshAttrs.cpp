//===- PolymeshAttrs.cpp - Mesh and sharding attributes -------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PolymeshAttrs.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Planner/Layout.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace polymesh;

#define GET_ATTRDEF_CLASSES
#include "polymesh/Dialect/Polymesh/PolymeshAttrs.cpp.inc"

void PolymeshDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "polymesh/Dialect/Polymesh/PolymeshAttrs.cpp.inc"
      >();
}

namespace {
/// Multiplies non-negative values; false on overflow.
bool mulOverflows(int64_t a, int64_t b, int64_t &result) {
  return llvm::MulOverflow(a, b, result);
}

void printQuoted(llvm::raw_ostream &os, StringRef text) {
  os << '"';
  llvm::printEscapedString(text, os);
  os << '"';
}

/// Parses `[a, b, ...]` with `parseElement`, allowing an empty list.
ParseResult parseBracketList(AsmParser &parser,
                             function_ref<ParseResult()> parseElement) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                        parseElement);
}
} // namespace

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<MeshAxisAttr> axes,
                               ArrayRef<int64_t> deviceIds) {
  llvm::StringSet<> names;
  int64_t product = 1;
  for (MeshAxisAttr axis : axes) {
    if (axis.getSize() <= 0)
      return emitError() << "mesh axis \"" << axis.getName() << "\" has size "
                         << axis.getSize() << "; expected a positive size";
    if (!names.insert(axis.getName()).second)
      return emitError() << "duplicate mesh axis \"" << axis.getName()
                         << "\"; axis names must be unique";
    if (mulOverflows(product, axis.getSize(), product))
      return emitError() << "the product of the mesh axis sizes overflows "
                            "int64 at axis \""
                         << axis.getName() << "\"";
  }
  // Passes and plans work per device: a larger mesh would run for hours or
  // out of memory (docs/limits.md).
  if (product > planner::kMaxMeshDevices)
    return emitError() << "mesh has " << product << " devices; at most "
                       << planner::kMaxMeshDevices << " (2^20) are supported";
  if (deviceIds.empty())
    return success();
  if (static_cast<int64_t>(deviceIds.size()) != product)
    return emitError() << "mesh has " << deviceIds.size()
                       << " device ids but its axes hold " << product
                       << " devices; expected one id per device";
  llvm::DenseSet<int64_t> seen;
  for (int64_t id : deviceIds) {
    if (id < 0)
      return emitError() << "device id " << id
                         << " is negative; expected a non-negative id";
    if (!seen.insert(id).second)
      return emitError() << "device id " << id
                         << " appears more than once; ids must be distinct";
  }
  return success();
}

int64_t MeshAttr::getNumDevices() const {
  int64_t product = 1;
  for (MeshAxisAttr axis : getAxes())
    product *= axis.getSize();
  return product;
}

MeshAxisAttr MeshAttr::getAxis(StringRef name) const {
  for (MeshAxisAttr axis : getAxes())
    if (axis.getName() == name)
      return axis;
  return {};
}

int64_t MeshAttr::getDeviceId(int64_t position) const {
  ArrayRef<int64_t> ids = getDeviceIds();
  return ids.empty() ? position : ids[position];
}

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<MeshAxisAttr> axes;
  SmallVector<int64_t> deviceIds;
  MLIRContext *context = parser.getContext();
  if (parser.parseLess() || parseBracketList(parser, [&]() -> ParseResult {
        std::string name;
        int64_t size;
        if (parser.parseString(&name) || parser.parseEqual() ||
            parser.parseInteger(size))
          return failure();
        axes.push_back(MeshAxisAttr::get(context, name, size));
        return success();
      }))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    SMLoc idsLoc = parser.getCurrentLocation();
    if (parser.parseKeyword("device_ids") || parser.parseEqual() ||
        parseBracketList(parser, [&]() -> ParseResult {
          int64_t id;
          if (parser.parseInteger(id))
            return failure();
          deviceIds.push_back(id);
          return success();
        }))
      return {};
    // An empty list would print as no list at all; reject it outright.
    if (deviceIds.empty()) {
      parser.emitError(idsLoc)
          << "'device_ids=[]' lists no device; omit it for ids 0..N-1";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<MeshAttr>(loc, context, axes, deviceIds);
}

void MeshAttr::print(AsmPrinter &printer) const {
  llvm::raw_ostream &os = printer.getStream();
  os << "<[";
  llvm::interleaveComma(getAxes(), os, [&](MeshAxisAttr axis) {
    printQuoted(os, axis.getName());
    os << "=" << axis.getSize();
  });
  os << "]";
  if (!getDeviceIds().empty()) {
    os << ", device_ids=[";
    llvm::interleaveComma(getDeviceIds(), os);
    os << "]";
  }
  os << ">";
}

//===----------------------------------------------------------------------===//
// AxisRefAttr
//===----------------------------------------------------------------------===//

int64_t AxisRefAttr::getSizeIn(MeshAttr mesh) const {
  if (isSubAxis())
    return getSize();
  MeshAxisAttr axis = mesh.getAxis(getName());
  return axis ? axis.getSize() : 1;
}

void AxisRefAttr::print(llvm::raw_ostream &os) const {
  printQuoted(os, getName());
  if (isSubAxis())
    os << ":(" << getPreSize() << ")" << getSize();
}

void AxisRefAttr::print(AsmPrinter &printer) const {
  printer.getStream() << "<";
  print(printer.getStream());
  printer.getStream() << ">";
}

namespace {
/// Parses `"x"` or `"x":(m)k` (without angle brackets).
AxisRefAttr parseAxisRefBody(AsmParser &parser) {
  std::string name;
  if (parser.parseString(&name))
    return {};
  int64_t preSize = 0, size = 0;
  if (succeeded(parser.parseOptionalColon())) {
    SMLoc loc = parser.getCurrentLocation();
    if (parser.parseLParen() || parser.parseInteger(preSize) ||
        parser.parseRParen() || parser.parseInteger(size))
      return {};
    // Structural checks that need no mesh; division by the axis size is
    // checked where the mesh is known.
    if (preSize < 1 || size < 2) {
      parser.emitError(loc)
          << "sub-axis \"" << name << "\":(" << preSize << ")" << size
          << " is invalid; expected a pre-size >= 1 and "
             "a size >= 2";
      return {};
    }
  }
  return AxisRefAttr::get(parser.getContext(), name, preSize, size);
}
} // namespace

Attribute AxisRefAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  AxisRefAttr result = parseAxisRefBody(parser);
  if (!result || parser.parseGreater())
    return {};
  return result;
}

//===----------------------------------------------------------------------===//
// DimShardingAttr
//===----------------------------------------------------------------------===//

void DimShardingAttr::print(llvm::raw_ostream &os) const {
  os << "{";
  llvm::interleaveComma(getAxes(), os,
                        [&](AxisRefAttr axis) { axis.print(os); });
  if (!getIsClosed())
    os << (getAxes().empty() ? "?" : ", ?");
  os << "}";
  if (getPriority() >= 0)
    os << "p" << getPriority();
}

DimShardingAttr DimShardingAttr::withoutPriority() const {
  if (getPriority() < 0)
    return *this;
  return DimShardingAttr::get(getContext(), getAxes(), getIsClosed());
}

void DimShardingAttr::print(AsmPrinter &printer) const {
  printer.getStream() << "<";
  print(printer.getStream());
  printer.getStream() << ">";
}

namespace {
/// Parses the priority that may follow a dimension sharding's `}`: `p0`,
/// `p12`. Sets `priority` to -1 when there is none.
ParseResult parseOptionalPriority(AsmParser &parser, int64_t &priority) {
  priority = -1;
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (failed(parser.parseOptionalKeyword(&keyword)))
    return success();
  if (keyword.size() < 2 || keyword.front() != 'p' ||
      !llvm::all_of(keyword.drop_front(), llvm::isDigit) ||
      keyword.drop_front().getAsInteger(10, priority) || priority < 0)
    return parser.emitError(loc)
           << "expected a dimension sharding priority such as 'p0' or 'p2' "
              "after '}', got '"
           << keyword << "'";
  return success();
}

/// Parses `{"a", "b"}`, `{"a", ?}`, `{?}` or `{}`, each optionally followed
/// by a priority (`{"a"}p1`).
DimShardingAttr parseDimShardingBody(AsmParser &parser) {
  if (parser.parseLBrace())
    return {};
  SmallVector<AxisRefAttr> axes;
  bool isClosed = true;
  int64_t priority = -1;
  if (succeeded(parser.parseOptionalRBrace())) {
    if (parseOptionalPriority(parser, priority))
      return {};
    return DimShardingAttr::get(parser.getContext(), axes, isClosed, priority);
  }
  while (true) {
    SMLoc loc = parser.getCurrentLocation();
    if (succeeded(parser.parseOptionalQuestion())) {
      isClosed = false;
      if (failed(parser.parseOptionalRBrace())) {
        parser.emitError(loc)
            << "'?' must be the last entry of a dimension sharding";
        return {};
      }
      break;
    }
    AxisRefAttr axis = parseAxisRefBody(parser);
    if (!axis)
      return {};
    axes.push_back(axis);
    if (succeeded(parser.parseOptionalRBrace()))
      break;
    if (parser.parseComma())
      return {};
  }
  if (parseOptionalPriority(parser, priority))
    return {};
  return DimShardingAttr::get(parser.getContext(), axes, isClosed, priority);
}

/// Parses `{"a", "b":(1)2}` (a set of axis refs).
ParseResult parseAxisSet(AsmParser &parser, SmallVectorImpl<AxisRefAttr> &out) {
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Braces, [&]() -> ParseResult {
        AxisRefAttr axis = parseAxisRefBody(parser);
        if (!axis)
          return failure();
        out.push_back(axis);
        return success();
      });
}

void printAxisSet(llvm::raw_ostream &os, ArrayRef<AxisRefAttr> axes) {
  os << "{";
  llvm::interleaveComma(axes, os, [&](AxisRefAttr axis) { axis.print(os); });
  os << "}";
}
} // namespace

Attribute DimShardingAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  DimShardingAttr result = parseDimShardingBody(parser);
  if (!result || parser.parseGreater())
    return {};
  return result;
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

ShardingAttr ShardingAttr::getReplicated(MLIRContext *context,
                                         FlatSymbolRefAttr meshName,
                                         int64_t rank) {
  SmallVector<DimShardingAttr> dims(
      rank, DimShardingAttr::get(context, {}, /*isClosed=*/true));
  return ShardingAttr::get(context, meshName, dims, {}, {});
}

bool ShardingAttr::isMaximal() const {
  return getDims().empty() && getReplicated().empty() && getUnreduced().empty();
}

ShardingAttr ShardingAttr::withRank(int64_t rank) const {
  if (rank <= 0 || !isMaximal())
    return *this;
  return getReplicated(getContext(), getMeshName(), rank);
}

ShardingAttr ShardingAttr::parseBody(AsmParser &parser) {
  StringAttr meshName;
  SmallVector<DimShardingAttr> dims;
  SmallVector<AxisRefAttr> replicated, unreduced;
  if (parser.parseSymbolName(meshName) || parser.parseComma() ||
      parseBracketList(parser, [&]() -> ParseResult {
        DimShardingAttr dim = parseDimShardingBody(parser);
        if (!dim)
          return failure();
        dims.push_back(dim);
        return success();
      }))
    return {};
  bool seenReplicated = false, seenUnreduced = false;
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    if (succeeded(parser.parseOptionalKeyword("replicated")) &&
        !seenReplicated && !seenUnreduced) {
      seenReplicated = true;
      if (parser.parseEqual() || parseAxisSet(parser, replicated))
        return {};
      continue;
    }
    if (succeeded(parser.parseOptionalKeyword("unreduced")) && !seenUnreduced) {
      seenUnreduced = true;
      if (parser.parseEqual() || parseAxisSet(parser, unreduced))
        return {};
      continue;
    }
    parser.emitError(loc) << "expected 'replicated={...}' then "
                             "'unreduced={...}', each at most once";
    return {};
  }
  return ShardingAttr::get(parser.getContext(),
                           FlatSymbolRefAttr::get(meshName), dims, replicated,
                           unreduced);
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  ShardingAttr result = parseBody(parser);
  if (!result || parser.parseGreater())
    return {};
  return result;
}

void ShardingAttr::printBody(AsmPrinter &printer) const {
  llvm::raw_ostream &os = printer.getStream();
  printer.printSymbolName(getMeshName().getValue());
  os << ", [";
  llvm::interleaveComma(getDims(), os,
                        [&](DimShardingAttr dim) { dim.print(os); });
  os << "]";
  if (!getReplicated().empty()) {
    os << ", replicated=";
    printAxisSet(os, getReplicated());
  }
  if (!getUnreduced().empty()) {
    os << ", unreduced=";
    printAxisSet(os, getUnreduced());
  }
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer.getStream() << "<";
  printBody(printer);
  printer.getStream() << ">";
}

namespace {
/// Where an axis reference appears, for diagnostics.
struct AxisUse {
  AxisRefAttr ref;
  std::string where;
  /// Factor range [lo, hi) in pre-size space of the axis.
  int64_t lo, hi;
};
} // namespace

LogicalResult
ShardingAttr::verifyFor(function_ref<InFlightDiagnostic()> emitError,
                        MeshAttr mesh, Type type) const {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (!tensorType)
    return emitError() << "sharding on a value of type " << type
                       << "; expected a ranked tensor";
  // A maximal sharding names its one device by the mesh; it fits any rank.
  bool maximal = isMaximal() && mesh.getAxes().empty();
  if (!maximal &&
      static_cast<int64_t>(getDims().size()) != tensorType.getRank()) {
    InFlightDiagnostic diag = emitError();
    diag << "sharding has " << getDims().size()
         << " dimension shardings but the tensor type " << tensorType
         << " has rank " << tensorType.getRank();
    if (getDims().empty())
      diag << "; '[]' (the whole tensor on one device) needs a mesh without "
              "axes, and mesh "
           << getMeshName() << " has " << mesh.getAxes().size() << " axes";
    return diag;
  }

  SmallVector<AxisUse> uses;
  auto check = [&](AxisRefAttr ref, std::string where) -> LogicalResult {
    MeshAxisAttr axis = mesh.getAxis(ref.getName());
    if (!axis) {
      InFlightDiagnostic diag = emitError();
      diag << "unknown axis \"" << ref.getName() << "\" in " << where
           << "; mesh " << getMeshName() << " has axes ";
      if (mesh.getAxes().empty())
        diag << "none";
      llvm::interleaveComma(mesh.getAxes(), diag, [&](MeshAxisAttr a) {
        diag << "\"" << a.getName() << "\"";
      });
      return diag;
    }
    int64_t lo = 1, hi = axis.getSize();
    if (ref.isSubAxis()) {
      int64_t span;
      if (mulOverflows(ref.getPreSize(), ref.getSize(), span) ||
          axis.getSize() % span != 0) {
        std::string text;
        llvm::raw_string_ostream textOs(text);
        ref.print(textOs);
        return emitError()
               << "sub-axis " << text << " in " << where
               << " does not divide axis \"" << ref.getName() << "\" of size "
               << axis.getSize()
               << "; expected pre-size * size to divide the axis size";
      }
      if (span == axis.getSize() && ref.getPreSize() == 1) {
        return emitError() << "sub-axis \"" << ref.getName() << "\":(1)"
                           << ref.getSize() << " in " << where
                           << " is the whole axis; write \"" << ref.getName()
                           << "\"";
      }
      lo = ref.getPreSize();
      hi = span;
    }
    for (const AxisUse &use : uses) {
      if (use.ref.getName() != ref.getName())
        continue;
      std::string first, second;
      llvm::raw_string_ostream firstOs(first), secondOs(second);
      use.ref.print(firstOs);
      ref.print(secondOs);
      // The same reference twice is a reuse even where its range is empty
      // (a size-1 axis), as the planner counts it.
      if ((lo < use.hi && use.lo < hi) || (lo == use.lo && hi == use.hi))
        return emitError() << "axis " << second << " in " << where
                           << " overlaps " << first << " in " << use.where
                           << "; each mesh axis may shard a value only once";
      // Disjoint pieces of one axis must come from one factorization of it:
      // the more minor piece starts at a multiple of where the other ends.
      bool compatible = lo >= use.hi ? lo % use.hi == 0 : use.lo % hi == 0;
      if (!compatible)
        return emitError() << "sub-axis " << second << " in " << where
                           << " and " << first << " in " << use.where
                           << " do not split axis \"" << ref.getName()
                           << "\" the same way; expected the larger pre-size "
                              "to be a multiple of the other's pre-size * size";
    }
    uses.push_back({ref, std::move(where), lo, hi});
    return success();
  };

  for (auto [index, dim] : llvm::enumerate(getDims()))
    for (AxisRefAttr ref : dim.getAxes())
      if (failed(check(ref, "dimension " + std::to_string(index))))
        return failure();
  for (AxisRefAttr ref : getReplicated())
    if (failed(check(ref, "replicated")))
      return failure();
  for (AxisRefAttr ref : getUnreduced())
    if (failed(check(ref, "unreduced")))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// BoxTransferAttr and TransferStepAttr
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PolymeshEnums.cpp.inc"

namespace {
void printIntList(llvm::raw_ostream &os, ArrayRef<int64_t> values) {
  os << "[";
  llvm::interleaveComma(values, os);
  os << "]";
}

ParseResult parseIntList(AsmParser &parser, SmallVectorImpl<int64_t> &out) {
  return parseBracketList(parser, [&]() -> ParseResult {
    int64_t value;
    if (parser.parseInteger(value))
      return failure();
    out.push_back(value);
    return success();
  });
}
} // namespace

int64_t BoxTransferAttr::getNumElements() const {
  int64_t product = 1;
  for (auto [lo, hi] : llvm::zip(getLo(), getHi()))
    product *= std::max<int64_t>(0, hi - lo);
  return product;
}

void BoxTransferAttr::printBody(llvm::raw_ostream &os) const {
  os << getSrcDevice() << " -> ";
  printIntList(os, getDstDevices());
  os << ", ";
  printIntList(os, getLo());
  os << " : ";
  printIntList(os, getHi());
  if (getFromDestination())
    os << ", from_destination";
  if (getIntoSource())
    os << ", into_source";
  if (getAccumulate())
    os << ", accumulate";
  if (getPhase() != 0)
    os << ", phase = " << getPhase();
}

BoxTransferAttr BoxTransferAttr::parseBody(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  int64_t src;
  SmallVector<int64_t> dsts, lo, hi;
  if (parser.parseInteger(src) || parser.parseArrow() ||
      parseIntList(parser, dsts) || parser.parseComma() ||
      parseIntList(parser, lo) || parser.parseColon() ||
      parseIntList(parser, hi))
    return {};
  bool fromDestination = false, intoSource = false, accumulate = false;
  int64_t phase = 0;
  while (succeeded(parser.parseOptionalComma())) {
    if (succeeded(parser.parseOptionalKeyword("from_destination")))
      fromDestination = true;
    else if (succeeded(parser.parseOptionalKeyword("into_source")))
      intoSource = true;
    else if (succeeded(parser.parseOptionalKeyword("accumulate")))
      accumulate = true;
    else if (succeeded(parser.parseOptionalKeyword("phase"))) {
      if (parser.parseEqual() || parser.parseInteger(phase))
        return {};
    } else {
      parser.emitError(parser.getCurrentLocation())
          << "expected 'from_destination', 'into_source', 'accumulate' or "
             "'phase = N'";
      return {};
    }
  }
  if (lo.size() != hi.size()) {
    parser.emitError(loc) << "box corners have ranks " << lo.size() << " and "
                          << hi.size();
    return {};
  }
  return BoxTransferAttr::get(parser.getContext(), src, dsts, lo, hi,
                              fromDestination, intoSource, accumulate, phase);
}

Attribute BoxTransferAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  BoxTransferAttr result = parseBody(parser);
  if (!result || parser.parseGreater())
    return {};
  return result;
}

void BoxTransferAttr::print(AsmPrinter &printer) const {
  printer.getStream() << "<";
  printBody(printer.getStream());
  printer.getStream() << ">";
}

std::pair<ArrayRef<int64_t>, ArrayRef<int64_t>>
TransferStepAttr::getPiece(size_t index) const {
  size_t rank = getPieceCorners().size() / (2 * getPieceOwners().size());
  ArrayRef<int64_t> corners =
      getPieceCorners().slice(2 * rank * index, 2 * rank);
  return {corners.take_front(rank), corners.drop_front(rank)};
}

void TransferStepAttr::printBody(llvm::raw_ostream &os) const {
  os << stringifyTransferStepKind(getKind()) << " chunk " << getChunk()
     << " devices ";
  printIntList(os, getDevices());
  if (getTiles())
    os << " tiles";
  if (hasPieces())
    os << " pieces";
  for (auto [index, owner] : llvm::enumerate(getPieceOwners())) {
    auto [lo, hi] = getPiece(index);
    os << " {" << owner << ": ";
    printIntList(os, lo);
    os << " : ";
    printIntList(os, hi);
    os << "}";
  }
  for (BoxTransferAttr transfer : getTransfers()) {
    os << " {";
    transfer.printBody(os);
    os << "}";
  }
}

namespace {
/// `{owner: [lo...] : [hi...]}...` after `pieces`, appended to `owners` and
/// `corners` (each piece's lo then hi).
ParseResult parsePieces(AsmParser &parser, SmallVectorImpl<int64_t> &owners,
                        SmallVectorImpl<int64_t> &corners) {
  std::optional<size_t> rank;
  while (succeeded(parser.parseOptionalLBrace())) {
    SMLoc loc = parser.getCurrentLocation();
    int64_t owner;
    SmallVector<int64_t> lo, hi;
    if (parser.parseInteger(owner) || parser.parseColon() ||
        parseIntList(parser, lo) || parser.parseColon() ||
        parseIntList(parser, hi) || parser.parseRBrace())
      return failure();
    if (lo.size() != hi.size())
      return parser.emitError(loc) << "piece corners have ranks " << lo.size()
                                   << " and " << hi.size();
    if (rank && *rank != lo.size())
      return parser.emitError(loc)
             << "piece has rank " << lo.size()
             << " but the step's first piece has rank " << *rank;
    rank = lo.size();
    owners.push_back(owner);
    corners.append(lo.begin(), lo.end());
    corners.append(hi.begin(), hi.end());
  }
  if (owners.empty())
    return parser.emitError(parser.getCurrentLocation())
           << "expected at least one piece, '{owner: [lo] : [hi]}'";
  return success();
}
} // namespace

TransferStepAttr TransferStepAttr::parseBody(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef kindName;
  int64_t chunk;
  SmallVector<int64_t> devices;
  if (parser.parseKeyword(&kindName))
    return {};
  std::optional<TransferStepKind> kind = symbolizeTransferStepKind(kindName);
  if (!kind) {
    parser.emitError(loc) << "unknown transfer step kind '" << kindName << "'";
    return {};
  }
  if (parser.parseKeyword("chunk") || parser.parseInteger(chunk) ||
      parser.parseKeyword("devices") || parseIntList(parser, devices))
    return {};
  SmallVector<BoxTransferAttr> transfers;
  SmallVector<int64_t> owners, corners;
  // What follows `tiles` is parsed too, for the verifier to refuse by name.
  bool tiles = succeeded(parser.parseOptionalKeyword("tiles"));
  if (succeeded(parser.parseOptionalKeyword("pieces"))) {
    if (failed(parsePieces(parser, owners, corners)))
      return {};
    return TransferStepAttr::get(parser.getContext(), *kind, chunk, devices,
                                 transfers, owners, corners, tiles);
  }
  while (succeeded(parser.parseOptionalLBrace())) {
    BoxTransferAttr transfer = BoxTransferAttr::parseBody(parser);
    if (!transfer || parser.parseRBrace())
      return {};
    transfers.push_back(transfer);
  }
  return TransferStepAttr::get(parser.getContext(), *kind, chunk, devices,
                               transfers, owners, corners, tiles);
}

Attribute TransferStepAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  TransferStepAttr result = parseBody(parser);
  if (!result || parser.parseGreater())
    return {};
  return result;
}

void TransferStepAttr::print(AsmPrinter &printer) const {
  printer.getStream() << "<";
  printBody(printer.getStream());
  printer.getStream() << ">";
}
