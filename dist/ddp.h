// DistributedDataParallel: data-parallel training of an nn::Module, one process per device.
//
//   auto pg = dist::init_process_group();                 // under ember_run
//   dist::DistributedDataParallel ddp(model);             // broadcasts rank 0's parameters and buffers
//   for (...) {                                           // each rank: its own shard of the batch
//     opt.zero_grad();
//     Tensor loss = loss_fn(ddp.forward(x), y);
//     loss.backward();                                    // gradients averaged over ranks on return
//     opt.step();
//   }
//
// Note [DDP buckets]: the parameters that require grad are grouped into buckets of at most
// bucket_cap_mb (default 25 MB) of one dtype and device, in the reverse of registration order
// (roughly the order backward produces their gradients); after the first synchronised backward
// the buckets are rebuilt from the order the gradients really arrived in (rank 0's order,
// broadcast, so every rank agrees). Each parameter's .grad becomes a view into its bucket's flat
// buffer: the first gradient of a step is copied into the view, later ones (gradient accumulation,
// no_sync()) are added in place, and the reduced result needs no copy back. A post-accumulate-grad
// hook on every parameter counts the bucket down; the moment a bucket is complete its all_reduce
// (average) is started, while backward goes on with the layers below: communication overlaps
// computation. Buckets are started strictly in index order on every rank (collectives must match
// across ranks). A callback at the end of backward (autograd::queue_callback) starts what is left
// and waits for every bucket, so when backward() returns the gradients are the global average.
//
// A parameter that got no gradient in a synchronised backward is an error naming it, unless
// find_unused_parameters is set: then its slot in the bucket is zero for this rank (other ranks
// may have used it) and the bucket is reduced at the end of backward.
// no_sync(): a guard under which forward/backward only accumulate into the buckets; the first
// backward after it reduces the accumulated sum (gradient accumulation with one all_reduce per
// optimizer step).
// broadcast_buffers (default on): before every forward, rank 0's buffers (BatchNorm running
// statistics) are broadcast, as PyTorch does, so every rank evaluates and saves the same model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"

namespace ember::amp {
class GradScaler;
}
namespace ember::cuda {
class Graph;
}

namespace ember::dist {

struct DDPOptions {
  ProcessGroupPtr process_group_;  // default_group() when null
  double bucket_cap_mb_ = 25.0;
  bool find_unused_parameters_ = false;
  bool broadcast_buffers_ = true;
  DDPOptions& process_group(ProcessGroupPtr pg) {
    process_group_ = std::move(pg);
    return *this;
  }
  DDPOptions& bucket_cap_mb(double v) {
    bucket_cap_mb_ = v;
    return *this;
  }
  DDPOptions& find_unused_parameters(bool v) {
    find_unused_parameters_ = v;
    return *this;
  }
  DDPOptions& broadcast_buffers(bool v) {
    broadcast_buffers_ = v;
    return *this;
  }
};

class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // before_forward() then module->forward(x).
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // For modules whose forward has another signature: call this, then run the module yourself.
  void before_forward();

  // While the guard lives, backward only accumulates gradients locally (no communication).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d), prev_(d.no_sync_) { d_.no_sync_ = true; }
    ~NoSync() { d_.no_sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Replays a CUDA graph that captured a synchronised step (forward, backward and so the gradient
  // all_reduce) through the process group, so that its watchdog times the replayed all_reduce: a
  // rank that stops mid-step ends the others with the group's timeout error naming it, not a hang
  // (Note [replayed collectives] in dist/nccl_backend.cpp). Use it in place of graph.replay().
  void replay_graph(cuda::Graph& graph);

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  const ProcessGroupPtr& process_group() const { return pg_; }
  // The parameter names of each bucket, in bucket order (for tests and the cost model).
  std::vector<std::vector<std::string>> bucket_names() const;
  std::vector<int64_t> bucket_bytes() const;
  // How many all_reduce calls were started before backward's end callback (i.e. overlapped).
  int64_t overlapped_reductions() const { return overlapped_; }

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    uint64_t hook = 0;
    int bucket = -1;
    int64_t offset = 0;  // in elements, into the bucket
    bool ready = false;
  };
  struct Bucket {
    std::vector<int> params;
    Tensor buffer;  // flat, one dtype and device
    int pending = 0;
    WorkPtr work;
  };
  void build_buckets(const std::vector<int>& order);
  void on_grad(int index);
  void launch_ready_buckets();
  void finish_backward();
  void place_grad(Param& p);

  std::shared_ptr<nn::Module> module_;
  DDPOptions options_;
  ProcessGroupPtr pg_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  size_t next_bucket_ = 0;
  bool no_sync_ = false;
  bool sync_this_backward_ = true;
  bool callback_queued_ = false;  // during backward, after the first hook queued finish_backward
  bool rebuilt_ = false;
  std::vector<int> arrival_order_;
  int64_t overlapped_ = 0;
};
using DDP = DistributedDataParallel;

// Makes `scaler` all-reduce (max) its found-inf flag across the ranks after unscaling, so every
// rank skips the same fp16 steps (with DDP the averaged gradients agree already; this also covers
// gradients that were reduced some other way).
void sync_grad_scaler(amp::GradScaler& scaler, ProcessGroupPtr pg = nullptr);

}  // namespace ember::dist
