//===- TensorLimits.cpp - Types too large to count in int64 ---------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Transforms/TensorLimits.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

std::optional<int64_t> polymesh::checkedElementCount(ShapedType type) {
  int64_t count = 1;
  for (int64_t extent : type.getShape())
    if (extent < 0 || llvm::MulOverflow(count, extent, count))
      return std::nullopt;
  return count;
}

std::optional<int64_t> polymesh::checkedByteSize(ShapedType type) {
  std::optional<int64_t> count = checkedElementCount(type);
  if (!count)
    return std::nullopt;
  Type element = type.getElementType();
  int64_t bytes = 1;
  if (element.isIntOrFloat())
    bytes = std::max<int64_t>(1, (element.getIntOrFloatBitWidth() + 7) / 8);
  else if (auto complex = dyn_cast<ComplexType>(element);
           complex && complex.getElementType().isIntOrFloat())
    bytes =
        2 * std::max<int64_t>(
                1, (complex.getElementType().getIntOrFloatBitWidth() + 7) / 8);
  int64_t total;
  if (llvm::MulOverflow(*count, bytes, total))
    return std::nullopt;
  return total;
}

namespace {

/// Why `type` is too large, or null when it is not.
const char *whyTooLarge(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return nullptr;
  if (!polymesh::checkedElementCount(shaped))
    return "its element count overflows int64";
  if (!polymesh::checkedByteSize(shaped))
    return "its size in bytes overflows int64";
  return nullptr;
}

} // namespace

LogicalResult polymesh::checkTensorSizes(Operation *root) {
  // Pre-order: a signature is reported before the body that uses it.
  WalkResult result = root->walk<WalkOrder::PreOrder>([](Operation *op) {
    auto refuse = [&](Location loc, Type type, const char *why) {
      emitError(loc) << "type " << type << " is too large: " << why
                     << " (docs/limits.md)";
      return WalkResult::interrupt();
    };
    // A declaration has no block arguments; its signature still counts.
    if (auto function = dyn_cast<FunctionOpInterface>(op)) {
      for (Type type : function.getArgumentTypes())
        if (const char *why = whyTooLarge(type))
          return refuse(op->getLoc(), type, why);
      for (Type type : function.getResultTypes())
        if (const char *why = whyTooLarge(type))
          return refuse(op->getLoc(), type, why);
    }
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument argument : block.getArguments())
          if (const char *why = whyTooLarge(argument.getType()))
            return refuse(argument.getLoc(), argument.getType(), why);
    for (Type type : op->getResultTypes())
      if (const char *why = whyTooLarge(type))
        return refuse(op->getLoc(), type, why);
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}
