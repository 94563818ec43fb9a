//===- FuzzContext.h - Shared setup of the MLIR fuzz targets ----*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// What the parser and pipeline fuzz targets share: the dialects and
// ShardingInterface models that polymesh-opt registers (so the fuzzers reach
// the code that real inputs reach), a context per input, and parsing from a
// null-terminated copy of libFuzzer's bytes.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_FUZZ_FUZZCONTEXT_H
#define POLYMESH_FUZZ_FUZZCONTEXT_H

#include "polymesh/Conversion/Passes.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/InitAllDialects.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace polymesh::fuzz {

/// polymesh-opt's input dialects and models (polymesh/InitAllDialects.h), so
/// the fuzzers test the tool users run, and the CPU lowering's dialects.
/// Built once and never destroyed, so no exit-time destructor races the
/// last context.
inline const mlir::DialectRegistry &registry() {
  static const mlir::DialectRegistry *registry = [] {
    auto *r = new mlir::DialectRegistry();
    polymesh::registerPolymeshInputDialects(*r);
    // --polymesh-lower-to-cpu bufferizes and lowers to LLVM in-process.
    polymesh::registerHostLoweringDialects(*r);
    return r;
  }();
  return *registry;
}

/// A fresh context per input: attributes and types are uniqued for the
/// context's lifetime, so a shared one would grow without bound and let one
/// input's state change how the next behaves (crashes would not reproduce
/// from one file). Threading is off: each input is small, and a thread pool
/// per context would cost more than the work.
inline std::unique_ptr<mlir::MLIRContext> makeContext() {
  return std::make_unique<mlir::MLIRContext>(
      registry(), mlir::MLIRContext::Threading::DISABLED);
}

/// Parses `size` bytes as a module (verifying it, as polymesh-opt does).
/// MLIR's lexer reads up to a terminating NUL, and libFuzzer's buffer has
/// none, so the bytes are copied into a buffer that has one. Diagnostics go to
/// `context`'s handlers.
inline mlir::OwningOpRef<mlir::ModuleOp>
parseModule(mlir::MLIRContext &context, const uint8_t *data, size_t size) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "fuzz-input"),
      llvm::SMLoc());
  return mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr,
                                               mlir::ParserConfig(&context));
}

namespace detail {
/// True when `text` starts with `[i, j, ...]`: at most 18 digits each (so
/// they fit int64), optionally negative, no two equal.
inline bool isPlainUniqueIntArray(llvm::StringRef text) {
  if (!text.consume_front("["))
    return false;
  text = text.ltrim();
  if (text.starts_with("]"))
    return true;
  llvm::SmallVector<std::string> values;
  while (true) {
    bool negative = text.consume_front("-");
    size_t digits = std::min(text.find_first_not_of("0123456789"), text.size());
    if (digits == 0 || digits > 18)
      return false;
    // "-0" is "0", and "007" is "7".
    llvm::StringRef magnitude = text.take_front(digits).ltrim("0");
    std::string value =
        (negative && !magnitude.empty() ? "-" : "") + magnitude.str();
    if (llvm::is_contained(values, value))
      return false;
    values.push_back(std::move(value));
    text = text.drop_front(digits).ltrim();
    if (text.consume_front("]"))
      return true;
    if (!text.consume_front(","))
      return false;
    text = text.ltrim();
  }
}
} // namespace detail

/// Debian's MLIR 22 itself (not Polymesh) crashes on linalg.broadcast,
/// linalg.transpose and linalg.reduce when the array after `dimensions =` or
/// `permutation =` does not parse (their parser stores the null attribute
/// that a failed parse returns: parseDenseI64ArrayAttr in LinalgOps.cpp), and
/// linalg.broadcast's verifier crashes on a repeated dimension (fixed
/// upstream by llvm/llvm-project#211203). polymesh-opt crashes on them too.
/// The fuzzers skip every input that could reach them, conservatively: any
/// occurrence of the keywords followed by `=` and anything but a plain array
/// of distinct integers. Otherwise every run would stop at these within
/// seconds, long before reaching Polymesh's own code.
inline bool mayHitKnownMlirCrash(llvm::StringRef text) {
  for (llvm::StringRef keyword : {"dimensions", "permutation"}) {
    for (size_t pos = text.find(keyword); pos != llvm::StringRef::npos;
         pos = text.find(keyword, pos + 1)) {
      llvm::StringRef rest = text.drop_front(pos + keyword.size()).ltrim();
      if (rest.consume_front("=") &&
          !detail::isPlainUniqueIntArray(rest.ltrim()))
        return true;
    }
  }
  return false;
}

/// What every MLIR target starts from: a fresh context whose diagnostics
/// are swallowed (almost every input has some; printing them only slows the
/// fuzzer), and the input parsed in it. `module` is null when the input does
/// not parse; `skip` is set for inputs that may reach a known crash of
/// MLIR itself (return -1: not a crash, not worth keeping in the corpus).
struct ParsedInput {
  std::unique_ptr<mlir::MLIRContext> context = makeContext();
  mlir::ScopedDiagnosticHandler swallow{
      context.get(), [](mlir::Diagnostic &) { return mlir::success(); }};
  mlir::OwningOpRef<mlir::ModuleOp> module;
  bool skip = false;

  ParsedInput(const uint8_t *data, size_t size) {
    skip = mayHitKnownMlirCrash(
        llvm::StringRef(reinterpret_cast<const char *>(data), size));
    if (!skip)
      module = parseModule(*context, data, size);
  }
};

} // namespace polymesh::fuzz

#endif // POLYMESH_FUZZ_FUZZCONTEXT_H
