//===- DeviceIndex.h - Dense numbering of device ids ------------*- C++ -*-===//
//
// Part of Polymesh. Private to lib/Planner.
//
//===----------------------------------------------------------------------===//
//
// Plans can touch a million (device, box) pairs at 1,024 devices, so the
// planner's inner loops index plain vectors by a dense device number instead
// of hashing device ids. Ids are usually small (0..N-1 or a few ranges); then
// the lookup is one array load, else one hash probe.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_LIB_PLANNER_DEVICEINDEX_H
#define POLYMESH_LIB_PLANNER_DEVICEINDEX_H

#include "absl/container/flat_hash_map.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace polymesh::planner {

class DeviceIndex {
public:
  /// Numbers the distinct ids of `ids` (which may repeat) in sorted order.
  explicit DeviceIndex(std::vector<int64_t> ids) {
    if (ids.empty())
      return;
    auto [minIt, maxIt] = std::minmax_element(ids.begin(), ids.end());
    int64_t minId = *minIt, maxId = *maxIt;
    if (minId >= 0 &&
        maxId < 4 * static_cast<int64_t>(ids.size()) + kDirectSlack) {
      // Small ids: a direct table dedupes and sorts in linear time.
      direct_.assign(maxId + 1, -1);
      for (int64_t id : ids)
        direct_[id] = 0;
      for (int64_t id = 0; id <= maxId; ++id)
        if (direct_[id] == 0) {
          direct_[id] = static_cast<int32_t>(ids_.size());
          ids_.push_back(id);
        }
      useDirect_ = true;
      return;
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    ids_ = std::move(ids);
    map_.reserve(ids_.size());
    for (size_t i = 0; i < ids_.size(); ++i)
      map_[ids_[i]] = static_cast<int32_t>(i);
  }

  /// Dense number of `id`, or -1 when it was not indexed.
  int32_t at(int64_t id) const {
    if (useDirect_)
      return id >= 0 && id < static_cast<int64_t>(direct_.size()) ? direct_[id]
                                                                  : -1;
    auto it = map_.find(id);
    return it == map_.end() ? -1 : it->second;
  }
  int64_t idAt(int32_t dense) const { return ids_[dense]; }
  int32_t size() const { return static_cast<int32_t>(ids_.size()); }

private:
  static constexpr int64_t kDirectSlack = 4096;
  std::vector<int64_t> ids_;
  std::vector<int32_t> direct_;
  absl::flat_hash_map<int64_t, int32_t> map_;
  bool useDirect_ = false;
};

} // namespace polymesh::planner

#endif // POLYMESH_LIB_PLANNER_DEVICEINDEX_H
