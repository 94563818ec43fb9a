//===- polymesh-opt.cpp - Polymesh optimizer driver -----------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// An opt-style driver with the polymesh dialect, the upstream dialects that
// programs from JIT compilers use, their ShardingInterface models, and the
// Polymesh passes. Nothing else is registered, to keep the tool small.
//
// `--serve` keeps one process for many inputs (the JAX bridge resolves one
// function per call): starting this process costs about 23 ms, mostly the
// dynamic loader binding libMLIR.so and libLLVM.so, against about 5 ms of
// propagation for a typical jitted function. The other options are parsed
// once and apply to every input. Protocol, on stdin and stdout:
//
//   request:   "<n>\n" then n bytes of IR
//   response:  "<exit code> <output bytes> <diagnostic bytes>\n", the
//              output (what polymesh-opt would print), the diagnostics
//              (what it would write to stderr)
//
// End of input ends the process with exit code 0. Each input gets its own
// MLIRContext, as a fresh process would.
//
//===----------------------------------------------------------------------===//

#include "polymesh/InitAllDialects.h"
#include "polymesh/Support/LargeStack.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

constexpr const char *kHelpHeader = "Polymesh optimizer driver\n";

/// Reads exactly `size` bytes of stdin into `bytes`; false at end of input.
bool readExactly(std::string &bytes, size_t size) {
  bytes.resize(size);
  size_t done = 0;
  while (done < size) {
    size_t got = std::fread(bytes.data() + done, 1, size - done, stdin);
    if (got == 0)
      return false;
    done += got;
  }
  return true;
}

/// Runs `body` with file descriptor 2 (where diagnostics go) redirected to
/// an anonymous file, and returns what was written there.
std::string captureDiagnostics(const std::function<void()> &body) {
  std::FILE *capture = std::tmpfile();
  if (!capture) {
    body();
    return "";
  }
  llvm::errs().flush();
  int saved = dup(2);
  dup2(fileno(capture), 2);
  body();
  llvm::errs().flush();
  dup2(saved, 2);
  close(saved);
  std::string text;
  long size = std::ftell(capture);
  if (size > 0) {
    std::rewind(capture);
    text.resize(static_cast<size_t>(size));
    text.resize(std::fread(text.data(), 1, text.size(), capture));
  }
  std::fclose(capture);
  return text;
}

int serve(int argc, char **argv, mlir::DialectRegistry &registry) {
  mlir::registerAndParseCLIOptions(argc, argv, kHelpHeader, registry);
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  std::string header, input;
  while (true) {
    header.clear();
    int c;
    while ((c = std::fgetc(stdin)) != EOF && c != '\n')
      header.push_back(static_cast<char>(c));
    if (c == EOF)
      return 0;
    char *end = nullptr;
    unsigned long long size = std::strtoull(header.c_str(), &end, 10);
    if (header.empty() || *end != '\0' || !readExactly(input, size)) {
      llvm::errs() << "polymesh-opt --serve: expected \"<bytes>\\n\" and "
                      "that many bytes of input, got \""
                   << header << "\"\n";
      return 1;
    }
    std::string output;
    llvm::raw_string_ostream outputStream(output);
    bool failed = false;
    std::string diagnostics = captureDiagnostics([&] {
      failed = mlir::failed(mlir::MlirOptMain(
          outputStream,
          llvm::MemoryBuffer::getMemBufferCopy(input, "exported.mlir"),
          registry, config));
    });
    outputStream.flush();
    std::string response = std::to_string(failed ? 1 : 0) + " " +
                           std::to_string(output.size()) + " " +
                           std::to_string(diagnostics.size()) + "\n";
    std::fwrite(response.data(), 1, response.size(), stdout);
    std::fwrite(output.data(), 1, output.size(), stdout);
    std::fwrite(diagnostics.data(), 1, diagnostics.size(), stdout);
    std::fflush(stdout);
  }
}

} // namespace

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  polymesh::registerAllPolymeshDialects(registry);
  polymesh::registerAllPolymeshPasses();

  // --serve is ours, not an MLIR option: taken out before they are parsed.
  std::vector<char *> args(argv, argv + argc);
  bool serving = false;
  for (auto it = args.begin() + 1; it != args.end(); ++it)
    if (std::strcmp(*it, "--serve") == 0) {
      args.erase(it);
      serving = true;
      break;
    }

  // Deeply nested input recurses in MLIR's parser: a large stack.
  return polymesh::runWithLargeStack([&] {
    if (serving)
      return serve(static_cast<int>(args.size()), args.data(), registry);
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, kHelpHeader, registry));
  });
}
