//===- PlanCache.cpp - Thread-safe cache of transfer plans ----------------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// A JIT replans the same reshards on every trace; plans depend only on the
// planner input, so they are cached by a canonical text of that input.
// Planning happens outside the lock so that threads planning different
// reshards do not serialize; when two threads race on one key, the first
// plan inserted wins and both callers get it.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Planner/Planner.h"

#include "absl/strings/str_cat.h"

namespace polymesh::planner {

namespace {
void appendRefs(std::string &key, const std::vector<AxisRef> &refs) {
  for (const AxisRef &ref : refs)
    absl::StrAppend(&key, ref.axis, ":", ref.preSize, ":", ref.size, ",");
  key += ";";
}

void appendLayout(std::string &key, const TensorLayout &layout) {
  const Mesh &mesh = layout.mesh();
  key += "mesh(";
  for (const MeshAxis &axis : mesh.axes)
    absl::StrAppend(&key, axis.name.size(), "#", axis.name, "=", axis.size,
                    ",");
  // Device ids are spelled out so that the implicit and the explicit
  // identity give the same key.
  key += "|ids";
  for (int64_t p = 0, e = mesh.numDevices(); p < e; ++p)
    absl::StrAppend(&key, ",", mesh.deviceAt(p));
  key += ")dims(";
  for (const DimSharding &dim : layout.sharding().dims)
    appendRefs(key, dim.axes);
  key += ")rep(";
  appendRefs(key, layout.sharding().replicated);
  key += ")unr(";
  appendRefs(key, layout.sharding().unreduced);
  key += ")";
}
} // namespace

std::string PlanCache::key(const TensorLayout &source,
                           const TensorLayout &destination,
                           int64_t elementBytes, const PlanOptions &options) {
  std::string key = "shape";
  for (int64_t extent : source.shape())
    absl::StrAppend(&key, ",", extent);
  key += "|src:";
  appendLayout(key, source);
  key += "|dst:";
  appendLayout(key, destination);
  // Destination shape too: a mismatch is an error that must not hit a plan.
  key += "|dstshape";
  for (int64_t extent : destination.shape())
    absl::StrAppend(&key, ",", extent);
  absl::StrAppend(&key, "|eb=", elementBytes,
                  "|limit=", options.memoryLimitBytes,
                  "|symbolic=", options.symbolicReductions ? 1 : 0,
                  options.symbolicExchanges ? 1 : 0);
  return key;
}

absl::StatusOr<std::shared_ptr<const TransferPlan>>
PlanCache::getOrPlan(const TensorLayout &source,
                     const TensorLayout &destination, int64_t elementBytes,
                     const PlanOptions &options) {
  std::string cacheKey = key(source, destination, elementBytes, options);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = plans_.find(cacheKey);
    if (it != plans_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
  }
  absl::StatusOr<TransferPlan> plan =
      planReshard(source, destination, elementBytes, options);
  if (!plan.ok())
    return plan.status();
  auto shared = std::make_shared<const TransferPlan>(std::move(*plan));
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = plans_.try_emplace(std::move(cacheKey), shared);
  return it->second;
}

int64_t PlanCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

int64_t PlanCache::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

size_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plans_.size();
}

void PlanCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  plans_.clear();
  hits_ = misses_ = 0;
}

} // namespace polymesh::planner
