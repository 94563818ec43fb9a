//===- RuntimeFunctionsTest.cpp - Lowered calls match the C ABI -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Generated code calls the runtime, NCCL and libc through declarations the
// lowerings make from one table (lib/Conversion/RuntimeFunctions.h). A
// wrong entry links and runs, and passes or corrupts arguments silently;
// here every entry is checked against the C prototype it stands for, from
// the headers themselves (nccl.h where NCCL is built).
//
//===----------------------------------------------------------------------===//

#include "RuntimeFunctions.h"

#include "polymesh/Runtime/PolymeshCudaRuntime.h"
#include "polymesh/Runtime/PolymeshRuntime.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#if POLYMESH_HAVE_NCCL
#include <nccl.h>
#endif

using namespace polymesh::conversion;

namespace {

/// RuntimeSignature's code of a C type.
template <typename T> char codeOf() {
  if constexpr (std::is_void_v<T>)
    return 'v';
  else if constexpr (std::is_pointer_v<T>)
    return 'p';
  else if constexpr ((std::is_integral_v<T> || std::is_enum_v<T>)&&sizeof(T) ==
                     8)
    return 'l';
  else if constexpr ((std::is_integral_v<T> || std::is_enum_v<T>)&&sizeof(T) ==
                     4)
    return 'i';
  else
    return '?';
}

/// "<result>:<arguments>" of a function pointer type, never called: taken
/// with decltype, so the test needs the headers only, not the libraries.
template <typename F> struct Prototype;
template <typename R, typename... A> struct Prototype<R (*)(A...)> {
  static std::string code() {
    std::string text(1, codeOf<R>());
    text += ':';
    (text.push_back(codeOf<A>()), ...);
    return text;
  }
};
template <typename R, typename... A>
struct Prototype<R (*)(A...) noexcept> : Prototype<R (*)(A...)> {};
// libc's attributes (malloc, nonnull) are not part of the type.
#pragma GCC diagnostic ignored "-Wignored-attributes"
#define PROTOTYPE(function) Prototype<decltype(&function)>::code()

std::string tableCode(RuntimeFunction function) {
  const RuntimeSignature &signature = runtimeSignature(function);
  return std::string(1, signature.result) + ":" + signature.arguments.str();
}

struct Expected {
  RuntimeFunction function;
  const char *name;
  std::string prototype;
};

void checkAll(const std::vector<Expected> &expected) {
  for (const Expected &entry : expected) {
    EXPECT_EQ(runtimeSignature(entry.function).name, entry.name);
    EXPECT_EQ(tableCode(entry.function), entry.prototype) << entry.name;
  }
}

TEST(RuntimeFunctions, MatchTheRuntimeHeaders) {
  using F = RuntimeFunction;
  checkAll({
      {F::Malloc, "malloc", PROTOTYPE(::malloc)},
      {F::Free, "free", PROTOTYPE(::free)},
      {F::Staging, "polymesh_rt_staging", PROTOTYPE(polymesh_rt_staging)},
      {F::GroupStart, "polymesh_rt_group_start",
       PROTOTYPE(polymesh_rt_group_start)},
      {F::GroupEnd, "polymesh_rt_group_end", PROTOTYPE(polymesh_rt_group_end)},
      {F::Send, "polymesh_rt_send", PROTOTYPE(polymesh_rt_send)},
      {F::Recv, "polymesh_rt_recv", PROTOTYPE(polymesh_rt_recv)},
      {F::MpiRoute, "polymesh_rt_mpi_route", PROTOTYPE(polymesh_rt_mpi_route)},
      {F::Broadcast, "polymesh_rt_broadcast", PROTOTYPE(polymesh_rt_broadcast)},
      {F::AllGather, "polymesh_rt_all_gather",
       PROTOTYPE(polymesh_rt_all_gather)},
      {F::AllReduce, "polymesh_rt_all_reduce",
       PROTOTYPE(polymesh_rt_all_reduce)},
      {F::ReduceScatter, "polymesh_rt_reduce_scatter",
       PROTOTYPE(polymesh_rt_reduce_scatter)},
      {F::AllToAll, "polymesh_rt_all_to_all",
       PROTOTYPE(polymesh_rt_all_to_all)},
      {F::CudaStream, "polymesh_rt_cuda_stream",
       PROTOTYPE(polymesh_rt_cuda_stream)},
      {F::NcclComm, "polymesh_rt_nccl_comm", PROTOTYPE(polymesh_rt_nccl_comm)},
      {F::NcclCheck, "polymesh_rt_nccl_check",
       PROTOTYPE(polymesh_rt_nccl_check)},
      {F::DeviceAlloc, "polymesh_rt_device_alloc",
       PROTOTYPE(polymesh_rt_device_alloc)},
      {F::DeviceFree, "polymesh_rt_device_free",
       PROTOTYPE(polymesh_rt_device_free)},
      {F::DeviceCopy, "polymesh_rt_device_copy",
       PROTOTYPE(polymesh_rt_device_copy)},
      {F::DeviceUpload, "polymesh_rt_device_upload",
       PROTOTYPE(polymesh_rt_device_upload)},
      {F::DeviceSynchronize, "polymesh_rt_device_synchronize",
       PROTOTYPE(polymesh_rt_device_synchronize)},
  });
}

#if POLYMESH_HAVE_NCCL
TEST(RuntimeFunctions, MatchNcclH) {
  using F = RuntimeFunction;
  checkAll({
      {F::NcclGroupStart, "ncclGroupStart", PROTOTYPE(ncclGroupStart)},
      {F::NcclGroupEnd, "ncclGroupEnd", PROTOTYPE(ncclGroupEnd)},
      {F::NcclSend, "ncclSend", PROTOTYPE(ncclSend)},
      {F::NcclRecv, "ncclRecv", PROTOTYPE(ncclRecv)},
      {F::NcclBroadcast, "ncclBroadcast", PROTOTYPE(ncclBroadcast)},
      {F::NcclAllGather, "ncclAllGather", PROTOTYPE(ncclAllGather)},
      {F::NcclAllReduce, "ncclAllReduce", PROTOTYPE(ncclAllReduce)},
      {F::NcclReduceScatter, "ncclReduceScatter", PROTOTYPE(ncclReduceScatter)},
  });
}
#endif

TEST(RuntimeFunctions, DeclaredOnceWithTheirSignature) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::LLVM::LLVMDialect>();
  mlir::OpBuilder builder(&context);
  auto module = mlir::ModuleOp::create(builder.getUnknownLoc());
  for (int i = 0; i < kNumRuntimeFunctions; ++i) {
    auto function = static_cast<RuntimeFunction>(i);
    mlir::LLVM::LLVMFuncOp first = getOrDeclare(module, function);
    EXPECT_EQ(getOrDeclare(module, function), first);
    const RuntimeSignature &signature = runtimeSignature(function);
    EXPECT_EQ(first.getName(), signature.name);
    mlir::LLVM::LLVMFunctionType type = first.getFunctionType();
    ASSERT_EQ(type.getNumParams(), signature.arguments.size())
        << signature.name.str();
    for (unsigned a = 0; a < type.getNumParams(); ++a) {
      char code = signature.arguments[a];
      mlir::Type param = type.getParamType(a);
      EXPECT_TRUE(code == 'p'   ? mlir::isa<mlir::LLVM::LLVMPointerType>(param)
                  : code == 'l' ? param.isInteger(64)
                                : param.isInteger(32))
          << signature.name.str() << " argument " << a;
    }
  }
  EXPECT_EQ(std::distance(module.getBody()->begin(), module.getBody()->end()),
            kNumRuntimeFunctions);
  module->erase();
}

} // namespace
