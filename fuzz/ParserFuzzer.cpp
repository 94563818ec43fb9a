//===- ParserFuzzer.cpp - libFuzzer target: parse and verify --------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// polymesh-fuzz-parser: any bytes, parsed as a module with polymesh-opt's
// dialects and verified, must give a module or diagnostics, never a crash,
// an abort or a sanitizer report. A module that parses must also survive a
// round trip: printed, it parses and verifies again, and prints the same
// text (the custom syntax is a contract, DESIGN.md); printed in the generic
// form, it reads back to the same module.
//
//===----------------------------------------------------------------------===//

#include "FuzzContext.h"

#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace {

std::string print(mlir::ModuleOp module, bool generic = false) {
  std::string text;
  llvm::raw_string_ostream os(text);
  // Verified modules only: skipping the printer's own verification keeps a
  // verifier bug from hiding as a generic-form fallback.
  mlir::OpPrintingFlags flags;
  flags.assumeVerified();
  if (generic)
    flags.printGenericOpForm();
  module->print(os, flags);
  return text;
}

mlir::OwningOpRef<mlir::ModuleOp> reparse(mlir::MLIRContext &context,
                                          const std::string &text) {
  return polymesh::fuzz::parseModule(
      context, reinterpret_cast<const uint8_t *>(text.data()), text.size());
}

/// Prints why the round trip failed, then stops the way libFuzzer expects a
/// crash to look, so the input is saved.
[[noreturn]] void roundTripFailure(const char *what, const std::string &first,
                                   const std::string &second) {
  llvm::errs() << "polymesh-fuzz-parser: " << what << "\n--- printed:\n"
               << first << "\n--- reprinted:\n"
               << second << "\n";
  llvm::errs().flush();
  __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  polymesh::fuzz::ParsedInput input(data, size);
  if (input.skip)
    return -1;
  if (!input.module)
    return 0;
  mlir::MLIRContext *context = input.context.get();
  mlir::OwningOpRef<mlir::ModuleOp> &module = input.module;

  std::string first = print(*module);
  mlir::OwningOpRef<mlir::ModuleOp> reparsed = reparse(*context, first);
  if (!reparsed)
    roundTripFailure("the printed module does not parse or verify", first, "");
  std::string second = print(*reparsed);
  if (first != second)
    roundTripFailure("the printed module prints differently when reparsed",
                     first, second);

  // The generic form (--mlir-print-op-generic: properties instead of the
  // custom syntax) must read back to the same module too.
  std::string generic = print(*module, /*generic=*/true);
  mlir::OwningOpRef<mlir::ModuleOp> fromGeneric = reparse(*context, generic);
  if (!fromGeneric)
    roundTripFailure("the generic form does not parse or verify", generic, "");
  std::string third = print(*fromGeneric);
  if (first != third)
    roundTripFailure("the generic form reads back to another module", first,
                     third);
  return 0;
}
