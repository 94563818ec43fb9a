//===- NcclAbi.h - NCCL enum values that generated code passes --*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// --polymesh-lower-to-cuda emits calls to NCCL with ncclDataType_t and
// ncclRedOp_t arguments, but the compiler must build without nccl.h (the
// lowering runs where no GPU stack is installed). These are nccl.h's values,
// part of NCCL 2's stable ABI, named once; lib/Runtime/NcclBackend.cpp,
// which includes nccl.h, checks every one of them against it at compile
// time.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_RUNTIME_NCCLABI_H
#define POLYMESH_RUNTIME_NCCLABI_H

#include <cstdint>

namespace polymesh::nccl_abi {

/// ncclDataType_t.
enum DataType : int32_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kInt64 = 4,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};

/// ncclRedOp_t.
enum RedOp : int32_t {
  kSum = 0,
};

} // namespace polymesh::nccl_abi

#endif // POLYMESH_RUNTIME_NCCLABI_H
