//===- LayoutBuilders.h - Terse layouts for unit tests ----------*- C++ -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Builders shared by the planner's and the runtime's tests: meshes from
// (name, size) pairs, axis references from text ("a", "a:(2)4") and whole
// layouts from per-dimension axis names.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_UNITTESTS_SUPPORT_LAYOUTBUILDERS_H
#define POLYMESH_UNITTESTS_SUPPORT_LAYOUTBUILDERS_H

#include "polymesh/Planner/Layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace polymesh::planner::testing {

inline Mesh makeMesh(std::vector<std::pair<std::string, int64_t>> axes,
                     std::vector<int64_t> ids = {}) {
  Mesh mesh;
  for (auto &[name, size] : axes)
    mesh.axes.push_back({name, size});
  mesh.deviceIds = std::move(ids);
  return mesh;
}

/// Device ids begin, begin+1, ..., end-1.
inline std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> ids(end - begin);
  std::iota(ids.begin(), ids.end(), begin);
  return ids;
}

/// "a" is the whole axis a; "a:(2)4" the sub-axis of pre-size 2, size 4.
inline AxisRef ref(const Mesh &mesh, const std::string &text) {
  size_t colon = text.find(':');
  int axis = *mesh.axisIndex(text.substr(0, colon));
  if (colon == std::string::npos)
    return AxisRef::whole(mesh, axis);
  size_t close = text.find(')');
  return AxisRef{axis, std::stoll(text.substr(colon + 2, close - colon - 2)),
                 std::stoll(text.substr(close + 1))};
}

inline std::vector<AxisRef> refs(const Mesh &mesh,
                                 const std::vector<std::string> &names) {
  std::vector<AxisRef> result;
  for (const std::string &name : names)
    result.push_back(ref(mesh, name));
  return result;
}

/// A layout from the axis names of each dimension (and unreduced axes);
/// an invalid one fails the calling test.
inline TensorLayout layout(const Mesh &mesh,
                           const std::vector<std::vector<std::string>> &dims,
                           std::vector<int64_t> shape,
                           const std::vector<std::string> &unreduced = {}) {
  Sharding sharding = Sharding::replicatedOfRank(dims.size());
  for (size_t d = 0; d < dims.size(); ++d)
    sharding.dims[d].axes = refs(mesh, dims[d]);
  sharding.unreduced = refs(mesh, unreduced);
  absl::StatusOr<TensorLayout> result =
      TensorLayout::create(mesh, sharding, std::move(shape));
  EXPECT_TRUE(result.ok()) << result.status();
  return *std::move(result);
}

} // namespace polymesh::planner::testing

#endif // POLYMESH_UNITTESTS_SUPPORT_LAYOUTBUILDERS_H
