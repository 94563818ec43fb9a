//===- PrintLeaves.cpp - Per-leaf sharding report -------------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Prints one row per function result (one leaf of the caller's pytree): its
// path, shape, element type, mesh, sharding and local tile shape, and for
// leaves of rank 1 and 2 a map of which devices hold which block, in the
// manner of `jax.debug.visualize_array_sharding`. Meant to run after
// `--polymesh-propagate`; it reads the IR and never changes it. See the pass
// description in Passes.td and docs/propagation.md for the format.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace polymesh {
#define GEN_PASS_DEF_POLYMESHPRINTLEAVES
#include "polymesh/Transforms/Passes.h.inc"
} // namespace polymesh

using namespace mlir;
using namespace polymesh;

namespace {

/// Maps of more blocks than this are omitted: they stop being readable.
constexpr int64_t kMaxMapBlocks = 64;
/// Meshes with more devices than this get no map (it visits every device).
constexpr int64_t kMaxMapDevices = int64_t(1) << 20;
/// Maps wider than this wrap their columns into several bands.
constexpr size_t kMaxMapWidth = 100;
/// Device lists longer than this are cut short, with a count.
constexpr size_t kMaxDeviceText = 40;

constexpr StringLiteral kUnplaced = "unplaced";

/// `16x16`, `?x8` for dynamic extents, `scalar` for rank 0.
std::string formatShape(ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      shape, os,
      [&](int64_t extent) {
        if (ShapedType::isDynamic(extent))
          os << "?";
        else
          os << extent;
      },
      "x");
  return text;
}

/// Sorted device ids as compact text: runs of consecutive ids become
/// `0-7`, other arithmetic runs `0,2,..,30`; long lists are cut short with
/// the number of devices.
std::string formatDeviceIds(ArrayRef<int64_t> ids) {
  SmallVector<std::string> pieces;
  size_t n = ids.size();
  for (size_t i = 0; i < n;) {
    if (i + 1 < n) {
      int64_t stride = ids[i + 1] - ids[i];
      size_t j = i + 1;
      while (j + 1 < n && ids[j + 1] - ids[j] == stride)
        ++j;
      size_t length = j - i + 1;
      if (stride == 1 && length >= 3) {
        pieces.push_back(std::to_string(ids[i]) + "-" + std::to_string(ids[j]));
        i = j + 1;
        continue;
      }
      if (stride > 1 && length >= 4) {
        pieces.push_back(std::to_string(ids[i]) + "," +
                         std::to_string(ids[i] + stride) + ",.." + "," +
                         std::to_string(ids[j]));
        i = j + 1;
        continue;
      }
    }
    pieces.push_back(std::to_string(ids[i]));
    ++i;
  }
  std::string text = llvm::join(pieces, ",");
  if (text.size() <= kMaxDeviceText)
    return text;
  std::string cut;
  for (const std::string &piece : pieces) {
    if (cut.size() + piece.size() + 1 > kMaxDeviceText - 16)
      break;
    cut += piece + ",";
  }
  return cut + "... (" + std::to_string(n) + " devices)";
}

/// A leaf path as a table cell: control characters (a newline would break
/// the row) as `\XX`, everything else as written.
std::string formatLeafPath(StringRef path) {
  std::string text;
  for (char c : path) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f && byte != '\\') {
      text += c;
      continue;
    }
    text += '\\';
    text += byte == '\\' ? std::string("\\") : llvm::utohexstr(byte, false, 2);
  }
  return text;
}

/// `@mesh1 ["a"=2, "b"=4] dev 0-7`, names quoted and escaped as in the IR.
std::string formatMesh(FlatSymbolRefAttr name, MeshAttr mesh) {
  std::string text;
  llvm::raw_string_ostream os(text);
  name.print(os);
  os << " [";
  llvm::interleaveComma(mesh.getAxes(), os, [&](MeshAxisAttr axis) {
    os << "\"";
    llvm::printEscapedString(axis.getName(), os);
    os << "\"=" << axis.getSize();
  });
  os << "] dev ";
  int64_t numDevices = mesh.getNumDevices();
  if (mesh.getDeviceIds().empty()) {
    // Ids 0..N-1, however large N is: no need to list them.
    if (numDevices <= 2)
      os << (numDevices == 1 ? "0" : "0,1");
    else
      os << "0-" << numDevices - 1;
    return text;
  }
  SmallVector<int64_t> ids(mesh.getDeviceIds());
  llvm::sort(ids);
  os << formatDeviceIds(ids);
  return text;
}

void printAxisSet(llvm::raw_ostream &os, ArrayRef<AxisRefAttr> axes) {
  os << "{";
  llvm::interleaveComma(axes, os, [&](AxisRefAttr axis) { axis.print(os); });
  os << "}";
}

/// The sharding without its mesh, as written in `#polymesh.sharding`:
/// `[{"a"}, {"b"}]`, then `replicated={...}` and `unreduced={...}`.
std::string formatSharding(ShardingAttr sharding) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleaveComma(sharding.getDims(), os,
                        [&](DimShardingAttr dim) { dim.print(os); });
  os << "]";
  if (!sharding.getReplicated().empty()) {
    os << ", replicated=";
    printAxisSet(os, sharding.getReplicated());
  }
  if (!sharding.getUnreduced().empty()) {
    os << ", unreduced=";
    printAxisSet(os, sharding.getUnreduced());
  }
  return text;
}

/// The local tile of a dynamically shaped value: `?` where the extent is
/// not known.
std::string formatDynamicTile(RankedTensorType type, ShardingAttr sharding,
                              MeshAttr mesh) {
  SmallVector<int64_t> tile;
  for (auto [extent, dim] : llvm::zip(
           type.getShape(), sharding.withRank(type.getRank()).getDims())) {
    int64_t shards = 1;
    for (AxisRefAttr axis : dim.getAxes())
      shards *= axis.getSizeIn(mesh);
    tile.push_back(ShapedType::isDynamic(extent)
                       ? ShapedType::kDynamic
                       : llvm::divideCeil(extent, shards));
  }
  return formatShape(tile);
}

std::string padRight(StringRef text, size_t width) {
  std::string result = text.str();
  if (result.size() < width)
    result.append(width - result.size(), ' ');
  return result;
}

void appendLine(std::vector<std::string> &lines, std::string line) {
  while (!line.empty() && line.back() == ' ')
    line.pop_back();
  lines.push_back(std::move(line));
}

/// The tile map of a rank-1 or rank-2 layout: rows are the distinct ranges
/// of dimension 0, columns those of dimension 1 (a rank-1 layout is one row
/// of its dimension-0 ranges). Each cell gives the block's index ranges and
/// the devices that hold it. Lines are returned without indentation.
std::vector<std::string> renderTileMap(const planner::TensorLayout &layout) {
  std::vector<std::string> lines;
  size_t rank = layout.shape().size();
  if (layout.numDevices() > kMaxMapDevices) {
    lines.push_back("(" + std::to_string(layout.numDevices()) +
                    " devices; map omitted)");
    return lines;
  }
  using Range = std::pair<int64_t, int64_t>;
  std::map<std::pair<Range, Range>, std::vector<int64_t>> holders;
  std::set<Range> rows, columns;
  std::vector<int64_t> empty;
  for (int64_t p = 0, e = layout.numDevices(); p < e; ++p) {
    planner::Box box = layout.boxAtPosition(p);
    int64_t id = layout.mesh().deviceAt(p);
    if (box.empty()) {
      empty.push_back(id);
      continue;
    }
    Range row = rank == 2 ? Range{box.lo[0], box.hi[0]} : Range{0, 0};
    Range column =
        rank == 2 ? Range{box.lo[1], box.hi[1]} : Range{box.lo[0], box.hi[0]};
    rows.insert(row);
    columns.insert(column);
    holders[{row, column}].push_back(id);
  }
  llvm::sort(empty);

  int64_t numBlocks = static_cast<int64_t>(rows.size() * columns.size());
  if (numBlocks == 0) {
    lines.push_back("(every tile is empty)");
  } else if (numBlocks > kMaxMapBlocks) {
    lines.push_back("(" + std::to_string(numBlocks) + " blocks; map omitted)");
  } else {
    lines.push_back("tile map, " +
                    (rank == 2
                         ? std::to_string(rows.size()) + "x" +
                               std::to_string(columns.size()) + " blocks:"
                         : std::to_string(columns.size()) +
                               (columns.size() == 1 ? " block:" : " blocks:")));
    // Cell text: the block's ranges, then its holders.
    auto rangeText = [](Range range) {
      return std::to_string(range.first) + ":" + std::to_string(range.second);
    };
    std::vector<Range> rowRanges(rows.begin(), rows.end());
    std::vector<Range> columnRanges(columns.begin(), columns.end());
    std::vector<std::vector<std::pair<std::string, std::string>>> cells(
        rowRanges.size());
    size_t width = 0;
    for (auto [r, row] : llvm::enumerate(rowRanges)) {
      for (Range column : columnRanges) {
        std::string ranges =
            rank == 2 ? "[" + rangeText(row) + ", " + rangeText(column) + "]"
                      : "[" + rangeText(column) + "]";
        auto it = holders.find({row, column});
        std::string devices = "-";
        if (it != holders.end()) {
          std::vector<int64_t> ids = it->second;
          llvm::sort(ids);
          devices = "dev " + formatDeviceIds(ids);
        }
        width = std::max({width, ranges.size(), devices.size()});
        cells[r].push_back({std::move(ranges), std::move(devices)});
      }
    }
    // Columns that do not fit in one band wrap into bands of equal size,
    // one under the other, separated by an empty line.
    size_t fit = std::max<size_t>(1, (kMaxMapWidth - 1) / (width + 3));
    size_t numBands = llvm::divideCeil(columnRanges.size(), fit);
    size_t perBand = llvm::divideCeil(columnRanges.size(), numBands);
    for (size_t first = 0; first < columnRanges.size(); first += perBand) {
      size_t last = std::min(columnRanges.size(), first + perBand);
      if (first)
        lines.push_back("");
      std::string border = "+";
      for (size_t c = first; c < last; ++c)
        border += std::string(width + 2, '-') + "+";
      lines.push_back(border);
      for (auto &rowCells : cells) {
        std::string top = "|", bottom = "|";
        for (size_t c = first; c < last; ++c) {
          top += " " + padRight(rowCells[c].first, width) + " |";
          bottom += " " + padRight(rowCells[c].second, width) + " |";
        }
        lines.push_back(top);
        lines.push_back(bottom);
        lines.push_back(border);
      }
    }
  }
  if (!empty.empty() && numBlocks != 0)
    lines.push_back("empty tiles: dev " + formatDeviceIds(empty));
  return lines;
}

/// One row of the table, and the lines printed under it.
struct LeafRow {
  SmallVector<std::string, 7> cells;
  std::vector<std::string> below;
};

class LeafPrinter {
public:
  LeafPrinter(ModuleOp module, SymbolTableCollection &symbols)
      : module(module), symbols(symbols) {}

  /// Appends the report of `function` to `os`; fails with a diagnostic on a
  /// sharding that cannot be bound to its result.
  LogicalResult printFunction(FunctionOpInterface function,
                              llvm::raw_ostream &os);

private:
  FailureOr<LeafRow> describeResult(FunctionOpInterface function,
                                    unsigned index);

  ModuleOp module;
  SymbolTableCollection &symbols;
};

FailureOr<LeafRow> LeafPrinter::describeResult(FunctionOpInterface function,
                                               unsigned index) {
  LeafRow row;
  Type type = function.getResultTypes()[index];
  auto leaf = function.getResultAttrOfType<StringAttr>(
      index, PolymeshDialect::kLeafAttrName);
  std::string what = "result #" + std::to_string(index);
  if (leaf)
    what += " (leaf \"" + formatLeafPath(leaf.getValue()) + "\")";

  row.cells.push_back(std::to_string(index));
  row.cells.push_back(leaf ? formatLeafPath(leaf.getValue()) : "-");
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (tensorType) {
    row.cells.push_back(formatShape(tensorType.getShape()));
    std::string dtype;
    llvm::raw_string_ostream dtypeOs(dtype);
    tensorType.getElementType().print(dtypeOs);
    row.cells.push_back(dtype);
  } else {
    row.cells.push_back("-");
    std::string text;
    llvm::raw_string_ostream textOs(text);
    type.print(textOs);
    row.cells.push_back(text);
  }

  Attribute attr =
      function.getResultAttr(index, PolymeshDialect::kShardingAttrName);
  if (!attr) {
    // Only tensors are placed; anything else has nothing to report.
    row.cells.append(3, tensorType ? kUnplaced.str() : std::string("-"));
    return row;
  }
  auto sharding = dyn_cast<ShardingAttr>(attr);
  if (!sharding)
    return function->emitError()
           << what << ": '" << PolymeshDialect::kShardingAttrName
           << "' must be a #polymesh.sharding, got " << attr;
  MeshAttr mesh = lookupMesh(symbols, function, sharding.getMeshName());
  if (!mesh)
    return function->emitError()
           << what << ": sharding refers to unknown mesh "
           << sharding.getMeshName() << "; expected a polymesh.mesh symbol";
  row.cells.push_back(formatMesh(sharding.getMeshName(), mesh));
  row.cells.push_back(formatSharding(sharding));
  if (!tensorType) {
    row.cells.push_back("-");
    return row;
  }
  if (failed(sharding.verifyFor(
          [&]() {
            InFlightDiagnostic diag = function->emitError();
            diag << what << ": ";
            return diag;
          },
          mesh, tensorType)))
    return failure();
  if (!tensorType.hasStaticShape()) {
    row.cells.push_back(formatDynamicTile(tensorType, sharding, mesh));
    return row;
  }
  FailureOr<planner::TensorLayout> layout = toTensorLayout(
      [&]() {
        InFlightDiagnostic diag = function->emitError();
        diag << what << ": ";
        return diag;
      },
      sharding, mesh, tensorType);
  if (failed(layout))
    return failure();
  row.cells.push_back(formatShape(layout->localShape()));
  if (tensorType.getRank() == 1 || tensorType.getRank() == 2) {
    row.below = renderTileMap(*layout);
    if (!sharding.getUnreduced().empty()) {
      std::string note;
      llvm::raw_string_ostream noteOs(note);
      noteOs << "unreduced over ";
      printAxisSet(noteOs, sharding.getUnreduced());
      noteOs << ": the holders of a block hold partial sums of it";
      row.below.push_back(note);
    }
  }
  return row;
}

LogicalResult LeafPrinter::printFunction(FunctionOpInterface function,
                                         llvm::raw_ostream &os) {
  unsigned numResults = function.getNumResults();
  os << "func @" << SymbolTable::getSymbolName(function).getValue() << ": "
     << numResults << (numResults == 1 ? " result" : " results");
  auto ambient = function->getAttrOfType<FlatSymbolRefAttr>(
      PolymeshDialect::kAmbientMeshAttrName);
  if (!ambient)
    ambient = module->getAttrOfType<FlatSymbolRefAttr>(
        PolymeshDialect::kAmbientMeshAttrName);
  if (ambient)
    os << ", ambient mesh @" << ambient.getValue();
  os << "\n";

  std::vector<LeafRow> rows;
  bool failedAny = false;
  for (unsigned index = 0; index < numResults; ++index) {
    FailureOr<LeafRow> row = describeResult(function, index);
    if (failed(row)) {
      failedAny = true;
      continue;
    }
    rows.push_back(std::move(*row));
  }
  if (failedAny)
    return failure();
  if (rows.empty()) {
    os << "\n";
    return success();
  }

  const SmallVector<std::string, 7> header = {
      "#", "leaf", "shape", "dtype", "mesh", "sharding", "local tile"};
  SmallVector<size_t, 7> widths;
  for (const std::string &title : header)
    widths.push_back(title.size());
  for (const LeafRow &row : rows)
    for (auto [width, cell] : llvm::zip(widths, row.cells))
      width = std::max(width, cell.size());
  auto formatRow = [&](ArrayRef<std::string> cells) {
    std::string line = "  ";
    for (auto [index, cell] : llvm::enumerate(cells)) {
      if (index)
        line += "  ";
      line += padRight(cell, widths[index]);
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    return line;
  };
  std::vector<std::string> lines;
  appendLine(lines, formatRow(header));
  for (const LeafRow &row : rows) {
    appendLine(lines, formatRow(row.cells));
    for (const std::string &below : row.below)
      appendLine(lines, "      " + below);
  }
  for (const std::string &line : lines)
    os << line << "\n";
  os << "\n";
  return success();
}

class PolymeshPrintLeavesPass final
    : public polymesh::impl::PolymeshPrintLeavesBase<PolymeshPrintLeavesPass> {
public:
  using PolymeshPrintLeavesBase::PolymeshPrintLeavesBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    // The pass only reads the IR.
    markAllAnalysesPreserved();

    // The whole report is built first, so that nothing is written when a
    // leaf cannot be described.
    std::string report;
    llvm::raw_string_ostream reportOs(report);
    SymbolTableCollection symbols;
    LeafPrinter printer(module, symbols);
    bool failedAny = false;
    for (Operation &op : module.getBody()->getOperations())
      if (auto function = dyn_cast<FunctionOpInterface>(op))
        failedAny |= failed(printer.printFunction(function, reportOs));
    if (failedAny)
      return signalPassFailure();

    if (output.empty()) {
      llvm::errs() << report;
      llvm::errs().flush();
      return;
    }
    if (output == "-") {
      llvm::outs() << report;
      llvm::outs().flush();
      return;
    }
    std::error_code error;
    llvm::raw_fd_ostream file(output, error, llvm::sys::fs::OF_Text);
    if (error) {
      // Not `module.emitError()`: the note that would print the whole module
      // says nothing about a path.
      mlir::emitError(module.getLoc())
          << "cannot open '" << output
          << "' to write the leaf table: " << error.message();
      return signalPassFailure();
    }
    file << report;
    file.close();
    if (file.has_error()) {
      mlir::emitError(module.getLoc())
          << "cannot write the leaf table to '" << output
          << "': " << file.error().message();
      file.clear_error();
      return signalPassFailure();
    }
  }
};

} // namespace
