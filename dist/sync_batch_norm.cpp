// SyncBatchNorm: the forward statistics (one all_gather), the backward node (one all_reduce), and
// convert_sync_batchnorm. The formulas are in sync_batch_norm.h.
#include "dist/sync_batch_norm.h"

#include <cstdio>
#include <map>

#include "core/autograd/node.h"
#include "kernels/functional.h"
#include "nn/activation_checkpoint.h"
#include "nn/batch_norm1d.h"
#include "nn/batch_norm2d.h"
#include "nn/residual.h"
#include "nn/sequential.h"

namespace ember::dist {

namespace {

// Per-channel statistics are kept in f32 for f16/bf16/f32 inputs and in f64 for f64 (as batch_norm).
DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// Every dim but the channel dim (1).
std::vector<int64_t> reduce_dims(int dim) {
  std::vector<int64_t> dims{0};
  for (int d = 2; d < dim; ++d) dims.push_back(d);
  return dims;
}

// [C] -> [1, C, 1, ...] to broadcast against an input of `dim` dims.
Shape channel_shape(int dim, int64_t C) {
  Shape s = Shape::filled(dim, 1);
  s[1] = C;
  return s;
}

// The backward of the synchronised training forward (formulas: sync_batch_norm.h). Inputs
// (next_edges): x, weight, bias.
struct SyncBatchNormBackward final : autograd::Node {
  autograd::SavedTensor x, weight;
  Tensor mean, invstd, count;  // [C], [C], [] in the statistics dtype; count = the global M
  DType bias_dtype = DType::f32;
  ProcessGroupPtr pg;

  std::string name() const override { return "SyncBatchNormBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(3);
    const bool need_x = next_edges[0].valid(), need_w = next_edges[1].valid(), need_b = next_edges[2].valid();
    const bool have_g = !grads.empty() && grads[0].defined();
    // No gradient arrived: nothing to do, except the all_reduce the other ranks are waiting for.
    if (!have_g && !need_x) return out;
    autograd::NoGradGuard no_grad;
    const Tensor xv = x.unpack("SyncBatchNormBackward");
    const Tensor wv = weight.defined() ? weight.unpack("SyncBatchNormBackward") : Tensor();
    const int64_t C = xv.shape()[1];
    const DType s = mean.dtype();
    const Shape cs = channel_shape(xv.dim(), C);
    const Tensor gs = have_g ? grads[0].to(s) : zeros(xv.shape(), TensorOptions(s).device(xv.device()));
    const Tensor xhat = mul(sub(xv.to(s), mean.reshape(cs)), invstd.reshape(cs));
    Tensor sum_g, sum_gx;
    if (xv.numel() > 0) {
      const std::vector<int64_t> dims = reduce_dims(xv.dim());
      sum_g = sum(gs, dims);
      sum_gx = sum(mul(gs, xhat), dims);
    } else {
      sum_g = zeros({C}, TensorOptions(s).device(xv.device()));
      sum_gx = zeros({C}, TensorOptions(s).device(xv.device()));
    }
    // This rank's contributions (DDP reduces them with the other parameter gradients).
    if (need_w) out[1] = sum_gx.to(wv.dtype());
    if (need_b) out[2] = sum_g.to(bias_dtype);
    if (need_x) {
      Tensor packed = cat({sum_g, sum_gx});  // [2C]
      pg->all_reduce(packed, ReduceOp::kSum)->wait();
      const Tensor mean_g = div(packed.narrow(0, 0, C), count).reshape(cs);
      const Tensor mean_gx = div(packed.narrow(0, C, C), count).reshape(cs);
      const Tensor k = (wv.defined() ? mul(wv.to(s), invstd) : invstd).reshape(cs);
      out[0] = mul(sub(sub(gs, mean_g), mul(xhat, mean_gx)), k).to(xv.dtype());
    }
    return out;
  }

  void release_saved() override {
    x.release();
    weight.release();
  }
};

// The global batch's per-channel statistics, in the statistics dtype.
struct GlobalStats {
  Tensor mean, var, invstd;  // [C]; var biased
  Tensor count;              // [] = M, the values per channel over all ranks
};

// The global batch's statistics: one all_gather of (mean_r, var_r, n_r), combined per channel.
GlobalStats gather_stats(const Tensor& x, int64_t C, const ProcessGroupPtr& pg, double eps) {
  autograd::NoGradGuard ng;
  const DType s = stats_dtype(x.dtype());
  const TensorOptions so = TensorOptions(s).device(x.device());
  const int64_t n = x.numel() / C;  // this rank's values per channel (known from the shape)
  Tensor mean_r, var_r;
  if (n > 0) {
    const std::vector<int64_t> dims = reduce_dims(x.dim());
    const Tensor xs = x.to(s);
    mean_r = div(sum(xs, dims), static_cast<double>(n));
    const Tensor d = sub(xs, mean_r.reshape(channel_shape(x.dim(), C)));
    var_r = div(sum(mul(d, d), dims), static_cast<double>(n));
  } else {
    mean_r = zeros({C}, so);
    var_r = zeros({C}, so);
  }
  Tensor packed = cat({mean_r, var_r, full({1}, static_cast<double>(n), so)});  // [2C + 1]
  const int64_t W = pg->size();
  Tensor gathered = empty({W * (2 * C + 1)}, so);
  pg->all_gather(gathered, packed)->wait();
  const Tensor g = gathered.view({W, 2 * C + 1});
  const Tensor means = g.narrow(1, 0, C), vars = g.narrow(1, C, C), counts = g.narrow(1, 2 * C, 1);
  GlobalStats st;
  st.count = sum(counts);                                                 // [] = M
  st.mean = div(sum(mul(means, counts), {0}), st.count);                  // [C]
  const Tensor dm = sub(means, st.mean.reshape({1, C}));                  // [W, C]
  st.var = div(sum(mul(counts, add(vars, mul(dm, dm))), {0}), st.count);  // biased
  st.invstd = rsqrt(add(st.var, eps));
  return st;
}

// Records y's SyncBatchNormBackward when grad mode is on and x, weight or bias wants a gradient.
void record_backward(const Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias, const GlobalStats& st,
                     const ProcessGroupPtr& pg) {
  const bool need =
      x.requires_grad() || (weight.defined() && weight.requires_grad()) || (bias.defined() && bias.requires_grad());
  if (!autograd::grad_mode_enabled() || !need) return;
  auto node = std::make_shared<SyncBatchNormBackward>();
  node->next_edges = {autograd::gradient_edge(x), autograd::gradient_edge(weight), autograd::gradient_edge(bias)};
  node->x = autograd::SavedTensor(x);
  if (weight.defined()) node->weight = autograd::SavedTensor(weight);
  node->mean = st.mean;
  node->invstd = st.invstd;
  node->count = st.count;
  node->bias_dtype = bias.defined() ? bias.dtype() : stats_dtype(x.dtype());
  node->pg = pg;
  autograd::set_history(node, {y});
}

}  // namespace

// ---- the module ----

SyncBatchNormImpl::SyncBatchNormImpl(const SyncBatchNormOptions& o) : SyncBatchNormImpl(o, nullptr) {}

SyncBatchNormImpl::SyncBatchNormImpl(const SyncBatchNormOptions& o, const nn::BatchNormImplBase* adopt)
    : Module("SyncBatchNorm"), options(o) {
  EMBER_CHECK(o.num_features() > 0, "SyncBatchNorm: num_features must be positive, got ", o.num_features());
  EMBER_CHECK(o.eps() > 0, "SyncBatchNorm: eps must be positive, got ", o.eps());
  EMBER_CHECK(!o.momentum() || (*o.momentum() >= 0 && *o.momentum() <= 1),
              "SyncBatchNorm: momentum must be in [0, 1], got ", o.momentum().value_or(0));
  const int64_t c = o.num_features();
  // Registration order and names as nn::BatchNorm (state_dicts interchange).
  if (o.affine()) {
    if (adopt) {
      weight = register_parameter("weight", adopt->weight, adopt->weight.requires_grad());
      bias = register_parameter("bias", adopt->bias, adopt->bias.requires_grad());
    } else {
      weight = register_parameter("weight", ones({c}));
      bias = register_parameter("bias", zeros({c}));
    }
  }
  if (o.track_running_stats()) {
    if (adopt) {
      running_mean = register_buffer("running_mean", adopt->running_mean);
      running_var = register_buffer("running_var", adopt->running_var);
      num_batches_tracked = register_buffer("num_batches_tracked", adopt->num_batches_tracked);
    } else {
      running_mean = register_buffer("running_mean", zeros({c}));
      running_var = register_buffer("running_var", ones({c}));
      num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
    }
  }
}

std::shared_ptr<SyncBatchNormImpl> SyncBatchNormImpl::from_batch_norm(const nn::BatchNormImplBase& bn,
                                                                      ProcessGroupPtr pg) {
  SyncBatchNormOptions o(bn.options);
  o.process_group(std::move(pg));
  std::shared_ptr<SyncBatchNormImpl> m(new SyncBatchNormImpl(o, &bn));
  m->train(bn.is_training());
  return m;
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  autograd::NoGradGuard ng;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (options.affine()) {
    autograd::NoGradGuard ng;
    weight.fill_(1.0);
    bias.zero_();
  }
}

ProcessGroupPtr SyncBatchNormImpl::group() const {
  return options.process_group() ? options.process_group() : default_group();
}

Tensor SyncBatchNormImpl::forward(const Tensor& x) {
  EMBER_CHECK(x.defined(), "SyncBatchNorm: the input is undefined");
  EMBER_CHECK(x.dim() >= 2, "SyncBatchNorm: expects an input (N, C) or (N, C, *), got ", x.shape());
  EMBER_CHECK(is_floating(x.dtype()), "SyncBatchNorm: expects a floating input, got ", x.describe());
  const int64_t C = options.num_features();
  EMBER_CHECK(x.shape()[1] == C, "SyncBatchNorm: input ", x.shape(), " has ", x.shape()[1],
              " channels but the layer expects ", C);
  ProcessGroupPtr pg;
  if (is_training()) {
    pg = group();
    if (!pg) {
      const int ws = launch_env().world_size;
      EMBER_CHECK(ws <= 1, "SyncBatchNorm: training in a job of WORLD_SIZE=", ws,
                  " but there is no process group: call dist::init_process_group() first (or give one with "
                  "SyncBatchNormOptions::process_group)");
    }
  }
  const bool sync = pg && pg->size() > 1;

  double factor = options.momentum().value_or(0.0);
  Tensor count;  // for the local batch_norm to count in its own launch, as nn::BatchNorm does
  if (is_training() && options.track_running_stats()) {
    if (!sync && options.momentum()) {
      count = num_batches_tracked;
    } else {
      autograd::NoGradGuard ng;
      num_batches_tracked.add_(1.0);  // in place, one launch
      // Cumulative moving average: reads the counter on the host (as nn::BatchNorm).
      if (!options.momentum()) factor = 1.0 / num_batches_tracked.item();
    }
  }
  if (!sync) {
    // Exactly nn::BatchNorm: the local batch (group of one, eval, or single process).
    const bool use_batch = is_training() || !options.track_running_stats();
    return batch_norm(x, weight, bias, running_mean, running_var, use_batch, factor, options.eps(), count);
  }

  // ---- the global batch's statistics, and the running statistics updated with them ----
  const GlobalStats st = gather_stats(x, C, pg, options.eps());
  if (options.track_running_stats()) {
    autograd::NoGradGuard ng;
    const DType s = stats_dtype(x.dtype());
    const Tensor unbiased = mul(st.var, div(st.count, sub(st.count, 1.0)));
    running_mean.copy_(add(mul(running_mean.to(s), 1.0 - factor), mul(st.mean, factor)));
    running_var.copy_(add(mul(running_var.to(s), 1.0 - factor), mul(unbiased, factor)));
  }

  // ---- normalise: batch_norm's eval form with the global statistics (no autograd recorded) ----
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = batch_norm(x, weight, bias, st.mean, st.var, /*training=*/false, 0.0, options.eps());
  }
  record_backward(y, x, weight, bias, st, pg);
  return y;
}

std::string SyncBatchNormImpl::extra_repr() const {
  return str(options.num_features(), ", eps=", options.eps(),
             ", momentum=", options.momentum() ? str(*options.momentum()) : std::string("None"),
             ", affine=", options.affine() ? "true" : "false",
             ", track_running_stats=", options.track_running_stats() ? "true" : "false");
}

// ---- convert_sync_batchnorm ----

namespace {

bool is_batch_norm(const nn::Module* m) {
  return dynamic_cast<const nn::BatchNorm1dImpl*>(m) != nullptr ||
         dynamic_cast<const nn::BatchNorm2dImpl*>(m) != nullptr;
}

struct Converter {
  ProcessGroupPtr pg;
  // old BatchNorm -> its SyncBatchNorm (a BatchNorm registered twice becomes one SyncBatchNorm)
  std::map<const nn::Module*, std::shared_ptr<SyncBatchNormImpl>> done;
  std::map<const nn::Module*, std::pair<std::string, std::shared_ptr<nn::Module>>> replaced;  // old: path, module

  std::shared_ptr<SyncBatchNormImpl> sync_for(const std::shared_ptr<nn::Module>& bn) {
    auto it = done.find(bn.get());
    if (it != done.end()) return it->second;
    auto sync = SyncBatchNormImpl::from_batch_norm(dynamic_cast<const nn::BatchNormImplBase&>(*bn), pg);
    done[bn.get()] = sync;
    return sync;
  }

  void walk(nn::Module& parent, const std::string& prefix) {
    const auto kids = parent.named_children();  // a copy: the registration changes below
    for (const auto& [name, child] : kids) {
      const std::string path = prefix.empty() ? name : prefix + "." + name;
      if (!is_batch_norm(child.get())) {
        walk(*child, path);
        continue;
      }
      std::shared_ptr<nn::Module> sync = sync_for(child);
      std::shared_ptr<nn::Module> old = parent.replace_module(name, sync);
      // The handles the in-tree containers keep besides the registration (Sequential's list is
      // updated by its replace_module override).
      if (auto* res = dynamic_cast<nn::ResidualImpl*>(&parent)) {
        if (res->body == old) res->body = sync;
        if (res->shortcut == old) res->shortcut = sync;
      }
      if (auto* ck = dynamic_cast<nn::CheckpointImpl*>(&parent)) {
        if (ck->module == old) ck->module = sync;
      }
      const nn::Module* key = old.get();
      replaced.emplace(key, std::make_pair(path, std::move(old)));
    }
  }
};

}  // namespace

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> model, ProcessGroupPtr pg) {
  EMBER_CHECK(model != nullptr, "convert_sync_batchnorm: the model is empty");
  if (is_batch_norm(model.get()))
    return SyncBatchNormImpl::from_batch_norm(dynamic_cast<const nn::BatchNormImplBase&>(*model), std::move(pg));
  Converter conv{std::move(pg), {}, {}};
  conv.walk(*model, "");
  // A replaced BatchNorm that something besides us still holds may be called through that handle
  // (a member of a custom module), unsynchronised.
  for (const auto& [ptr, entry] : conv.replaced) {
    if (entry.second.use_count() > 1)
      std::fprintf(stderr,
                   "convert_sync_batchnorm: warning: the BatchNorm at '%s' was replaced by a SyncBatchNorm in the "
                   "module tree but is still referenced elsewhere; if its parent module calls it through a member "
                   "handle, those calls are not synchronised (use SyncBatchNorm in that module directly)\n",
                   entry.first.c_str());
  }
  return model;
}

}  // namespace ember::dist
