// DDP scenarios: N ranks on shards of each global batch must train exactly like one process on
// the whole batch (within float reassociation), with shuffling, gradient accumulation under
// no_sync(), several buckets, a checkpoint written by rank 0 at step 2 and a resume that continues
// bit-identically; unused parameters; the GradScaler's found-inf flag agreed across ranks.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "amp/grad_scaler.h"
#include "ckpt/training_checkpoint.h"
#include "core/autograd/node.h"
#include "core/rng.h"
#include "data/samplers.h"
#include "dist/ddp.h"
#include "kernels/functional.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/dist/scenarios.h"

namespace ember::testing::dist {

namespace {

using namespace ember::dist;

constexpr int64_t kSamples = 32, kFeatures = 6, kClasses = 3, kGlobalBatch = 8;

// With `checkpointed`, the middle block runs under activation checkpointing (its parameters get
// their gradients from the nested backward of the recomputation).
std::shared_ptr<nn::Module> make_model(uint64_t seed, bool checkpointed = false) {
  manual_seed(seed);
  nn::Linear first(kFeatures, 16);
  nn::Sequential middle(nn::Linear(16, 16), nn::ReLU());
  nn::Linear last(16, kClasses);
  if (checkpointed) return nn::Sequential(first, nn::ReLU(), nn::Checkpoint(middle), last).ptr();
  return nn::Sequential(first, nn::ReLU(), middle, last).ptr();
}

Tensor features() {
  Tensor x = empty({kSamples, kFeatures});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  return x;
}
Tensor labels() {
  Tensor y = empty({kSamples}, TensorOptions().dtype(DType::i64));
  for (int64_t i = 0; i < kSamples; ++i) y.data<int64_t>()[i] = (i * 7) % kClasses;
  return y;
}

// The global batch of step k: 8 indices of a shuffled epoch (4 steps per epoch).
std::vector<int64_t> global_batch(int step) {
  auto perm = data::random_permutation(kSamples, 7, step / 4);
  int64_t at = (step % 4) * kGlobalBatch;
  return {perm.begin() + at, perm.begin() + at + kGlobalBatch};
}

Tensor rows(const Tensor& t, const std::vector<int64_t>& idx) {
  Tensor i = empty({static_cast<int64_t>(idx.size())}, TensorOptions().dtype(DType::i64));
  for (size_t k = 0; k < idx.size(); ++k) i.data<int64_t>()[k] = idx[k];
  return index_select(t, 0, i);
}

double max_diff(const std::shared_ptr<nn::Module>& a, const std::shared_ptr<nn::Module>& b, bool relative) {
  auto pa = a->parameters(), pb = b->parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    Tensor x = pa[i].contiguous(), y = pb[i].contiguous();
    for (int64_t k = 0; k < x.numel(); ++k) {
      double u = x.data<float>()[k], v = y.data<float>()[k];
      double d = std::abs(u - v) / (relative ? 1e-5 + 1e-4 * std::abs(v) : 1.0);
      worst = std::max(worst, d);
    }
  }
  return worst;
}

struct Trainer {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<DDP> ddp;
};

// One optimizer step of the DDP model on this rank's shard, `accum` micro-batches.
void ddp_step(Trainer& t, int step, int accum, int rank, int world, const Tensor& X, const Tensor& Y) {
  auto batch = global_batch(step);
  std::vector<int64_t> shard;
  for (size_t i = rank; i < batch.size(); i += world) shard.push_back(batch[i]);  // DistributedSampler's rule
  const size_t micro = shard.size() / accum;
  t.opt->zero_grad();
  for (int m = 0; m < accum; ++m) {
    std::vector<int64_t> part(shard.begin() + m * micro, shard.begin() + (m + 1) * micro);
    auto run = [&] {
      Tensor loss = cross_entropy(t.ddp->forward(rows(X, part)), rows(Y, part));
      mul(loss, 1.0 / accum).backward();
    };
    if (m + 1 < accum) {
      auto guard = t.ddp->no_sync();
      run();
    } else {
      run();
    }
  }
  t.opt->step();
}

void reference_step(Trainer& t, int step, const Tensor& X, const Tensor& Y) {
  auto batch = global_batch(step);
  t.opt->zero_grad();
  cross_entropy(t.model->forward(rows(X, batch)), rows(Y, batch)).backward();
  t.opt->step();
}

// args: accum, bucket_cap_mb, checkpoint path, ["activation-checkpointing"]
int ddp_equivalence(const std::vector<std::string>& args) {
  const int accum = args.size() > 0 ? std::stoi(args[0]) : 1;
  const double cap = args.size() > 1 ? std::stod(args[1]) : 25.0;
  const std::string ckpt = args.size() > 2 ? args[2] : "";
  const bool act = args.size() > 3 && args[3] == "activation-checkpointing";
  auto pg = init_process_group();
  const int r = pg->rank(), w = pg->size();
  expect(kGlobalBatch % (w * accum) == 0, "the global batch splits evenly");
  const Tensor X = features(), Y = labels();

  // Each rank starts from a different random model: DDP's broadcast makes them rank 0's.
  Trainer d{make_model(1 + r, act)};
  d.opt = std::make_unique<optim::AdamW>(d.model->parameters(), optim::AdamWOptions(0.01));
  d.ddp = std::make_unique<DDP>(d.model, DDPOptions().bucket_cap_mb(cap));
  Trainer ref{make_model(1, act)};
  ref.opt = std::make_unique<optim::AdamW>(ref.model->parameters(), optim::AdamWOptions(0.01));
  expect(max_diff(d.model, ref.model, false) == 0, "after construction every rank holds rank 0's parameters");
  std::printf("buckets: %zu\n", d.ddp->bucket_names().size());

  std::vector<std::vector<float>> after_step5;
  const int64_t buckets = static_cast<int64_t>(d.ddp->bucket_names().size());
  for (int step = 0; step < 5; ++step) {
    const int64_t overlapped_before = d.ddp->overlapped_reductions();
    ddp_step(d, step, accum, r, w, X, Y);
    // After the first step the buckets follow the gradients' arrival order: every bucket of the
    // synchronised micro-batch starts inside backward, none in the end callback.
    if (step > 0)
      expect(d.ddp->overlapped_reductions() - overlapped_before == buckets,
             "step " + std::to_string(step + 1) + ": " + std::to_string(buckets) + " buckets, " +
                 std::to_string(d.ddp->overlapped_reductions() - overlapped_before) + " overlapped");
    reference_step(ref, step, X, Y);
    double diff = max_diff(d.model, ref.model, true);
    std::printf("step %d: max relative difference to one process on the full batch: %.3g\n", step + 1, diff);
    expect(diff <= 1.0,
           "step " + std::to_string(step + 1) + ": DDP equals single-process training (within 1e-5 + 1e-4 rel)");
    if (step == 1 && !ckpt.empty()) {
      if (r == 0) TrainingCheckpoint().model(*d.model).optimizer(*d.opt).save(ckpt, {0, step + 1});
      pg->barrier()->wait();
    }
  }

  if (!ckpt.empty()) {
    // A fresh run resumes from rank 0's checkpoint at step 2 and must land on the same bits.
    Trainer e{make_model(100 + r, act)};
    e.opt = std::make_unique<optim::AdamW>(e.model->parameters(), optim::AdamWOptions(0.01));
    TrainingProgress p = TrainingCheckpoint().model(*e.model).optimizer(*e.opt).load(ckpt);
    expect(p.step == 2, "the checkpoint says step 2");
    e.ddp = std::make_unique<DDP>(e.model, DDPOptions().bucket_cap_mb(cap));
    for (int step = 2; step < 5; ++step) ddp_step(e, step, accum, r, w, X, Y);
    double diff = max_diff(e.model, d.model, false);
    std::printf("resume: max difference to the uninterrupted run: %g\n", diff);
    expect(diff == 0, "the resumed run continues bit-identically");
  }
  std::printf("ok: DDP on %d ranks (accumulation %d) equals one process\n", w, accum);
  return 0;
}

struct WithUnused : nn::Module {
  WithUnused() : Module("WithUnused") {
    used = register_module("used", nn::Linear(kFeatures, kClasses));
    unused = register_module("unused", nn::Linear(kFeatures, kClasses));
  }
  Tensor forward(const Tensor& x) override { return used(x); }
  nn::Linear used{nullptr}, unused{nullptr};
};

// args: "strict" (the unused parameter is an error naming it) or "allow" (find_unused_parameters)
int ddp_unused(const std::vector<std::string>& args) {
  bool allow = !args.empty() && args[0] == "allow";
  auto pg = init_process_group();
  manual_seed(3);
  auto model = std::make_shared<WithUnused>();
  DDP ddp(model, DDPOptions().find_unused_parameters(allow));
  const Tensor X = features(), Y = labels();
  try {
    cross_entropy(ddp.forward(X), Y).backward();
  } catch (const std::exception& e) {
    std::printf("backward failed: %s\n", e.what());
    return allow ? 1 : (std::string(e.what()).find("unused.weight") != std::string::npos ? 0 : 1);
  }
  if (!allow) return 1;
  expect(model->unused->weight.grad().defined(), "the unused parameter has a (zero) gradient");
  expect(model->used->weight.grad().defined(), "the used parameter has a gradient");
  // The one bucket holds the unused parameters too: it can only start in the end callback, after
  // backward, so it overlaps nothing.
  expect(ddp.bucket_names().size() == 1, "one bucket");
  expect(ddp.overlapped_reductions() == 0, "a bucket started in the end callback is not overlapped (counted " +
                                               std::to_string(ddp.overlapped_reductions()) + ")");
  // a second step works too
  cross_entropy(ddp.forward(X), Y).backward();
  expect(ddp.overlapped_reductions() == 0, "still none overlapped after the second step");
  std::printf("ok: find_unused_parameters\n");
  return 0;
}

// Rank 1 gets an inf gradient; with sync_grad_scaler every rank skips the step.
int grad_scaler(const std::vector<std::string>&) {
  auto pg = init_process_group();
  Tensor w = full({4}, 1.0).requires_grad_();
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(4.0));
  sync_grad_scaler(scaler);
  Tensor loss = sum(mul(w, pg->rank() == 1 ? INFINITY : 1.0));
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
  expect(w.data<float>()[0] == 1.0f, "the step was skipped on this rank too");
  expect(scaler.scale_value() == 2.0, "the scale backed off");
  std::printf("ok: every rank skipped the step\n");
  return 0;
}

// broadcast_buffers: rank 0's buffers (two f32 running statistics and an i64 counter per
// BatchNorm, packed into one broadcast per dtype) reach every rank before each forward.
int ddp_buffers(const std::vector<std::string>&) {
  auto pg = init_process_group();
  manual_seed(5);
  auto model = nn::Sequential(nn::Linear(kFeatures, 8), nn::BatchNorm1d(8), nn::ReLU(), nn::BatchNorm1d(8),
                              nn::Linear(8, kClasses))
                   .ptr();
  DDP ddp(model);
  const Tensor X = features(), Y = labels();
  for (int step = 0; step < 2; ++step) {
    if (pg->rank() != 0) {
      // a rank whose statistics drifted (its own shard's batch statistics)
      autograd::NoGradGuard ng;
      for (Tensor b : model->buffers()) b.fill_(7.0 + pg->rank());
    }
    Tensor loss = cross_entropy(ddp.forward(X), Y);  // every rank the same batch here
    loss.backward();
  }
  // after the last forward every rank holds rank 0's statistics, updated by the same batch
  Tensor mine = cat({model->named_buffers().at("1.running_mean").contiguous(),
                     model->named_buffers().at("3.running_var").contiguous()},
                    0);
  Tensor all = empty({mine.numel() * pg->size()});
  pg->all_gather(all, mine)->wait();
  for (int r = 1; r < pg->size(); ++r)
    for (int64_t i = 0; i < mine.numel(); ++i)
      expect(all.data<float>()[r * mine.numel() + i] == all.data<float>()[i],
             "rank " + std::to_string(r) + " buffer element " + std::to_string(i) + " equals rank 0's");
  Tensor count = model->named_buffers().at("1.num_batches_tracked").to(DType::f32).reshape({1});
  pg->all_reduce(count, ReduceOp::kMax)->wait();
  expect(count.data<float>()[0] == 2.0f, "num_batches_tracked is rank 0's (2), not a drifted rank's");
  std::printf("ok: buffers broadcast from rank 0\n");
  return 0;
}

}  // namespace

void add_ddp_scenarios(Scenarios& s) {
  s["ddp_buffers"] = ddp_buffers;
  s["ddp_equivalence"] = ddp_equivalence;
  s["ddp_unused"] = ddp_unused;
  s["grad_scaler"] = grad_scaler;
}

}  // namespace ember::testing::dist
