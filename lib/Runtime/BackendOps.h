//===- BackendOps.h - What every backend calls its operations -*- C++ -*-===//
//
// Part of Polymesh. Internal to lib/Runtime: the loopback and NCCL backends
// name their calls and device groups the same way in diagnostics.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_RUNTIME_BACKENDOPS_H
#define POLYMESH_LIB_RUNTIME_BACKENDOPS_H

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

#include <cstdint>
#include <string>

namespace polymesh::runtime::detail {

enum class OpKind : uint8_t {
  Send,
  Recv,
  Broadcast,
  AllGather,
  AllToAll,
  AllReduce,
  ReduceScatter,
};

/// snake_case name of a call, as in the C ABI ("all_gather").
inline const char *opKindName(OpKind kind) {
  switch (kind) {
  case OpKind::Send:
    return "send";
  case OpKind::Recv:
    return "recv";
  case OpKind::Broadcast:
    return "broadcast";
  case OpKind::AllGather:
    return "all_gather";
  case OpKind::AllToAll:
    return "all_to_all";
  case OpKind::AllReduce:
    return "all_reduce";
  case OpKind::ReduceScatter:
    return "reduce_scatter";
  }
  return "unknown";
}

/// A member list as given: "[5,0,3]".
inline std::string formatGroup(absl::Span<const int64_t> members) {
  return absl::StrCat("[", absl::StrJoin(members, ","), "]");
}

} // namespace polymesh::runtime::detail

#endif // POLYMESH_LIB_RUNTIME_BACKENDOPS_H
