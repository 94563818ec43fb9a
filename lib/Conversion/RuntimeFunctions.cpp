//===- RuntimeFunctions.cpp - What lowered code calls ---------------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#include "RuntimeFunctions.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"

#include <array>

using namespace mlir;
using namespace polymesh::conversion;

namespace {
// In RuntimeFunction's order (checked below).
constexpr std::array<std::pair<RuntimeFunction, RuntimeSignature>,
                     kNumRuntimeFunctions>
    kSignatures = {{
        {RuntimeFunction::Malloc, {"malloc", 'p', "l"}},
        {RuntimeFunction::Free, {"free", 'v', "p"}},
        {RuntimeFunction::Staging, {"polymesh_rt_staging", 'p', "pll"}},
        {RuntimeFunction::GroupStart, {"polymesh_rt_group_start", 'i', "pl"}},
        {RuntimeFunction::GroupEnd, {"polymesh_rt_group_end", 'i', "pl"}},
        {RuntimeFunction::Send, {"polymesh_rt_send", 'i', "pllpl"}},
        {RuntimeFunction::Recv, {"polymesh_rt_recv", 'i', "pllpl"}},
        {RuntimeFunction::MpiRoute, {"polymesh_rt_mpi_route", 'l', "plli"}},
        {RuntimeFunction::Broadcast,
         {"polymesh_rt_broadcast", 'i', "plpllppl"}},
        {RuntimeFunction::AllGather,
         {"polymesh_rt_all_gather", 'i', "plplppl"}},
        {RuntimeFunction::AllReduce,
         {"polymesh_rt_all_reduce", 'i', "plplpplii"}},
        {RuntimeFunction::ReduceScatter,
         {"polymesh_rt_reduce_scatter", 'i', "plplpplii"}},
        {RuntimeFunction::AllToAll, {"polymesh_rt_all_to_all", 'i', "plplppl"}},
        {RuntimeFunction::CudaStream, {"polymesh_rt_cuda_stream", 'p', "pl"}},
        {RuntimeFunction::NcclComm, {"polymesh_rt_nccl_comm", 'p', "plpl"}},
        {RuntimeFunction::NcclCheck, {"polymesh_rt_nccl_check", 'i', "plpip"}},
        {RuntimeFunction::DeviceAlloc,
         {"polymesh_rt_device_alloc", 'p', "pll"}},
        {RuntimeFunction::DeviceFree, {"polymesh_rt_device_free", 'v', "plp"}},
        {RuntimeFunction::DeviceCopy,
         {"polymesh_rt_device_copy", 'i', "plppl"}},
        {RuntimeFunction::DeviceUpload,
         {"polymesh_rt_device_upload", 'i', "plppl"}},
        {RuntimeFunction::DeviceSynchronize,
         {"polymesh_rt_device_synchronize", 'i', "pl"}},
        {RuntimeFunction::NcclGroupStart, {"ncclGroupStart", 'i', ""}},
        {RuntimeFunction::NcclGroupEnd, {"ncclGroupEnd", 'i', ""}},
        {RuntimeFunction::NcclSend, {"ncclSend", 'i', "pliipp"}},
        {RuntimeFunction::NcclRecv, {"ncclRecv", 'i', "pliipp"}},
        {RuntimeFunction::NcclBroadcast, {"ncclBroadcast", 'i', "ppliipp"}},
        {RuntimeFunction::NcclAllGather, {"ncclAllGather", 'i', "pplipp"}},
        {RuntimeFunction::NcclAllReduce, {"ncclAllReduce", 'i', "ppliipp"}},
        {RuntimeFunction::NcclReduceScatter,
         {"ncclReduceScatter", 'i', "ppliipp"}},
    }};

constexpr bool inOrder() {
  for (int i = 0; i < kNumRuntimeFunctions; ++i)
    if (static_cast<int>(kSignatures[i].first) != i)
      return false;
  return true;
}
static_assert(inOrder(), "kSignatures must follow RuntimeFunction's order");

Type typeOf(MLIRContext *context, char code) {
  switch (code) {
  case 'p':
    return LLVM::LLVMPointerType::get(context);
  case 'l':
    return IntegerType::get(context, 64);
  case 'i':
    return IntegerType::get(context, 32);
  default:
    return LLVM::LLVMVoidType::get(context);
  }
}
} // namespace

const RuntimeSignature &
polymesh::conversion::runtimeSignature(RuntimeFunction function) {
  return kSignatures[static_cast<int>(function)].second;
}

LLVM::LLVMFuncOp polymesh::conversion::getOrDeclare(ModuleOp module,
                                                    RuntimeFunction function) {
  OpBuilder builder(module.getContext());
  return getOrDeclare(builder, module, function);
}

LLVM::LLVMFuncOp polymesh::conversion::getOrDeclare(OpBuilder &builder,
                                                    ModuleOp module,
                                                    RuntimeFunction function) {
  const RuntimeSignature &signature = runtimeSignature(function);
  if (auto existing = module.lookupSymbol<LLVM::LLVMFuncOp>(signature.name))
    return existing;
  MLIRContext *context = module.getContext();
  SmallVector<Type> arguments;
  for (char code : signature.arguments)
    arguments.push_back(typeOf(context, code));
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(module.getBody());
  return LLVM::LLVMFuncOp::create(
      builder, module.getLoc(), signature.name,
      LLVM::LLVMFunctionType::get(typeOf(context, signature.result),
                                  arguments));
}
