// Applies an op's autocast policy to its inputs (called by the op runner; see core/autocast.h).
#include "kernels/autocast_policy.h"

#include <algorithm>

#include "core/autocast.h"
#include "core/autocast_cache.h"
#include "core/autograd/node.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember::autocast {

namespace {

// Note [autocast casts in one launch]: an op under autocast had each floating input cast in a
// launch of its own: mnist_train's MLP, one mlp op, ran seven cast kernels (x and six parameters)
// before its one forward kernel, and six more (the casts' backward) after its backward kernel. The
// casts an op still needs now run as cast_many (kernels/ops/copy.h), one launch for its weights
// and one for its other inputs (as a rule one tensor, x):
// - Weights (leaves that require grad) are cast once per outermost scope and the result cached
//   for every later use in the scope. Their cast is recorded for autograd even under no_grad: made
//   in an evaluation pass without history, the cached cast would silently give the weight no
//   gradient in a later training pass of the same scope.
// - The other inputs apart, and among them those that require grad apart from those that do not:
//   one node for all would make every output require grad, and an op handed a data tensor that
//   requires grad computes an input gradient nobody wants.
// A non-contiguous input (a channels-last weight, a transposed view) keeps cast's own launch,
// which keeps its layout. The backward turns the weights' gradients back in one launch as well;
// the values are cast's, bit for bit.
bool is_weight(const Tensor& t) { return t.is_leaf() && t.requires_grad(); }

// Whether the lower policy casts t to `low`.
bool lowers(const Tensor& t, DType low) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != low && t.dtype() != DType::f64;
}

// ts cast to dtype: cast_many for the contiguous ones (one launch), cast for the others.
std::vector<Tensor> cast_all(const std::vector<Tensor>& ts, DType dtype) {
  std::vector<Tensor> out(ts.size()), batch;
  std::vector<size_t> at;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].is_contiguous()) {
      batch.push_back(ts[i]);
      at.push_back(i);
    } else {
      out[i] = cast(ts[i], dtype);
    }
  }
  if (batch.size() == 1) out[at[0]] = cast(batch[0], dtype);
  if (batch.size() > 1) {
    std::vector<Tensor> r = cast_many(batch, dtype);
    for (size_t k = 0; k < at.size(); ++k) out[at[k]] = std::move(r[k]);
  }
  return out;
}

// Note [autocast's cast plan]: with an op's weights cast in one launch, a model of several layers
// still cast its weights in a launch per layer, every step (the CNN: four forward). But a training
// loop's steps use the same weights in the same order, so the cache keeps, past each outermost
// scope, the list of the weights it cast, and the next scope's first op with a weight to cast casts
// every weight of that list on its device in one launch (cast_many, without history), ahead of use.
// Each op then takes its weights' casts from there and records them for autograd as their cast
// would have (CastAheadBackward: one node per op, as before, so the gradients still go back to f32
// in one launch per op, as each op's backward ends, which data parallel's hooks rely on). A weight
// written in place (or given other storage) since the cast ahead is cast again at its op; one the
// plan lists but the scope does not use costs its share of the launch and nothing else, and drops
// out of the next plan. The values are a cast's, bit for bit.
struct CastAheadBackward final : autograd::Node {
  std::vector<autograd::OutputMeta> weights;  // each weight's shape, dtype and device

  std::string name() const override { return "CastAheadBackward"; }
  // cast_many's own backward: each gradient back to its weight's dtype, one launch per dtype
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    BackwardCtx ctx;
    ctx.grads = std::move(grads);
    ctx.input_meta = weights;
    ctx.output_meta = outputs;
    for (const autograd::Edge& e : next_edges) ctx.needs.push_back(e.valid());
    return op_info(OpId::cast_many).backward(ctx);
  }
};

// The first op of a scope with weights to cast on `device`: the plan's weights there, in one launch.
void cast_plan_ahead(CastCache& cache, Device device, DType low) {
  if (!cache.take_plan_turn(device, low)) return;
  std::vector<Tensor> srcs;
  for (const CastCache::Planned& p : cache.plan()) {
    std::shared_ptr<TensorImpl> impl = p.src.lock();
    if (p.dtype != low || !impl) continue;
    Tensor t(std::move(impl));
    if (!is_weight(t) || !lowers(t, low) || !t.is_contiguous() || t.device() != device ||
        cache.find(t, low).defined() ||
        std::any_of(srcs.begin(), srcs.end(), [&](const Tensor& s) { return s.impl() == t.impl(); }))
      continue;
    srcs.push_back(std::move(t));
  }
  if (srcs.empty()) return;
  std::vector<Tensor> cast;
  {
    autograd::NoGradGuard no_history;  // recorded per op, at its use
    cast = cast_all(srcs, low);
  }
  for (size_t k = 0; k < srcs.size(); ++k)
    cache.put_ahead(srcs[k], low, {cast[k], srcs[k].impl_ptr(), srcs[k].version(), srcs[k].data_ptr()});
}

// fresh's casts to `low`: from the casts ahead where they hold, recorded as one cast, else cast now.
std::vector<Tensor> cast_weights(CastCache& cache, const std::vector<Tensor>& fresh, DType low) {
  cast_plan_ahead(cache, fresh[0].device(), low);
  std::vector<Tensor> out(fresh.size()), now;
  std::vector<size_t> now_at;
  std::shared_ptr<CastAheadBackward> node;  // made only where a cast ahead is used
  std::vector<Tensor> ahead;
  for (size_t k = 0; k < fresh.size(); ++k) {
    out[k] = cache.take_ahead(fresh[k], low);
    if (out[k].defined()) {
      if (!node) node = std::make_shared<CastAheadBackward>();
      node->next_edges.push_back(autograd::gradient_edge(fresh[k]));
      node->weights.push_back({fresh[k].shape(), fresh[k].dtype(), fresh[k].device()});
      ahead.push_back(out[k]);
    } else {
      now.push_back(fresh[k]);
      now_at.push_back(k);
    }
  }
  if (node) autograd::set_history(node, ahead);
  if (!now.empty()) {
    std::vector<Tensor> cast = cast_all(now, low);
    for (size_t k = 0; k < now.size(); ++k) out[now_at[k]] = std::move(cast[k]);
  }
  return out;
}

void lower_inputs(std::vector<Tensor>& inputs, DType low) {
  CastCache& cache = thread_cache();
  CacheStats& stats = thread_cache_stats();
  std::vector<Tensor> fresh, others;  // weights the cache lacks (each once), the other inputs
  std::vector<size_t> other_at;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!lowers(t, low)) continue;
    if (!is_weight(t)) {
      others.push_back(t);
      other_at.push_back(i);
    } else if (!cache.find(t, low).defined() &&
               std::none_of(fresh.begin(), fresh.end(), [&](const Tensor& f) { return f.impl() == t.impl(); })) {
      fresh.push_back(t);
    }
  }
  if (!fresh.empty()) {
    autograd::EnableGradGuard with_grad;  // recorded always (the Note)
    std::vector<Tensor> cast = cast_weights(cache, fresh, low);
    for (size_t k = 0; k < fresh.size(); ++k) cache.insert(fresh[k], low, cast[k]);
  }
  size_t uses = 0;  // each fresh weight's first use counts as its cast, every other use as a hit
  for (Tensor& t : inputs) {
    if (!lowers(t, low) || !is_weight(t)) continue;
    ++uses;
    t = cache.find(t, low);
  }
  stats.casts += fresh.size();
  stats.hits += uses - fresh.size();
  // those that require grad apart from those that do not, for the same reason
  for (bool grad : {true, false}) {
    std::vector<Tensor> group;
    std::vector<size_t> at;
    for (size_t k = 0; k < others.size(); ++k)
      if (others[k].requires_grad() == grad) {
        group.push_back(others[k]);
        at.push_back(other_at[k]);
      }
    if (group.empty()) continue;
    std::vector<Tensor> cast = cast_all(group, low);
    for (size_t k = 0; k < group.size(); ++k) inputs[at[k]] = std::move(cast[k]);
    stats.casts += group.size();
  }
}

}  // namespace

void apply_policy(AutocastPolicy policy, DeviceType device, std::vector<Tensor>& inputs) {
  switch (policy) {
    case AutocastPolicy::none: return;
    case AutocastPolicy::lower: lower_inputs(inputs, lower_dtype(device)); return;
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
