// DistributedDataParallel (dist/ddp.h, Note [DDP buckets]).
#include "dist/ddp.h"

#include <algorithm>
#include <sstream>

#include "amp/grad_scaler.h"
#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/error.h"
#include "kernels/functional.h"

namespace ember::dist {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  pg_ = options_.process_group_ ? options_.process_group_ : default_group();
  EMBER_CHECK(pg_ != nullptr,
              "DistributedDataParallel: no process group; call dist::init_process_group() first "
              "(and start the program with ember_run)");
  EMBER_CHECK(options_.bucket_cap_mb_ > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
              options_.bucket_cap_mb_);
  for (const auto& [name, t] : module_->named_parameters()) {
    if (!t.requires_grad()) continue;
    EMBER_CHECK(t.is_contiguous(), "DistributedDataParallel: parameter ", name, " is not contiguous");
    params_.push_back({name, t});
  }
  // Every rank starts from rank 0's model.
  {
    autograd::NoGradGuard ng;
    std::vector<WorkPtr> works;
    std::vector<Tensor> keep;
    for (auto& p : params_) {
      keep.push_back(p.tensor);
      works.push_back(pg_->broadcast(keep.back(), 0));
    }
    for (const auto& [name, b] : module_->named_buffers()) {
      if (!b.defined() || b.numel() == 0) continue;
      EMBER_CHECK(b.is_contiguous(), "DistributedDataParallel: buffer ", name, " is not contiguous");
      keep.push_back(b);
      works.push_back(pg_->broadcast(keep.back(), 0));
    }
    for (auto& w : works) w->wait();
  }
  std::vector<int> order;
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) order.push_back(i);
  build_buckets(order);
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
    Param& p = params_[i];
    p.tensor.impl()->meta().accumulate_grad_in_place = true;
    p.hook = p.tensor.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad(i); });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& p : params_) {
    p.tensor.remove_post_accumulate_grad_hook(p.hook);
    p.tensor.impl()->meta().accumulate_grad_in_place = false;
  }
  // Reductions still in flight write into buffers the gradients view: let them land.
  for (auto& b : buckets_) {
    if (!b.work) continue;
    try {
      b.work->wait();
    } catch (const std::exception&) {
    }
  }
}

void DistributedDataParallel::build_buckets(const std::vector<int>& order) {
  const double cap = options_.bucket_cap_mb_ * 1024.0 * 1024.0;
  std::vector<Bucket> buckets;
  double bytes = 0;
  for (int i : order) {
    const Tensor& t = params_[i].tensor;
    bool fresh = buckets.empty();
    if (!fresh) {
      const Tensor& first = params_[buckets.back().params.front()].tensor;
      fresh =
          first.dtype() != t.dtype() || first.device() != t.device() || bytes + static_cast<double>(t.nbytes()) > cap;
    }
    if (fresh) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().params.push_back(i);
    bytes += static_cast<double>(t.nbytes());
  }
  autograd::NoGradGuard ng;
  for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
    Bucket& bucket = buckets[b];
    int64_t total = 0;
    for (int i : bucket.params) total += params_[i].tensor.numel();
    const Tensor& first = params_[bucket.params.front()].tensor;
    bucket.buffer = zeros({total}, TensorOptions().dtype(first.dtype()).device(first.device()));
    bucket.pending = static_cast<int>(bucket.params.size());
    int64_t off = 0;
    for (int i : bucket.params) {
      Param& p = params_[i];
      p.bucket = b;
      p.offset = off;
      off += p.tensor.numel();
      // a gradient that exists already moves into the new bucket
      Tensor g = p.tensor.grad();
      if (g.defined()) {
        Tensor view = bucket.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
        view.copy_(g);
        p.tensor.set_grad(view);
      }
    }
  }
  buckets_ = std::move(buckets);
  next_bucket_ = 0;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (int i : b.params) out.back().push_back(params_[i].name);
  }
  return out;
}

std::vector<int64_t> DistributedDataParallel::bucket_bytes() const {
  std::vector<int64_t> out;
  for (const auto& b : buckets_) out.push_back(static_cast<int64_t>(b.buffer.nbytes()));
  return out;
}

void DistributedDataParallel::before_forward() {
  sync_this_backward_ = !no_sync_;
  if (options_.broadcast_buffers_ && pg_->size() > 1) {
    // One broadcast per dtype and device: the buffers are small and each collective costs a
    // latency, so they travel packed (flattened, concatenated, then copied back).
    autograd::NoGradGuard ng;
    std::vector<std::vector<Tensor>> groups;
    for (const auto& [name, b] : module_->named_buffers()) {
      if (!b.defined() || b.numel() == 0) continue;
      auto it = std::find_if(groups.begin(), groups.end(), [&](const std::vector<Tensor>& g) {
        return g.front().dtype() == b.dtype() && g.front().device() == b.device();
      });
      if (it == groups.end()) groups.push_back({b});
      else it->push_back(b);
    }
    std::vector<std::pair<WorkPtr, Tensor>> works;
    for (auto& g : groups) {
      if (g.size() == 1) {
        works.emplace_back(pg_->broadcast(g.front(), 0), Tensor());
        continue;
      }
      std::vector<Tensor> flat;
      for (const Tensor& b : g) flat.push_back(b.reshape({b.numel()}));
      Tensor packed = cat(flat, 0);
      works.emplace_back(pg_->broadcast(packed, 0), packed);
    }
    for (size_t k = 0; k < works.size(); ++k) {
      works[k].first->wait();
      const Tensor& packed = works[k].second;
      if (!packed.defined()) continue;
      int64_t off = 0;
      for (Tensor& b : groups[k]) {
        b.copy_(packed.narrow(0, off, b.numel()).view(b.shape()));
        off += b.numel();
      }
    }
  }
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  before_forward();
  return module_->forward(x);
}

void DistributedDataParallel::place_grad(Param& p) {
  Tensor g = p.tensor.grad();
  if (!g.defined()) return;
  Bucket& b = buckets_[p.bucket];
  const int64_t n = p.tensor.numel();
  // Already the view (a later accumulation, added in place by AccumulateGrad)?
  if (g.storage() == b.buffer.storage() && g.offset() == b.buffer.offset() + p.offset) return;
  autograd::NoGradGuard ng;
  Tensor view = b.buffer.narrow(0, p.offset, n).view(p.tensor.shape());
  view.copy_(g);
  p.tensor.set_grad(view);
}

void DistributedDataParallel::on_grad(int index) {
  Param& p = params_[index];
  place_grad(p);
  if (!autograd::in_backward()) return;
  if (!callback_queued_) {
    callback_queued_ = true;
    autograd::queue_callback([this] { finish_backward(); });
  }
  if (!sync_this_backward_) return;
  EMBER_CHECK(!p.ready, "DistributedDataParallel: parameter ", p.name,
              " received its gradient twice in one backward pass; DDP reduces each parameter once per backward");
  p.ready = true;
  if (!rebuilt_) arrival_order_.push_back(index);
  Bucket& b = buckets_[p.bucket];
  if (--b.pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_];
    b.work = pg_->all_reduce(b.buffer, ReduceOp::kAvg);
    if (callback_queued_) ++overlapped_;
    ++next_bucket_;
  }
}

void DistributedDataParallel::finish_backward() {
  callback_queued_ = false;
  bool sync = sync_this_backward_;
  sync_this_backward_ = !no_sync_;
  if (!sync) return;
  std::vector<std::string> unused;
  for (auto& p : params_) {
    if (p.ready) continue;
    if (!options_.find_unused_parameters_) {
      unused.push_back(p.name);
      continue;
    }
    // This rank contributes zero for a parameter it did not use; others may have used it.
    Bucket& b = buckets_[p.bucket];
    if (!p.tensor.grad().defined()) {
      autograd::NoGradGuard ng;
      Tensor view = b.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
      view.zero_();
      p.tensor.set_grad(view);
    }
    p.ready = true;
    --b.pending;
  }
  auto reset = [&] {
    for (auto& p : params_) p.ready = false;
    for (auto& b : buckets_) {
      b.pending = static_cast<int>(b.params.size());
      b.work = nullptr;
    }
    next_bucket_ = 0;
  };
  if (!unused.empty()) {
    for (auto& b : buckets_)
      if (b.work) b.work->wait();
    reset();
    arrival_order_.clear();
    std::ostringstream names;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) names << (i ? ", " : "") << unused[i];
    if (unused.size() > 8) names << " and " << unused.size() - 8 << " more";
    EMBER_FAIL("DistributedDataParallel: parameter(s) ", names.str(),
               " received no gradient in this backward pass. Every parameter that requires grad must take part in "
               "the loss on every rank; if some are unused in some steps, construct DDP with "
               "DDPOptions().find_unused_parameters(true)");
  }
  launch_ready_buckets();  // after backward's end (callback_queued_ is false): not overlapped
  for (auto& b : buckets_) b.work->wait();
  reset();
  if (!rebuilt_ && !params_.empty()) {
    // Rebuild from the order the gradients arrived in, rank 0's order for all (Note [DDP buckets]).
    rebuilt_ = true;
    std::vector<int> order = arrival_order_;
    for (int i = 0; i < static_cast<int>(params_.size()); ++i)
      if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
    Tensor t = empty({static_cast<int64_t>(order.size())}, TensorOptions().dtype(DType::i64));
    for (size_t i = 0; i < order.size(); ++i) t.data<int64_t>()[i] = order[i];
    // on the buckets' device (NCCL groups take device tensors); read back once, at the first step
    Tensor on_device = t.to(params_.front().tensor.device());
    pg_->broadcast(on_device, 0)->wait();
    t = on_device.to(kCPU);
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(t.data<int64_t>()[i]);
    arrival_order_.clear();
    build_buckets(order);
  }
}

void DistributedDataParallel::replay_graph(cuda::Graph& graph) {
  std::ostringstream desc;
  desc << "replayed from a CUDA graph: " << buckets_.size() << (buckets_.size() == 1 ? " bucket" : " buckets");
  for (size_t i = 0; i < buckets_.size() && i < 4; ++i) desc << (i ? ", " : " ") << buckets_[i].buffer.describe();
  if (buckets_.size() > 4) desc << " and " << buckets_.size() - 4 << " more";
  desc << ", avg";
  pg_->replay_graph(graph, "gradient all_reduce", desc.str());
}

void sync_grad_scaler(amp::GradScaler& scaler, ProcessGroupPtr pg) {
  if (!pg) pg = default_group();
  EMBER_CHECK(pg != nullptr, "sync_grad_scaler: no process group; call dist::init_process_group() first");
  scaler.set_found_inf_hook([pg](Tensor& found_inf) { pg->all_reduce(found_inf, ReduceOp::kMax)->wait(); });
}

}  // namespace ember::dist
