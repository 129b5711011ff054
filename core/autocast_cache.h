// The autocast cast cache (internal to core/autocast.cpp and kernels/autocast_policy.cpp).
//
// Within one outermost autocast scope each weight (a leaf that requires grad) is cast to the
// lower dtype once and the cast tensor reused by every op that reads it; the cache is cleared when
// the outermost scope exits, so updated weights are cast afresh next step.
#pragma once

#include <map>
#include <memory>
#include <utility>

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
  void insert(const Tensor& src, DType dtype, const Tensor& cast) {
    map_[{src.impl(), dtype}] = {src.impl_ptr(), cast};
  }
  void clear() { map_.clear(); }
  size_t size() const { return map_.size(); }

 private:
  std::map<std::pair<const TensorImpl*, DType>, std::pair<std::weak_ptr<TensorImpl>, Tensor>> map_;
};

CastCache& thread_cache();
CacheStats& thread_cache_stats();

}  // namespace ember::autocast
