//===- LargeStack.h - Run a tool's main on a thread with a large stack -*- C++
//-*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// MLIR's parser and verifier recurse a few frames per nested region: with
// the usual 8 MiB main-thread stack, about 2,100 levels of nested generic
// ops overflow it (a segfault inside upstream code, before any Polymesh code
// runs). The tools run their main function on a thread with a 1 GiB stack
// instead (address space, committed only as used), which parses 100,000
// levels (docs/limits.md).
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_SUPPORT_LARGESTACK_H
#define POLYMESH_SUPPORT_LARGESTACK_H

#include "llvm/Support/thread.h"

#include <functional>
#include <optional>

namespace polymesh {

/// Stack of the thread that runs a tool's main function.
inline constexpr unsigned kToolStackBytes = 1u << 30;

/// Runs `body` on a thread with a kToolStackBytes stack and returns its
/// result.
inline int runWithLargeStack(const std::function<int()> &body) {
  int result = 1;
  llvm::thread worker(std::optional<unsigned>(kToolStackBytes),
                      [&] { result = body(); });
  worker.join();
  return result;
}

} // namespace polymesh

#endif // POLYMESH_SUPPORT_LARGESTACK_H
