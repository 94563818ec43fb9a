//===- CallGraph.cpp - Functions ordered callees first --------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Transforms/CallGraph.h"

#include "llvm/ADT/DenseMap.h"

#include <string>
#include <vector>

using namespace mlir;

namespace {

struct Frame {
  func::FuncOp function;
  SmallVector<func::CallOp> calls;
  size_t next = 0;
};

/// "@g -> @h -> @g": the path from `callee`'s frame on, back to `callee`.
std::string cycleText(const std::vector<Frame> &path, func::FuncOp callee) {
  std::string text;
  bool inCycle = false;
  for (const Frame &frame : path) {
    func::FuncOp function = frame.function;
    inCycle = inCycle || function == callee;
    if (inCycle)
      text += "@" + function.getSymName().str() + " -> ";
  }
  return text + "@" + callee.getSymName().str();
}

} // namespace

FailureOr<SmallVector<func::FuncOp>> polymesh::orderCalleesFirst(
    ArrayRef<func::FuncOp> roots, SymbolTableCollection &symbols,
    llvm::function_ref<LogicalResult(func::CallOp, func::FuncOp)>
        onDeclaration) {
  enum class State { OnPath, Done };
  llvm::DenseMap<Operation *, State> state;
  SmallVector<func::FuncOp> order;
  auto enter = [&](func::FuncOp function, std::vector<Frame> &path) {
    state[function] = State::OnPath;
    Frame frame{function, {}, 0};
    function.walk([&](func::CallOp call) { frame.calls.push_back(call); });
    path.push_back(std::move(frame));
  };
  for (func::FuncOp root : roots) {
    if (root.isExternal() || state.contains(root))
      continue;
    std::vector<Frame> path;
    enter(root, path);
    while (!path.empty()) {
      Frame &frame = path.back();
      if (frame.next == frame.calls.size()) {
        state[frame.function] = State::Done;
        order.push_back(frame.function);
        path.pop_back();
        continue;
      }
      func::CallOp call = frame.calls[frame.next++];
      auto callee = symbols.lookupNearestSymbolFrom<func::FuncOp>(
          call, call.getCalleeAttr());
      if (!callee)
        continue; // The verifier has refused it already.
      if (callee.isExternal()) {
        if (onDeclaration && failed(onDeclaration(call, callee)))
          return failure();
        continue;
      }
      auto it = state.find(callee);
      if (it == state.end()) {
        enter(callee, path);
        continue;
      }
      if (it->second == State::OnPath)
        return call.emitOpError()
               << "is a recursive call (" << cycleText(path, callee)
               << "): recursive call graphs are not supported";
    }
  }
  return order;
}
