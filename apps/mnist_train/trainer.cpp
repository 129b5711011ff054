#include "apps/mnist_train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "apps/mnist_train/models.h"
#include "apps/mnist_train/process_age.h"
#include "core/autocast.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/runtime.h"
#include "io/safetensors.h"
#include "kernels/autotune.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace mnist {

using namespace ember;

namespace {

double now_s() {
  static const auto t0 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Makes activations channels-last (NHWC memory) so the conv layers after it run in that layout.
class ToChannelsLastImpl : public nn::Module {
 public:
  ToChannelsLastImpl() : Module("ToChannelsLast") {}
  Tensor forward(const Tensor& x) override {
    if (x.dim() != 4 || x.is_channels_last()) return x;
    return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  }
};

// Evaluation under --distributed: indices rank, rank + world, ... (no padding, so the ranks
// together visit every sample exactly once).
class StridedSampler final : public data::Sampler {
 public:
  StridedSampler(int64_t n, int rank, int world) : n_(n), rank_(rank), world_(world) {}
  std::vector<int64_t> indices() const override {
    std::vector<int64_t> out;
    for (int64_t i = rank_; i < n_; i += world_) out.push_back(i);
    return out;
  }
  int64_t size() const override { return n_ > rank_ ? (n_ - rank_ + world_ - 1) / world_ : 0; }

 private:
  int64_t n_;
  int rank_, world_;
};

DType amp_dtype(AmpMode a) { return a == AmpMode::fp16 ? DType::f16 : a == AmpMode::bf16 ? DType::bf16 : DType::f32; }

// The dtype the images are normalised to (normalize_u8, on the device after the uint8 copy): with
// --amp, autocast's own. Every model's first op lowers its input to that dtype anyway (models.h),
// and normalize_u8 rounds its f32 result once, as cast would: the same values, without a cast
// launch per step and with half the bytes written and read.
DType input_dtype(AmpMode a) { return amp_dtype(a); }

}  // namespace

// ---- construction ----

Trainer::Trainer(const Options& o, Device device, const Splits& splits)
    : o_(o),
      device_(device),
      splits_(splits),
      graph_(device, o.graph && device.is_cuda() && o.grad_accum == 1),
      guard_(device, o.max_nonfinite_steps),
      timer_(device) {
  manual_seed(o_.seed);
  if (o_.deterministic) set_deterministic(true);
  if (o_.autotune) set_backend_all("auto");
  if (!o_.backends.empty()) set_backends(o_.backends);
  set_measured_cpu_defaults(false);  // per run: the ablation's rungs differ
  set_measured_cpu_defaults(device_.is_cpu() && o_.measured_cpu_defaults);
  if (measured_cpu_defaults() || o_.autotune) use_kernel_cache();
  inputs_.mean = splits_.mean;
  inputs_.std = splits_.std;
  build_learner();
  interval_.loss_sum = zeros({1}, TensorOptions(DType::f32).device(device_));
  interval_.correct = zeros({1}, TensorOptions(DType::i64).device(device_));
  logs_ = std::make_unique<RunLogs>(o_, splits_.val != nullptr);
}

// Kernel choices (--autotune's, and the measured CPU defaults': Note [CPU defaults] in
// kernels/registry.h) persist in a file per user, so a machine measures each shape once
// (EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else ~/.cache/ember). Without a writable one they
// are measured again by each run, and the run says so.
void Trainer::use_kernel_cache() {
  std::string dir;
  if (const char* e = std::getenv("EMBER_CACHE_DIR"); e != nullptr && *e != '\0') dir = e;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') dir = std::string(x) + "/ember";
  else if (const char* h = std::getenv("HOME"); h != nullptr && *h == '/') dir = std::string(h) + "/.cache/ember";
  std::error_code ec;
  if (dir.empty() || (std::filesystem::create_directories(dir, ec), ec)) {
    notes_.push_back(str("no kernel cache directory (", dir.empty() ? "no HOME" : dir + ": " + ec.message(),
                         "): kernel choices were measured for this run only"));
    return;
  }
  autotune::set_cache_file(dir + "/kernel-choices.tsv");
}

Trainer::~Trainer() {
  if (o_.sync_debug) runtime::set_sync_debug(runtime::SyncDebug::off);
}

// The model on the device (channels-last after its first conv if asked), DDP around it, the
// optimizer and fp16's loss scaler.
void Trainer::build_learner() {
  std::shared_ptr<nn::Module> model = make_model(o_.model, splits_.shape);
  if (o_.channels_last && device_.is_cuda()) {
    // after the first conv (the input has one channel, so NCHW and NHWC coincide there)
    auto* seq = dynamic_cast<nn::SequentialImpl*>(model.get());
    auto rebuilt = std::make_shared<nn::SequentialImpl>();
    for (size_t i = 0; seq != nullptr && i < seq->size(); ++i) {
      rebuilt->push_back((*seq)[i]);
      if (i == 0) rebuilt->push_back("to_channels_last", std::make_shared<ToChannelsLastImpl>());
    }
    if (seq != nullptr) model = rebuilt;
  }
  for (auto& [name, m] : model->named_modules())
    if (auto* seq = dynamic_cast<nn::SequentialImpl*>(m.get())) {
      seq->fuse_activations = o_.fuse_activations;
      seq->fuse_mlp = o_.fuse_mlp;
      seq->fuse_pool = o_.fuse_pool;
    }
  model->to(device_);
  learner_.model = model;
  learner_.params = model->parameters();
  if (o_.distributed) {
    dp_.pg = dist::default_group();
    EMBER_CHECK(dp_.pg != nullptr, "--distributed: no process group (main() creates it)");
    check_ranks_agree(*dp_.pg, run_fields(), device_);  // before DDP's first broadcast
    dp_.ddp = std::make_unique<dist::DistributedDataParallel>(model, dist::DDPOptions().process_group(dp_.pg));
  }
  build_optimizer();
  learner_.loss_grad = full({}, 1.0 / static_cast<double>(o_.grad_accum), TensorOptions(DType::f32).device(device_));
  if (o_.amp == AmpMode::fp16) {
    EMBER_CHECK(device_.is_cuda(), "--amp fp16 needs a CUDA device (the CPU's autocast supports bf16: use --amp bf16)");
    learner_.scaler = std::make_unique<amp::GradScaler>();
  }
}

// What every rank of a --distributed job must share (run_agreement.h).
std::vector<RunField> Trainer::run_fields() const {
  int64_t elements = 0;
  uint64_t shapes = kFnv1aBasis;  // every parameter's dims, each shape ended by its rank
  for (const Tensor& p : learner_.params) {
    elements += p.numel();
    const int64_t rank = p.dim();
    for (int64_t d : p.shape()) shapes = fnv1a(&d, sizeof d, shapes);
    shapes = fnv1a(&rank, sizeof rank, shapes);
  }
  const std::vector<std::string> amps = {"off", "fp16", "bf16"}, optimizers = {"sgd", "adam", "adamw"};
  return {
      {"model parameter tensors", static_cast<int64_t>(learner_.params.size())},
      {"model parameter elements", elements},
      {"model parameter shapes (hash)", static_cast<int64_t>(shapes >> 1)},
      {"training images", splits_.train ? splits_.train->size() : 0},
      {"validation images", splits_.val ? splits_.val->size() : 0},
      {"test images", splits_.test ? splits_.test->size() : 0},
      {"--batch-size", o_.batch_size},
      {"--grad-accum", o_.grad_accum},
      {"--epochs", o_.epochs},
      {"--max-steps", o_.max_steps},
      {"--seed", static_cast<int64_t>(o_.seed)},
      {"--amp", static_cast<int64_t>(o_.amp), amps},
      {"--optimizer", static_cast<int64_t>(o_.optimizer), optimizers},
  };
}

void Trainer::build_optimizer() {
  switch (o_.optimizer) {
    case OptimizerKind::sgd:
      learner_.opt = std::make_unique<optim::SGD>(
          learner_.params,
          optim::SGDOptions(o_.lr).momentum(o_.momentum).nesterov(o_.momentum > 0).weight_decay(o_.weight_decay));
      return;
    case OptimizerKind::adam:
      learner_.opt = std::make_unique<optim::Adam>(
          learner_.params,
          optim::AdamOptions(o_.lr).betas(std::make_tuple(o_.momentum, 0.999)).weight_decay(o_.weight_decay));
      return;
    case OptimizerKind::adamw: {
      optim::AdamOptions a = optim::AdamWOptions(o_.lr);
      a.betas(std::make_tuple(o_.momentum, 0.999)).weight_decay(o_.weight_decay);
      learner_.opt = std::make_unique<optim::AdamW>(learner_.params, a);
      return;
    }
  }
}

void Trainer::build_scheduler(int64_t total_steps) {
  total_steps = std::max<int64_t>(total_steps, 1);
  optim::Optimizer& opt = *learner_.opt;
  switch (o_.scheduler) {
    case SchedulerKind::none: return;
    case SchedulerKind::onecycle: {
      // The warm-up phase ends at step pct_start * total_steps - 1; at exactly 0 (4 steps in all)
      // it is empty, which OneCycleLR rejects (PyTorch divides by zero there): warm up over 2 steps.
      const double pct_start = 0.25 * static_cast<double>(total_steps) == 1.0 ? 0.5 : 0.25;
      learner_.sched =
          std::make_unique<optim::OneCycleLR>(opt, optim::OneCycleLROptions(o_.lr, total_steps).pct_start(pct_start));
      return;
    }
    case SchedulerKind::cyclic: {
      const int64_t half = std::max<int64_t>(1, total_steps / 4);  // two triangles over the run
      optim::CyclicLROptions c(o_.lr / 10, o_.lr);
      c.step_size_up(half).cycle_momentum(o_.optimizer == OptimizerKind::sgd && o_.momentum > 0);
      learner_.sched = std::make_unique<optim::CyclicLR>(opt, c);
      return;
    }
    case SchedulerKind::cosine: learner_.sched = std::make_unique<optim::CosineAnnealingLR>(opt, total_steps); return;
    case SchedulerKind::step:
      learner_.sched = std::make_unique<optim::StepLR>(opt, std::max<int64_t>(1, total_steps / 3), 0.1);
      return;
  }
}

std::unique_ptr<data::DataLoader> Trainer::make_loader(std::shared_ptr<data::InMemoryDataset> ds, bool train) {
  data::DataLoaderOptions lo;
  lo.batch_size(train ? o_.batch_size : kEvalBatch)
      .shuffle(train)
      .drop_last(train && o_.graph)  // graph mode replays one static batch shape
      .num_workers(train ? o_.workers : std::min(o_.workers, 2))
      .pin_memory(o_.pin_memory)
      .non_blocking(o_.pin_memory)
      .device(device_)
      .seed(o_.seed)
      .normalize(inputs_.mean, inputs_.std)
      .dtype(input_dtype(o_.amp));
  if (train && o_.augment)
    lo.transform(std::make_shared<data::Compose>(std::vector<std::shared_ptr<const data::Transform>>{
        std::make_shared<data::RandomCrop>(splits_.shape.height, splits_.shape.width, 2),
        std::make_shared<data::RandomHorizontalFlip>(0.5)}));
  if (!dp_.pg) return std::make_unique<data::DataLoader>(ds, lo);
  lo.shuffle(false);  // the samplers below shuffle (or not) themselves
  if (train) {
    // each rank its shard of every epoch's permutation (padded to equal shards)
    auto sampler = std::make_shared<data::DistributedSampler>(
        ds->size(),
        data::DistributedSamplerOptions().world_size(dp_.pg->size()).rank(dp_.pg->rank()).shuffle(true).seed(o_.seed));
    return std::make_unique<data::DataLoader>(ds, lo, sampler);
  }
  // evaluation: every sample exactly once over the ranks (rank r takes r, r + w, ...)
  return std::make_unique<data::DataLoader>(
      ds, lo, std::make_shared<StridedSampler>(ds->size(), dp_.pg->rank(), dp_.pg->size()));
}

// ---- the step ----

// One micro-batch. An optimizer step's batch goes through the graphed step (--graph: eager while
// warming up, captured once, then replayed); the micro-batches that only accumulate run eagerly.
void Trainer::train_step(const data::Batch& b, bool do_step, RunResult& r) {
  if (r.startup_seconds < 0) r.startup_seconds = process_age_s();  // the first step of the run
  if (!do_step) {
    eager_step(b.images, b.labels, false);
    return;
  }
  switch (graph_.run(b.images, b.labels, progress_.steps_here, graph_hooks())) {
    case GraphedStep::Outcome::captured: r.graph_used = true; break;
    case GraphedStep::Outcome::capture_failed:
      r.notes.push_back("--graph: capture failed, ran eagerly (see the message above)");
      break;
    case GraphedStep::Outcome::replayed:
      if (o_.sync_every_step) {  // a replayed step's host read: the naive loop
        runtime::AllowSyncScope allow;
        (void)interval_.loss_sum.item();
      }
      break;
    case GraphedStep::Outcome::eager: break;
  }
}

GraphedStep::Hooks Trainer::graph_hooks() {
  GraphedStep::Hooks h;
  h.step = [this](const Tensor& x, const Tensor& y) { eager_step(x, y, true); };
  h.before_capture = [this] { learner_.opt->sync_hyperparameters(); };
  h.capture_start = [this] { learner_.opt->zero_grad(true); };
  h.after_failure = [this] {
    if (learner_.scaler) learner_.scaler->discard_step();
    learner_.opt->zero_grad(true);
  };
  if (dp_.ddp) h.launch = [this](cuda::Graph& g) { dp_.ddp->replay_graph(g); };  // its watchdog times the all_reduce
  return h;
}

void Trainer::eager_step(const Tensor& x, const Tensor& y, bool do_step) {
  Tensor logits, loss;
  // The loss's backward starts from 1 / grad_accum times fp16's scale: told to the loss, which
  // computes the logits' gradient in its own pass (cross_entropy_with_grad).
  Tensor seed = learner_.loss_grad;
  if (Tensor s = learner_.scaler ? learner_.scaler->scale_as_grad(device_) : Tensor(); s.defined())
    seed = o_.grad_accum > 1 ? div(s, static_cast<double>(o_.grad_accum)) : s;
  // --distributed with --grad-accum: only the micro-batch that steps reduces the gradients
  std::unique_ptr<dist::DistributedDataParallel::NoSync> no_sync;
  if (dp_.ddp && !do_step) no_sync = std::make_unique<dist::DistributedDataParallel::NoSync>(*dp_.ddp);
  {
    std::optional<autocast::Scope> ac;
    if (o_.amp != AmpMode::off) ac.emplace(device_.type, amp_dtype(o_.amp));
    logits = dp_.ddp ? dp_.ddp->forward(x) : learner_.model->forward(x);
    CrossEntropyOptions ce;
    ce.label_smoothing = o_.label_smoothing;
    loss = cross_entropy_with_grad(logits, y, seed, ce);
  }
  loss.backward(seed);
  {
    autograd::NoGradGuard ng;
    // the interval's sums and the divergence guard in one launch (train_stats)
    guard_.observe(loss.detach().to(DType::f32).reshape({1}), logits.detach(), y, interval_.loss_sum, interval_.correct,
                   do_step);
  }
  if (do_step) optimizer_step();
  if (o_.sync_every_step && !graph_.capturing()) {  // (a replayed step reads after the replay: train_step)
    runtime::AllowSyncScope allow;
    (void)loss.item();  // the naive loop: a host read every step
  }
}

void Trainer::optimizer_step() {
  optim::Optimizer& opt = *learner_.opt;
  amp::GradScaler* scaler = learner_.scaler.get();
  optim::GradScaling clip;  // the clipping coefficient, applied by the optimizer as it reads each gradient
  if (o_.clip_grad > 0) {
    if (scaler) scaler->unscale_(opt);
    optim::clip_grad_norm_into_step(learner_.params, o_.clip_grad, clip);
  }
  if (scaler) {
    scaler->step(opt, clip);
    scaler->update();
  } else {
    opt.step(clip);
  }
  opt.zero_grad(o_.zero_grad_to_none);
}

// ---- evaluation ----

// Adds one evaluation batch's (label, prediction) cells to the confusion counts (i64 [k * k]).
Tensor Trainer::count_batch(const Tensor& counts, const Tensor& images, const Tensor& labels) {
  const int64_t k = splits_.shape.classes;
  Tensor logits;
  {
    std::optional<autocast::Scope> ac;
    if (o_.amp != AmpMode::off) ac.emplace(device_.type, amp_dtype(o_.amp));
    logits = learner_.model->forward(images);
  }
  Tensor cell = add(mul(labels, static_cast<double>(k)), argmax(logits, 1));
  return index_add(counts, 0, cell, ones({images.size(0)}, TensorOptions(DType::i64).device(device_)));
}

// One evaluation pass over a device-resident split, in the loader's batches of 1000 taken in order
// (slices of the resident uint8 images, normalised as the loader does): only device work on the
// current stream, so it can be captured. Returns the confusion counts.
Tensor Trainer::resident_pass(const data::InMemoryDataset& ds) {
  const int64_t k = splits_.shape.classes, n = ds.size(), batch = kEvalBatch;
  Tensor counts = zeros({k * k}, TensorOptions(DType::i64).device(device_));
  for (int64_t i = 0; i < n; i += batch) {
    const int64_t b = std::min(batch, n - i);
    Tensor x = normalize_u8(ds.images().narrow(0, i, b), inputs_.mean, inputs_.std, input_dtype(o_.amp));
    counts = count_batch(counts, x, ds.labels().narrow(0, i, b));
  }
  return counts;
}

EvalResult Trainer::evaluate(const std::shared_ptr<data::InMemoryDataset>& ds) {
  autograd::NoGradGuard ng;
  nn::Module& model = *learner_.model;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t k = splits_.shape.classes;
  Tensor counts;
  int64_t n = 0;
  if (o_.graph && !o_.eager_eval && ds->device_resident() && !dp_.pg) {
    // a fixed pass over the resident split: replayed from a CUDA graph once warm (graphed_eval.h)
    counts = eval_graphs_.counts(ds.get(), device_, [&] { return resident_pass(*ds); });
    n = ds->size();
  } else {
    counts = zeros({k * k}, TensorOptions(DType::i64).device(device_));
    auto loader = make_loader(ds, false);
    for (data::Batch& b : *loader) {
      counts = count_batch(counts, b.images, b.labels);
      n += b.size();
    }
  }
  runtime::AllowSyncScope allow;
  if (dp_.pg) {
    // the whole test set: every rank's confusion counts and sample count, summed
    Tensor total = full({1}, static_cast<double>(n), TensorOptions(DType::i64).device(device_));
    dp_.pg->all_reduce(counts, dist::ReduceOp::kSum)->wait();
    dp_.pg->all_reduce(total, dist::ReduceOp::kSum)->wait();
    n = static_cast<int64_t>(total.item());
  }
  const std::vector<int64_t> c = counts.to_vector<int64_t>();
  EvalResult r;
  r.samples = n;
  int64_t right = 0;
  r.confusion.assign(static_cast<size_t>(k), std::vector<int64_t>(static_cast<size_t>(k), 0));
  for (int64_t t = 0; t < k; ++t)
    for (int64_t p = 0; p < k; ++p) {
      const int64_t v = c[static_cast<size_t>(t * k + p)];
      r.confusion[static_cast<size_t>(t)][static_cast<size_t>(p)] = v;
      if (t == p) right += v;
    }
  r.accuracy = n > 0 ? 100.0 * static_cast<double>(right) / static_cast<double>(n) : 0;
  model.train(was_training);
  return r;
}

namespace {
// "3x16x16 images of 3 classes (cat, dog, bird)"
std::string describe_data(const std::string& shape, const std::vector<std::string>& classes) {
  std::string names;
  for (size_t i = 0; i < std::min<size_t>(classes.size(), 5); ++i) names += (i ? ", " : "") + classes[i];
  if (classes.size() > 5) names += ", ...";
  return str(shape, " images of ", classes.size(), " classes (", names, ")");
}
}  // namespace

void Trainer::load_model(const std::string& path) {
  io::SafetensorsFile f = io::load_safetensors(path, kCPU);
  // what the model was trained on, before its tensors are compared (checkpoints of older versions
  // record none of it and are loaded as they are)
  if (const auto t = trained_on(f.metadata, "--eval-only " + path)) {
    const std::string shape = shape_text(t->shape);
    EMBER_CHECK(shape == shape_text(splits_.shape) && t->classes == splits_.classes, "--eval-only ", path,
                ": the checkpoint's model takes ", describe_data(shape, t->classes), ", but --data ", o_.data, " has ",
                describe_data(shape_text(splits_.shape), splits_.classes));
    inputs_.mean = t->mean;  // the inputs are normalised as in training
    inputs_.std = t->std;
  }
  TensorDict model_state;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("model.", 0) == 0) model_state.insert(name.substr(6), t);
  const bool plain = model_state.empty();
  if (plain) model_state = f.tensors;  // a plain model state dict
  check_module_state(model_state, *learner_.model, plain ? "" : "model.", "--eval-only " + path);
  learner_.model->load_state_dict(model_state, true);
}

// ---- the run ----

// The run: the epochs until --epochs, --max-steps, a divergence or a stop signal; each epoch the
// steps (load, forward, loss, backward, optimizer step, log), then evaluation, the epoch's record
// and the checkpoint.
RunResult Trainer::run() {
  RunResult r;
  r.has_val = splits_.val != nullptr;
  progress_.run_start = now_s();
  upload_device_resident(r);
  if (o_.graph && device_.is_cuda() && o_.graph_steps > 1 && !dp_.ddp && o_.grad_accum == 1 && !o_.sync_every_step &&
      o_.profile.empty())
    multi_ = std::make_unique<MultiStepGraphs>(device_, o_.graph_steps);
  auto loader = make_loader(inputs_.train ? inputs_.train : splits_.train, true);
  plan_run(loader->size());
  if (!o_.resume.empty()) resume_from_checkpoint();
  if (learner_.sched && device_.is_cuda() && !o_.graph)
    ahead_ = std::make_unique<optim::ScheduleAhead>(*learner_.sched, kScheduleRowsAhead);
  guard_.start_at(progress_.global_step);
  note_graph_limits(r);
  if (o_.sync_debug) runtime::set_sync_debug(runtime::SyncDebug::warn);
  for (int epoch = progress_.start_epoch; epoch < o_.epochs; ++epoch) {
    if (stop_requested()) break;
    if (o_.max_steps > 0 && progress_.global_step >= o_.max_steps) break;  // resumed at the --max-steps cap
    const EpochStats e = train_epoch(*loader, epoch, r);
    if (!end_epoch(e, epoch, *loader, r) || e.max_steps_reached) break;
  }
  finish_run(r);
  return r;
}

void Trainer::upload_device_resident(RunResult& r) {
  if (o_.device_resident && device_.is_cuda()) {  // uploaded once, as uint8
    inputs_.train = splits_.train->to(device_);
    if (splits_.val) inputs_.val = splits_.val->to(device_);
    inputs_.test = splits_.test->to(device_);
  } else if (o_.device_resident) {
    r.notes.push_back("--device-resident needs a CUDA device: the data stayed on the host");
  }
}

// The run's length, the schedule over it and the profiling window.
void Trainer::plan_run(int64_t micro_per_epoch) {
  Progress& p = progress_;
  p.micro_per_epoch = micro_per_epoch;
  // With --grad-accum N the last group of an epoch may be short: it steps too, so a group never
  // spans two epochs (the scheduler's step count is exact, and a checkpoint holds no pending grads).
  p.steps_per_epoch = std::max<int64_t>(1, (micro_per_epoch + o_.grad_accum - 1) / o_.grad_accum);
  p.total_steps = p.steps_per_epoch * o_.epochs;
  if (o_.max_steps > 0) p.total_steps = std::min(p.total_steps, o_.max_steps);
  build_scheduler(p.total_steps);
  if (!o_.profile.empty()) profile_ = std::make_unique<ProfileWindow>(p.total_steps);
}

void Trainer::resume_from_checkpoint() {
  TrainingCheckpoint ck;
  ck.model(*learner_.model).optimizer(*learner_.opt);
  if (learner_.sched) ck.scheduler(*learner_.sched);
  if (learner_.scaler) ck.add("scaler", *learner_.scaler);
  io::SafetensorsFile f = io::load_safetensors(o_.resume);
  StateDict sd{std::move(f.tensors), std::move(f.metadata)};
  Metadata saved_run;
  for (const auto& [k, v] : sd.metadata)
    if (k.rfind("run.", 0) == 0) saved_run[k.substr(4)] = v;
  run_record().check_resume(saved_run, o_.resume);  // before anything is loaded (a different --optimizer ...)
  TrainingProgress p;
  try {
    p = ck.restore(sd);
  } catch (const std::exception& e) {
    EMBER_FAIL("--resume ", o_.resume, ": ", e.what());
  }
  check_resume_progress(p.run, p);
  progress_.start_epoch = static_cast<int>(p.epoch);
  progress_.global_step = p.step;
  if (!o_.quiet)
    std::printf("resumed from %s at epoch %lld, step %lld\n", o_.resume.c_str(), static_cast<long long>(p.epoch),
                static_cast<long long>(p.step));
}

void Trainer::note_graph_limits(RunResult& r) const {
  if (!o_.graph) return;
  if (!device_.is_cuda()) r.notes.push_back("--graph needs a CUDA device: ran eagerly on the CPU");
  else if (o_.grad_accum > 1)
    r.notes.push_back("--graph with --grad-accum > 1 is not captured (the step is not one static unit): ran eagerly");
}

// One epoch of steps. Stops early at --max-steps, a divergence or a stop signal.
Trainer::EpochStats Trainer::train_epoch(data::DataLoader& loader, int epoch, RunResult& r) {
  learner_.model->train();
  loader.set_epoch(epoch);
  timer_.restart();  // the gap across the evaluation is not idle time between steps
  EpochStats e;
  e.wait_before = loader.stats().wait_seconds;
  e.start = now_s();
  interval_.start = e.start;
  logs_->begin_epoch(epoch, progress_.micro_per_epoch);
  Progress& p = progress_;
  p.micro = 0;
  loader.start_epoch();
  while (true) {
    // K steps in one launch once warm (multi_step.h), else one batch
    if (const int64_t k = multi_step_size(e); k >= 2 && stage_batches(k, loader)) {
      timer_.mark();
      run_multi_step(k, loader);
      timer_.mark();
      if (!count_steps(k, k * o_.batch_size, epoch, e, r)) break;
      continue;
    }
    std::optional<data::Batch> b = loader.next();
    if (!b) break;
    timer_.mark();
    if (profile_) profile_->before_step(p.global_step);
    ++p.micro;
    const bool do_step = p.micro == o_.grad_accum || e.micro + 1 == p.micro_per_epoch;
    if (do_step) p.micro = 0;
    if (do_step && ahead_) ahead_->before_step(std::max<int64_t>(1, p.total_steps - p.global_step));
    train_step(*b, do_step, r);
    timer_.mark();
    if (do_step) {
      if (learner_.sched) learner_.sched->step();
      if (graph_.captured()) learner_.opt->sync_hyperparameters();  // the next replay reads the new lr
    }
    if (!count_steps(1, b->size(), epoch, e, r, do_step)) break;
  }
  loader.stop_epoch();  // an epoch left early (a stop, --max-steps, divergence)
  if (ahead_) ahead_->finish();
  if (interval_.steps > 0) {
    const auto [loss, correct] = log_interval(r, epoch, e.micro);
    e.loss += loss;
    e.correct += correct;
  }
  logs_->end_epoch();
  return e;
}

// The bookkeeping after `micro` micro-batches of `samples` samples (optimizer steps when
// `stepped`): the counts, the log line at an interval's end, the profile window; false when the
// epoch stops here (divergence, a stop signal, --max-steps).
bool Trainer::count_steps(int64_t micro, int64_t samples, int epoch, EpochStats& e, RunResult& r, bool stepped) {
  Progress& p = progress_;
  e.micro += micro;
  e.samples += samples;
  interval_.samples += samples;
  interval_.steps += micro;
  if (stepped) {
    p.global_step += micro;
    p.steps_here += micro;
    if (p.warmup_end < 0 && graph_.settled()) end_warmup(r.samples + e.samples, r);
  }
  if (profile_) profile_->after_step(p.global_step);
  if (e.micro % o_.log_interval == 0 || e.micro == p.micro_per_epoch) {
    const auto [loss, correct] = log_interval(r, epoch, e.micro);
    e.loss += loss;
    e.correct += correct;
  }
  if (guard_.diverged_step() >= 0 || stop_requested()) return false;
  if (o_.max_steps > 0 && p.global_step >= o_.max_steps) {
    e.max_steps_reached = true;
    return false;
  }
  return true;
}

// The end of the warm-up (Note [the timing rule] in run_result.h): with --autotune the evaluation's
// batch shapes are tuned now, then the device is drained and the clock starts.
void Trainer::end_warmup(int64_t samples, RunResult& r) {
  if (o_.autotune) warm_evaluation_shapes();
  if (device_.is_cuda()) {
    runtime::AllowSyncScope allow;
    cuda::current_stream(device_.index).synchronize();
  }
  progress_.warmup_end = now_s();
  progress_.warmup_samples = samples;
  r.warmup_seconds = process_age_s() - r.startup_seconds;
  r.warmup_steps = progress_.steps_here;
}

// One evaluation forward at each batch shape the evaluations will see, on zeros, its result
// dropped: --autotune measures their kernels here rather than inside the first timed evaluation.
void Trainer::warm_evaluation_shapes() {
  autograd::NoGradGuard ng;
  nn::Module& model = *learner_.model;
  const bool was_training = model.is_training();
  model.eval();
  std::set<int64_t> batches;
  for (const auto& ds : {inputs_.val ? inputs_.val : splits_.val, inputs_.test ? inputs_.test : splits_.test}) {
    if (!ds) continue;
    const int64_t n = dp_.pg ? StridedSampler(ds->size(), dp_.pg->rank(), dp_.pg->size()).size() : ds->size();
    if (n >= 1) batches.insert(std::min(n, kEvalBatch));
    if (n > kEvalBatch && n % kEvalBatch != 0) batches.insert(n % kEvalBatch);
  }
  const InputShape& s = splits_.shape;
  const int64_t k = s.classes;
  for (int64_t b : batches) {
    Tensor x = zeros({b, s.channels, s.height, s.width}, TensorOptions(input_dtype(o_.amp)).device(device_));
    Tensor y = zeros({b}, TensorOptions(DType::i64).device(device_));
    (void)count_batch(zeros({k * k}, TensorOptions(DType::i64).device(device_)), x, y);
  }
  model.train(was_training);
}

// How many steps the next launch may take (multi_step.h): 0 before the one-step graph is captured
// (the warm-up) or without multi-step graphs, else up to the next log line, the epoch's end and
// --max-steps, at most --graph-steps.
int64_t Trainer::multi_step_size(const EpochStats& e) const {
  if (!multi_ || multi_->failed() || !graph_.captured()) return 0;
  const Progress& p = progress_;
  int64_t k = std::min({multi_->max_steps(), o_.log_interval - e.micro % o_.log_interval, p.micro_per_epoch - e.micro});
  if (o_.max_steps > 0) k = std::min(k, o_.max_steps - p.global_step);
  return k;
}

// The next k batches into the static buffers a K-step graph reads (multi_step.h): their dataset
// indices with device-resident data, else copies of the loader's batches (already on the device).
// False, and nothing taken, when fewer than k full batches are left (device-resident data).
bool Trainer::stage_batches(int64_t k, data::DataLoader& loader) {
  const int64_t bs = o_.batch_size, rows = multi_->max_steps() * bs;
  if (inputs_.train) {
    if (!staged_.indices.defined()) staged_.indices = empty({rows}, TensorOptions(DType::i64).device(device_));
    return loader.take_indices(staged_.indices, k);
  }
  // the host loader: multi_step_size kept k within the epoch's full batches (graph mode drops the last short one)
  for (int64_t j = 0; j < k; ++j) {
    std::optional<data::Batch> b = loader.next();
    EMBER_CHECK(b && b->size() == bs, "mnist_train: the loader ended its epoch ", k - j,
                " batches early");  // the epoch's batch count said otherwise
    if (!staged_.images.defined()) {
      Shape s = b->images.shape();
      s[0] = rows;
      staged_.images = empty(s, TensorOptions(b->images.dtype()).device(device_));
      staged_.labels = empty({rows}, TensorOptions(b->labels.dtype()).device(device_));
    }
    staged_.images.narrow(0, j * bs, bs).copy_(b->images, /*non_blocking=*/true);
    staged_.labels.narrow(0, j * bs, bs).copy_(b->labels, /*non_blocking=*/true);
  }
  return true;
}

// K optimizer steps in one launch: the schedule's values for each of them staged as a row of the
// optimizer's hyperparameter table (row j: after j scheduler steps) and uploaded, the graph
// replayed, the scheduler at its K-th step after it, as K single steps would leave it.
void Trainer::run_multi_step(int64_t k, const data::DataLoader& loader) {
  optim::Optimizer& opt = *learner_.opt;
  if (!hyper_rows_made_) {
    opt.make_hyper_rows(multi_->max_steps());
    hyper_rows_made_ = true;
  }
  optim::stage_schedule_rows(opt, learner_.sched.get(), k);
  MultiStepGraphs::Hooks h;
  const int64_t bs = o_.batch_size;
  h.step = [this, &loader, bs](int64_t j) {
    if (inputs_.train) {
      const data::Batch b = loader.gather(staged_.indices.slice(0, j * bs, (j + 1) * bs));  // as next() makes it
      eager_step(b.images, b.labels, true);
    } else {
      eager_step(staged_.images.narrow(0, j * bs, bs), staged_.labels.narrow(0, j * bs, bs), true);
    }
  };
  h.use_row = [&opt](int64_t row) { opt.use_hyper_row(row); };
  h.capture_start = [&opt] { opt.zero_grad(true); };
  h.after_failure = [this, &opt] {
    if (learner_.scaler) learner_.scaler->discard_step();
    opt.zero_grad(true);
  };
  multi_->run(k, h);
  if (learner_.sched) learner_.sched->step();
  opt.sync_hyperparameters();  // a one-step replay after this one reads the new lr
}

std::pair<double, double> Trainer::log_interval(RunResult& r, int epoch, int64_t step_in_epoch) {
  if (interval_.steps == 0) return {0, 0};
  runtime::AllowSyncScope allow;  // the one read per interval
  if (dp_.pg) {
    // what every rank saw: the mean of the ranks' loss sums, the total of correct predictions
    dp_.pg->all_reduce(interval_.loss_sum, dist::ReduceOp::kAvg)->wait();
    dp_.pg->all_reduce(interval_.correct, dist::ReduceOp::kSum)->wait();
    // every rank stops at the same interval when any of them saw the divergence or a signal
    dp_.pg->all_reduce(guard_.diverged_at(), dist::ReduceOp::kMax)->wait();
    Tensor stop = full({1}, stop_signal() != 0 ? 1.0 : 0.0, TensorOptions(DType::f32).device(device_));
    dp_.pg->all_reduce(stop, dist::ReduceOp::kMax)->wait();
    dp_.stop_agreed = dp_.stop_agreed || stop.item() > 0;
  }
  const double loss_sum = interval_.loss_sum.item();
  const double correct = interval_.correct.item() / dp_.world();  // per rank, like interval_.samples
  guard_.read();                                                  // already on its way with the reads above
  {
    autograd::NoGradGuard ng;
    interval_.loss_sum.zero_();
    interval_.correct.zero_();
  }
  timer_.collect();  // the step events are complete after the reads above
  const double loss = loss_sum / static_cast<double>(interval_.steps);
  const double now = now_s();
  r.curve_steps.push_back(static_cast<double>(progress_.global_step));
  r.curve_loss.push_back(loss);
  logs_->step(
      {.epoch = epoch + 1,
       .step = progress_.global_step,
       .step_in_epoch = step_in_epoch,
       .loss = loss,
       .accuracy = 100.0 * correct / static_cast<double>(interval_.samples),
       .lr = current_lr(),
       .samples_per_s = dp_.world() * static_cast<double>(interval_.samples) / std::max(now - interval_.start, 1e-9)});
  interval_.samples = 0;
  interval_.steps = 0;
  interval_.start = now;
  return {loss_sum, correct};
}

// After an epoch's steps: stops on a divergence or a signal (false), else evaluates, records and
// saves the epoch.
bool Trainer::end_epoch(const EpochStats& e, int epoch, data::DataLoader& loader, RunResult& r) {
  const Progress& p = progress_;
  if (guard_.diverged_step() >= 0) {
    r.error = str("training diverged: the loss was NaN or inf for ", o_.max_nonfinite_steps, " consecutive step",
                  o_.max_nonfinite_steps == 1 ? "" : "s", " at step ", guard_.diverged_step(), " (epoch ", epoch + 1,
                  "; --max-nonfinite-steps ", o_.max_nonfinite_steps, "); stopped without saving a checkpoint of it",
                  o_.save.empty() ? std::string() : " (" + o_.save + " keeps the last good one, if any)",
                  "; try a lower --lr or --clip-grad");
    return false;
  }
  if (stop_requested() && e.micro < p.micro_per_epoch) {
    r.interrupted_by = stop_signal() != 0 ? stop_signal() : SIGTERM;
    r.notes.push_back(str("stopped by ", r.interrupted_by == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM", " during epoch ",
                          epoch + 1, " after ", e.micro, " of ", p.micro_per_epoch,
                          " micro-batches: that partial epoch is not reported or saved"));
    return false;
  }
  if (device_.is_cuda()) {
    runtime::AllowSyncScope allow;
    cuda::current_stream(device_.index).synchronize();
  }
  const double e_train = now_s() - e.start;
  progress_.train_total += e_train;
  progress_.wait_total += loader.stats().wait_seconds - e.wait_before;
  EpochResult er;
  er.epoch = epoch + 1;
  er.seconds = e_train;
  er.samples_per_s = dp_.world() * static_cast<double>(e.samples) / std::max(e_train, 1e-9);
  er.train_loss = e.micro > 0 ? e.loss / static_cast<double>(e.micro) : 0;
  er.train_acc = e.samples > 0 ? 100.0 * e.correct / static_cast<double>(e.samples) : 0;
  er.lr = current_lr();
  if (splits_.val) er.val_acc = evaluate(inputs_.val ? inputs_.val : splits_.val).accuracy;
  EvalResult test = evaluate(inputs_.test ? inputs_.test : splits_.test);
  progress_.last_eval_end = now_s();  // evaluate() read its counts: the device is idle
  er.test_acc = test.accuracy;
  r.final_test = test;
  r.samples += e.samples;
  if (test.accuracy > r.best_test_acc || r.epochs.empty()) {
    r.best_test_acc = test.accuracy;
    r.time_to_best = now_s() - p.run_start;
  }
  r.epochs.push_back(er);
  logs_->epoch(er);
  return o_.save.empty() || save_epoch(e, epoch, r);
}

// The epoch's checkpoint; false (and r.error) when the weights hold NaN or inf.
bool Trainer::save_epoch(const EpochStats& e, int epoch, RunResult& r) {
  const Progress& p = progress_;
  // never a non-finite checkpoint: fewer than --max-nonfinite-steps bad steps may have ended the
  // epoch (the weights are read to the host for the save anyway)
  if (const std::string bad = nonfinite_weight(); !bad.empty()) {
    r.error = str("training diverged: weight '", bad, "' holds NaN or inf after epoch ", epoch + 1, " (step ",
                  p.global_step, "); not saving it to ", o_.save, "; try a lower --lr or --clip-grad");
    return false;
  }
  // A checkpoint marks a finished epoch (resume starts the next one); a --max-steps stop in the
  // middle of an epoch would otherwise be resumed as if the rest of that epoch had run.
  if (e.micro == p.micro_per_epoch) save_checkpoint(epoch + 1, p.global_step);
  else
    r.notes.push_back(str("--max-steps stopped epoch ", epoch + 1, " after ", e.micro, " of ", p.micro_per_epoch,
                          " micro-batches: no checkpoint for the partial epoch (", o_.save,
                          epoch > p.start_epoch ? " holds the last finished one)" : " was not written)"));
  return true;
}

// The run's totals, the profile and the summary record.
void Trainer::finish_run(RunResult& r) {
  const Progress& p = progress_;
  if (r.epochs.empty() && r.error.empty() &&
      !stop_requested()) {  // resumed at or past --epochs: report the loaded model
    r.final_test = evaluate(inputs_.test ? inputs_.test : splits_.test);
    r.best_test_acc = r.final_test.accuracy;
    r.notes.push_back(str("the checkpoint is at epoch ", p.start_epoch, " of ", o_.epochs,
                          ": nothing left to train (raise --epochs to continue)"));
  }
  if (o_.sync_debug) runtime::set_sync_debug(runtime::SyncDebug::off);
  r.kernels = variants_run(device_.type);
  if (measured_cpu_defaults() || o_.autotune) {
    const autotune::Stats t = autotune::stats();
    const std::string file = autotune::cache_file();
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f", t.tuning_s);
    r.kernel_choices = str(t.keys_from_file, " from the cache, ", t.tunings, " measured in ", secs, " s",
                           file.empty() ? std::string() : " (" + file + ")");
  }
  r.notes.insert(r.notes.end(), notes_.begin(), notes_.end());
  r.notes.insert(r.notes.end(), eval_graphs_.notes().begin(), eval_graphs_.notes().end());
  r.eval_replays = eval_graphs_.replays();
  if (multi_) {
    r.multi_steps = multi_->steps();
    r.multi_launches = multi_->launches();
    r.notes.insert(r.notes.end(), multi_->notes().begin(), multi_->notes().end());
  }
  r.steps = p.global_step;
  r.train_seconds = p.train_total;
  r.samples_per_s = dp_.world() * static_cast<double>(r.samples) / std::max(p.train_total, 1e-9);
  r.data_wait_fraction = p.train_total > 0 ? p.wait_total / p.train_total : 0;
  if (p.warmup_end >= 0 && p.last_eval_end > p.warmup_end) {
    r.timed_seconds = p.last_eval_end - p.warmup_end;
    r.timed_samples_per_s = dp_.world() * static_cast<double>(r.samples - p.warmup_samples) / r.timed_seconds;
  }
  r.gpu_idle_fraction = timer_.idle_fraction();
  if (learner_.scaler) r.skipped_steps = learner_.scaler->skipped_steps();
  if (r.interrupted_by == 0 && stop_requested()) r.interrupted_by = stop_signal() != 0 ? stop_signal() : SIGTERM;
  if (profile_) profile_->write(o_.profile);
  r.total_seconds = now_s() - p.run_start;
  logs_->summary(r);
}

// ---- checkpoints ----

std::string Trainer::nonfinite_weight() const {
  for (const auto& [k, t] : learner_.model->state_dict()) {
    if (!is_floating(t.dtype()) || t.numel() == 0) continue;
    runtime::AllowSyncScope allow;
    Tensor v = t.detach().to(kCPU).to(DType::f64).contiguous();
    const double* q = v.data<double>();
    for (int64_t i = 0; i < v.numel(); ++i)
      if (!std::isfinite(q[i])) return k;
  }
  return {};
}

void Trainer::save_checkpoint(int epoch, int64_t step) {
  if (progress_.save_failed) return;
  runtime::AllowSyncScope allow;
  // building the metadata can fail too (a value JSON cannot hold): that is a failed save like any other
  try {
    TrainingCheckpoint ck;
    ck.model(*learner_.model).optimizer(*learner_.opt).info(run_record().metadata());
    if (learner_.sched) ck.scheduler(*learner_.sched);
    if (learner_.scaler) ck.add("scaler", *learner_.scaler);
    ck.save(o_.save, {epoch, step});
  } catch (const std::exception& e) {
    progress_.save_failed = true;
    output_failed("--save", o_.save, e.what());
  }
}

// What a resume must agree on (ckpt/run_record.h): the optimizer and the schedule continue from the
// saved state, so a flag that would change them cannot be honoured. --epochs and --max-steps only
// matter to a schedule laid out over the run (not to --scheduler none, whose runs can be
// extended), so they are recorded only then. The data and input facts let --eval-only and
// --predict rebuild the model (splits.h, trained_on).
RunRecord Trainer::run_record() const {
  RunRecord rec;
  add_training_settings(rec);
  add_data_settings(rec);
  return rec;
}

// The flags that shape the optimizer and the schedule, and the run's length.
void Trainer::add_training_settings(RunRecord& rec) const {
  const bool laid_out = o_.scheduler != SchedulerKind::none;
  const std::string run_length = "the schedule is laid out over the saved run's length";
  rec.add({.key = "model",
           .flag = "--model",
           .why = "a checkpoint resumes the model it was saved from",
           .value = name(o_.model)});
  rec.add({.key = "optimizer",
           .flag = "--optimizer",
           .why = "the optimizer state continues from the checkpoint",
           .value = name(o_.optimizer)});
  rec.add({.key = "batch_size",
           .flag = "--batch-size",
           .why = "the step counts and the schedule are laid out over the saved batch size",
           .value = std::to_string(o_.batch_size)});
  rec.add({.key = "grad_accum",
           .flag = "--grad-accum",
           .why = "the step counts and the schedule are laid out over the saved value",
           .value = std::to_string(o_.grad_accum)});
  rec.add({.key = "lr",
           .flag = "--lr",
           .why = "the optimizer and the schedule continue with the saved learning rate",
           .value = exact_text(o_.lr),
           .numeric = true});
  rec.add({.key = "weight_decay",
           .flag = "--weight-decay",
           .why = "the optimizer continues with the saved value",
           .value = exact_text(o_.weight_decay),
           .numeric = true});
  rec.add({.key = "momentum",
           .flag = "--momentum",
           .why = "the optimizer continues with the saved value",
           .value = exact_text(o_.momentum),
           .numeric = true});
  rec.add({.key = "scheduler",
           .flag = "--scheduler",
           .why = "the schedule continues from the checkpoint",
           .value = name(o_.scheduler)});
  rec.add({.key = "epochs",
           .flag = "--epochs",
           .why = run_length + " (--scheduler none runs can be extended)",
           .value = std::to_string(o_.epochs),
           .recorded = laid_out});
  rec.add({.key = "max_steps",
           .flag = "--max-steps",
           .why = run_length,
           .value = std::to_string(o_.max_steps),
           .recorded = laid_out});
  rec.add({.key = "total_steps",
           .flag = "the planned steps",
           .why = run_length,
           .value = std::to_string(progress_.total_steps),
           .derived = true,
           .recorded = laid_out});
  rec.add({.key = "steps_per_epoch",
           .flag = "the steps per epoch",
           .why = "another number of processes under --distributed?",
           .value = std::to_string(progress_.steps_per_epoch),
           .derived = true});
}

// Which samples are seen, in which split and order; what the model takes and how its inputs were
// normalised (--eval-only and --predict need them).
void Trainer::add_data_settings(RunRecord& rec) const {
  rec.add({.key = "seed",
           .flag = "--seed",
           .why = "the seed decides the validation split and the order of the samples",
           .value = std::to_string(o_.seed)});
  rec.add({.key = "val_split",
           .flag = "--val-split",
           .why = "the split decides which samples train and which validate",
           .value = exact_text(o_.val_split),
           .numeric = true});
  rec.add({.key = "test_split",
           .flag = "--test-split",
           .why = "the split decides which samples train and which test",
           .value = exact_text(o_.test_split),
           .numeric = true,
           .recorded = splits_.test_held_out});
  rec.add({.key = "data_train_images",
           .flag = "--data: the training images",
           .why = "another dataset: the split and the schedule would change",
           .value = std::to_string(splits_.train_file_images)});
  rec.add({.key = "data_test_images",
           .flag = "--data: the test images",
           .why = "another dataset",
           .value = std::to_string(splits_.test_file_images),
           .derived = splits_.test_held_out});  // held out: follows from --test-split
  rec.add({.key = "data_labels",
           .flag = "--data: the labels' checksum",
           .why = "another dataset, or the same size with other labels",
           .value = splits_.labels_checksum});
  rec.add({.key = "input_shape",
           .flag = "--data: the image shape (CxHxW)",
           .why = "the model takes the saved shape",
           .value = shape_text(splits_.shape)});
  rec.add({.key = "classes",
           .flag = "--data: the classes",
           .why = "the model's outputs are the saved classes",
           .value = nlohmann::json(splits_.classes).dump()});
  rec.add({.key = "normalize_mean", .value = doubles_text(inputs_.mean), .compared = false});
  rec.add({.key = "normalize_std", .value = doubles_text(inputs_.std), .compared = false});
}

void Trainer::check_resume_progress(const Metadata& saved, const TrainingProgress& p) const {
  const std::string ck = o_.resume;
  const int64_t steps_per_epoch = progress_.steps_per_epoch;
  EMBER_CHECK(p.epoch <= 1000, "--resume ", ck, ": 'progress.epoch' is ", p.epoch,
              ", beyond any run (--epochs is at most 1000); the checkpoint is damaged");
  if (auto it = saved.find("epochs"); it != saved.end())
    EMBER_CHECK(p.epoch <= std::strtoll(it->second.c_str(), nullptr, 10), "--resume ", ck, ": 'progress.epoch' is ",
                p.epoch, ", beyond the saved run's ", it->second, " epochs; the checkpoint is damaged");
  if (saved.count("batch_size"))
    EMBER_CHECK(p.step <= p.epoch * steps_per_epoch, "--resume ", ck, ": 'progress.step' is ", p.step, ", beyond the ",
                p.epoch * steps_per_epoch, " steps that ", p.epoch, " epochs of ", steps_per_epoch,
                " take; the checkpoint is damaged (or was saved on other data)");
}

// Under --distributed the ranks agree at each log interval (log_interval), so that they all leave
// the loop after the same step; alone, the signal is seen after the step it arrived in.
bool Trainer::stop_requested() const { return dp_.pg ? dp_.stop_agreed : stop_signal() != 0; }

double Trainer::current_lr() const { return learner_.opt->param_groups().at(0).options().get_lr(); }

}  // namespace mnist
