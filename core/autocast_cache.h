// The autocast cast cache (internal to core/autocast.cpp and kernels/autocast_policy.cpp).
//
// Within one outermost autocast scope each weight (a leaf that requires grad) is cast to the
// lower dtype once and the cast tensor reused by every op that reads it; the cache is cleared when
// the outermost scope exits, so updated weights are cast afresh next step. It also keeps the cast
// plan (Note [autocast's cast plan] in kernels/autocast_policy.cpp): the weights the last
// outermost scope cast, which the next one casts ahead, all in one launch, at its first lowering op.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/tensor.h"

namespace ember::autocast {

class CastCache {
 public:
  // The cached cast of `src` to `dtype`, or an undefined tensor.
  Tensor find(const Tensor& src, DType dtype) const {
    auto it = map_.find({src.impl(), dtype});
    if (it == map_.end() || it->second.first.expired()) return Tensor();
    return it->second.second;
  }
  // Caches `cast` as src's cast to dtype, and notes src for the next scope's plan.
  void insert(const Tensor& src, DType dtype, const Tensor& cast) {
    map_[{src.impl(), dtype}] = {src.impl_ptr(), cast};
    cast_this_scope_.push_back({src.impl_ptr(), dtype});
  }
  // Drops every cast (and the casts made ahead); the plan stays.
  void clear() {
    map_.clear();
    ahead_.clear();
    cast_this_scope_.clear();
    planned_.clear();
  }
  // The outermost scope's end: what it cast becomes the next scope's plan.
  void end_scope() {
    plan_ = std::move(cast_this_scope_);
    clear();
  }
  size_t size() const { return map_.size(); }

  // ---- the cast plan ----
  struct Planned {
    std::weak_ptr<TensorImpl> src;
    DType dtype;
  };
  // A cast made ahead of the op that needs it, and what its source was then.
  struct Ahead {
    Tensor cast;
    std::weak_ptr<TensorImpl> src;
    uint64_t version = 0;
    const void* data = nullptr;
  };
  // The weights the last outermost scope cast, in the order it cast them.
  const std::vector<Planned>& plan() const { return plan_; }
  // Whether this scope has made its casts ahead for (device, dtype) yet; marks it made.
  bool take_plan_turn(Device device, DType dtype) {
    for (const auto& [d, t] : planned_)
      if (d == device && t == dtype) return false;
    planned_.emplace_back(device, dtype);
    return true;
  }
  void put_ahead(const Tensor& src, DType dtype, Ahead a) { ahead_[{src.impl(), dtype}] = std::move(a); }
  // The cast made ahead for src, removed from the casts ahead; undefined if there is none or src
  // changed since (written in place, or given other storage).
  Tensor take_ahead(const Tensor& src, DType dtype) {
    auto it = ahead_.find({src.impl(), dtype});
    if (it == ahead_.end()) return Tensor();
    Ahead a = std::move(it->second);
    ahead_.erase(it);
    const bool same = a.src.lock() == src.impl_ptr() && a.version == src.version() && a.data == src.data_ptr();
    return same ? a.cast : Tensor();
  }

 private:
  using Key = std::pair<const TensorImpl*, DType>;
  std::map<Key, std::pair<std::weak_ptr<TensorImpl>, Tensor>> map_;
  std::map<Key, Ahead> ahead_;
  std::vector<Planned> plan_, cast_this_scope_;
  std::vector<std::pair<Device, DType>> planned_;
};

CastCache& thread_cache();
CacheStats& thread_cache_stats();

}  // namespace ember::autocast
