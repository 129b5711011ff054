// Applies an op's autocast policy to its inputs (called by the op runner; see core/autocast.h).
#include "kernels/autocast_policy.h"

#include "core/autocast.h"
#include "core/autocast_cache.h"
#include "core/autograd/node.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember::autocast {

namespace {

// Weights (leaves that require grad) are cast once per outermost scope and reused.
Tensor cached_cast(const Tensor& t, DType dtype) {
  bool cacheable = t.is_leaf() && t.requires_grad();
  CastCache& cache = thread_cache();
  if (cacheable) {
    if (Tensor hit = cache.find(t, dtype); hit.defined()) {
      ++thread_cache_stats().hits;
      return hit;
    }
  }
  Tensor r;
  if (cacheable) {
    // The cached cast is served to every later use in the scope, with grad mode on or off. Made
    // under no_grad (an evaluation pass) it would carry no autograd history, and a later training
    // pass in the same scope would silently give the weight no gradient: record it always.
    autograd::EnableGradGuard with_grad;
    r = cast(t, dtype);
  } else {
    r = cast(t, dtype);
  }
  ++thread_cache_stats().casts;
  if (cacheable) cache.insert(t, dtype, r);
  return r;
}

}  // namespace

void apply_policy(AutocastPolicy policy, DeviceType device, std::vector<Tensor>& inputs) {
  switch (policy) {
    case AutocastPolicy::none: return;
    case AutocastPolicy::lower: {
      DType low = lower_dtype(device);
      for (Tensor& t : inputs)
        if (t.defined() && is_floating(t.dtype()) && t.dtype() != low && t.dtype() != DType::f64)
          t = cached_cast(t, low);
      return;
    }
    case AutocastPolicy::fp32: {
      for (Tensor& t : inputs)
        if (t.defined() && is_reduced_float(t.dtype())) t = cast(t, DType::f32);
      return;
    }
    case AutocastPolicy::promote: {
      DType widest = DType::boolean;
      bool any = false;
      for (const Tensor& t : inputs)
        if (t.defined() && is_floating(t.dtype())) {
          widest = any ? promote_types(widest, t.dtype()) : t.dtype();
          any = true;
        }
      if (!any) return;
      for (Tensor& t : inputs)
        if (t.defined() && is_floating(t.dtype()) && t.dtype() != widest) t = cast(t, widest);
      return;
    }
  }
}

}  // namespace ember::autocast
