#include "apps/mnist_train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <csignal>
#include <unistd.h>

#include "apps/mnist_train/models.h"
#include "apps/mnist_train/run_agreement.h"
#include "ckpt/training_checkpoint.h"
#include "core/autocast.h"
#include "core/hash.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/runtime.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "kernels/autotune.h"
#include "kernels/functional.h"
#include "kernels/registry.h"
#include "logging/progress.h"
#include "logging/tensorboard.h"

namespace mnist {

using namespace ember;

namespace {

std::string fmt_pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", v);
  return b;
}

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

}  // namespace

// ---- side outputs and signals ----

namespace {
int g_output_failures = 0;
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) ::_exit(128 + sig);  // the second one: at once
  g_stop_signal = sig;
  static const char msg[] =
      "mnist_train: stopping after the current step (outputs are written for the completed epochs; "
      "press Ctrl-C again to exit at once)\n";
  (void)!::write(2, msg, sizeof msg - 1);
}
}  // namespace

void output_failed(const std::string& flag, const std::string& path, const std::string& what) {
  ++g_output_failures;
  const std::string line = user_message(what);  // one line, no source locations
  std::fflush(stdout);
  std::fprintf(stderr,
               "mnist_train: error: %s %s: %s (training goes on without this output; the exit code will be 1)\n",
               flag.c_str(), path.c_str(), line.c_str());
}

int output_failures() { return g_output_failures; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }

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

// ---- logs ----

// The run's records: the progress bar, the epoch lines on stdout, the JSONL file (--log) and
// TensorBoard (--tensorboard). step() writes one log interval, epoch() one finished epoch,
// summary() the last record. A file output that fails is reported once and written no more
// (Note [side outputs]).
struct Trainer::Logs {
  struct Step {     // one log interval
    int epoch = 0;  // 1-based
    int64_t step = 0, step_in_epoch = 0;
    double loss = 0, accuracy = 0, lr = 0, samples_per_s = 0;
  };

  Logs(const Options& o, bool has_val) : o_(o), has_val_(has_val) {
    if (!o_.log.empty()) {
      // Opened and locked now, before any training: a second run appending to the same log fails
      // here (naming the first one's PID), not after its first interval. A run that writes no
      // record still leaves no file (AppendFile::close).
      jsonl_ = std::make_unique<io::AppendFile>(o_.log, false, /*exclusive=*/true);
      jsonl_->open();
    }
    if (!o_.tensorboard.empty()) {
      try {
        tb_ = std::make_unique<logging::TensorBoardWriter>(o_.tensorboard);
      } catch (const std::exception& e) {
        output_failed("--tensorboard", o_.tensorboard, e.what());
      }
    }
  }

  void begin_epoch(int epoch, int64_t micro_per_epoch) {
    if (!o_.quiet && !o_.silent)
      progress_ = std::make_unique<logging::Progress>(str("epoch ", epoch + 1, "/", o_.epochs), micro_per_epoch);
  }
  void end_epoch() {
    if (progress_) progress_->finish();
  }

  void step(const Step& s) {
    if (progress_) {
      char extra[64];
      std::snprintf(extra, sizeof extra, "loss %.4f acc %.2f%%", s.loss, s.accuracy);
      progress_->update(s.step_in_epoch, s.step_in_epoch * o_.batch_size, extra);
    }
    json({{"type", "step"},
          {"epoch", s.epoch},
          {"step", s.step},
          {"loss", s.loss},
          {"accuracy", s.accuracy},
          {"lr", s.lr},
          {"samples_per_s", s.samples_per_s}});
    scalar("train/loss", s.loss, s.step);
    scalar("train/accuracy", s.accuracy, s.step);
    scalar("train/lr", s.lr, s.step);
    scalar("train/samples_per_s", s.samples_per_s, s.step);
  }

  void epoch(const EpochResult& er) {
    if (!o_.silent)
      std::printf(
          "epoch %d/%d  train loss %.4f  train acc %.2f%%  val acc %s  test acc %.2f%%  %.1f s  "
          "%.0f samples/s  lr %.3g\n",
          er.epoch, o_.epochs, er.train_loss, er.train_acc, has_val_ ? fmt_pct(er.val_acc).c_str() : "-", er.test_acc,
          er.seconds, er.samples_per_s, er.lr);
    std::fflush(stdout);
    // Without a validation split there is no validation accuracy: null, not a 0 that reads as a measured one.
    json({{"type", "epoch"},
          {"epoch", er.epoch},
          {"train_loss", er.train_loss},
          {"train_accuracy", er.train_acc},
          {"val_accuracy", has_val_ ? nlohmann::json(er.val_acc) : nlohmann::json()},
          {"test_accuracy", er.test_acc},
          {"seconds", er.seconds},
          {"samples_per_s", er.samples_per_s},
          {"lr", er.lr}});
    scalar("epoch/train_loss", er.train_loss, er.epoch);
    if (has_val_) scalar("epoch/val_accuracy", er.val_acc, er.epoch);
    scalar("epoch/test_accuracy", er.test_acc, er.epoch);
    scalar("epoch/samples_per_s", er.samples_per_s, er.epoch);
  }

  // The last JSONL record; closes the file (a failure to flush it is reported like any other).
  void summary(const RunResult& r) {
    const char* status = !r.error.empty() ? "diverged" : r.interrupted_by != 0 ? "interrupted" : "completed";
    json({{"type", "summary"},
          {"status", status},
          {"epochs", r.epochs.size()},
          {"steps", r.steps},
          {"test_accuracy", r.final_test.accuracy},
          {"best_test_accuracy", r.best_test_acc},
          {"train_seconds", r.train_seconds},
          {"total_seconds", r.total_seconds},
          {"samples_per_s", r.samples_per_s}});
    if (jsonl_) {
      try {
        jsonl_->close();
      } catch (const std::exception& e) {
        output_failed("--log", o_.log, e.what());
      }
      jsonl_.reset();
    }
  }

 private:
  void json(const nlohmann::json& j) {
    if (!jsonl_) return;
    try {
      jsonl_->append(j.dump() + "\n");
    } catch (const std::exception& e) {
      output_failed("--log", o_.log, e.what());
      jsonl_.reset();
    }
  }
  void scalar(const std::string& tag, double value, int64_t step) {
    if (!tb_) return;
    try {
      tb_->scalar(tag, value, step);
    } catch (const std::exception& e) {
      output_failed("--tensorboard", o_.tensorboard, e.what());
      tb_.reset();
    }
  }

  const Options& o_;
  const bool has_val_;  // the epoch line prints "-" for the validation accuracy without a split
  std::unique_ptr<io::AppendFile> jsonl_;
  std::unique_ptr<logging::TensorBoardWriter> tb_;
  std::unique_ptr<logging::Progress> progress_;
};

// --profile records a window of 10 optimizer steps after 10 of warm-up, earlier in shorter runs (a
// run of 10 steps or fewer is profiled from its first step). The loop calls before_step() and
// after_step() around each micro-batch with the optimizer step count; write() closes a window the
// run ended inside and saves the trace.
struct Trainer::ProfileWindow {
  explicit ProfileWindow(int64_t total_steps) : first_(std::min<int64_t>(10, std::max<int64_t>(0, total_steps - 10))) {}

  void before_step(int64_t step) {
    if (state_ != State::waiting || step < first_) return;
    prof_.start();
    state_ = State::recording;
    end_ = step + 10;
  }
  void after_step(int64_t step) {
    if (state_ != State::recording || step != end_) return;
    runtime::AllowSyncScope allow;
    prof_.stop();
    state_ = State::done;
  }
  void write(const std::string& path);

 private:
  enum class State { waiting, recording, done };
  profiler::TraceProfiler prof_;
  State state_ = State::waiting;
  int64_t first_, end_ = 0;  // optimizer steps: the window is [first_ or later, end_)
};

// ---- construction ----

Trainer::Trainer(const Options& o, Device device, const Splits& splits) : o_(o), device_(device), splits_(splits) {
  manual_seed(o_.seed);
  if (o_.deterministic) set_deterministic(true);
  if (o_.autotune) set_backend_all("auto");
  if (!o_.backends.empty()) set_backends(o_.backends);
  model_ = make_model(o_.model, splits_.shape);
  mean_ = splits_.mean;
  std_ = splits_.std;
  if (o_.channels_last && device_.is_cuda()) {
    // after the first conv (the input has one channel, so NCHW and NHWC coincide there)
    auto* seq = dynamic_cast<nn::SequentialImpl*>(model_.get());
    auto rebuilt = std::make_shared<nn::SequentialImpl>();
    for (size_t i = 0; seq != nullptr && i < seq->size(); ++i) {
      rebuilt->push_back((*seq)[i]);
      if (i == 0) rebuilt->push_back("to_channels_last", std::make_shared<ToChannelsLastImpl>());
    }
    if (seq != nullptr) model_ = rebuilt;
  }
  model_->to(device_);
  params_ = model_->parameters();
  if (o_.distributed) {
    pg_ = dist::default_group();
    EMBER_CHECK(pg_ != nullptr, "--distributed: no process group (main() creates it)");
    check_ranks_agree(*pg_, run_fields(), device_);  // before DDP's first broadcast
    ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, dist::DDPOptions().process_group(pg_));
  }
  build_optimizer();
  if (o_.amp == "fp16") {
    EMBER_CHECK(device_.is_cuda(), "--amp fp16 needs a CUDA device (the CPU's autocast supports bf16: use --amp bf16)");
    amp_dtype_ = DType::f16;
    scaler_ = std::make_unique<amp::GradScaler>();
  } else if (o_.amp == "bf16") {
    amp_dtype_ = DType::bf16;
  }
  loss_sum_ = zeros({1}, TensorOptions(DType::f32).device(device_));
  correct_ = zeros({1}, TensorOptions(DType::i64).device(device_));
  nonfinite_run_ = zeros({1}, TensorOptions(DType::f32).device(device_));
  diverged_at_ = full({1}, -1.0, TensorOptions(DType::f32).device(device_));
  dev_step_ = zeros({1}, TensorOptions(DType::f32).device(device_));
  logs_ = std::make_unique<Logs>(o_, splits_.val != nullptr);
}

// What every rank of a --distributed job must share (run_agreement.h).
std::vector<RunField> Trainer::run_fields() const {
  int64_t elements = 0;
  uint64_t shapes = kFnv1aBasis;  // every parameter's dims, each shape ended by its rank
  for (const Tensor& p : params_) {
    elements += p.numel();
    const int64_t rank = p.dim();
    for (int64_t d : p.shape()) shapes = fnv1a(&d, sizeof d, shapes);
    shapes = fnv1a(&rank, sizeof rank, shapes);
  }
  auto index_of = [](const std::string& v, const std::vector<std::string>& names) {
    const auto it = std::find(names.begin(), names.end(), v);
    return it == names.end() ? int64_t{-1} : static_cast<int64_t>(it - names.begin());
  };
  const std::vector<std::string> amps = {"off", "bf16", "fp16"}, optimizers = {"sgd", "adam", "adamw"};
  return {
      {"model parameter tensors", static_cast<int64_t>(params_.size())},
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
      {"--amp", index_of(o_.amp, amps), amps},
      {"--optimizer", index_of(o_.optimizer, optimizers), optimizers},
  };
}

Trainer::~Trainer() {
  if (o_.sync_debug) runtime::set_sync_debug(runtime::SyncDebug::off);
}

void Trainer::build_optimizer() {
  if (o_.optimizer == "sgd") {
    opt_ = std::make_unique<optim::SGD>(
        params_,
        optim::SGDOptions(o_.lr).momentum(o_.momentum).nesterov(o_.momentum > 0).weight_decay(o_.weight_decay));
  } else if (o_.optimizer == "adam") {
    opt_ = std::make_unique<optim::Adam>(
        params_, optim::AdamOptions(o_.lr).betas(std::make_tuple(o_.momentum, 0.999)).weight_decay(o_.weight_decay));
  } else {
    optim::AdamOptions a = optim::AdamWOptions(o_.lr);
    a.betas(std::make_tuple(o_.momentum, 0.999)).weight_decay(o_.weight_decay);
    opt_ = std::make_unique<optim::AdamW>(params_, a);
  }
}

void Trainer::build_scheduler(int64_t total_steps) {
  total_steps = std::max<int64_t>(total_steps, 1);
  if (o_.scheduler == "onecycle") {
    // The warm-up phase ends at step pct_start * total_steps - 1; at exactly 0 (4 steps in all) it
    // is empty, which OneCycleLR rejects (PyTorch divides by zero there): warm up over 2 steps.
    const double pct_start = 0.25 * static_cast<double>(total_steps) == 1.0 ? 0.5 : 0.25;
    sched_ =
        std::make_unique<optim::OneCycleLR>(*opt_, optim::OneCycleLROptions(o_.lr, total_steps).pct_start(pct_start));
  } else if (o_.scheduler == "cyclic") {
    int64_t half = std::max<int64_t>(1, total_steps / 4);  // two triangles over the run
    optim::CyclicLROptions c(o_.lr / 10, o_.lr);
    c.step_size_up(half).cycle_momentum(o_.optimizer == "sgd" && o_.momentum > 0);
    sched_ = std::make_unique<optim::CyclicLR>(*opt_, c);
  } else if (o_.scheduler == "cosine") {
    sched_ = std::make_unique<optim::CosineAnnealingLR>(*opt_, total_steps);
  } else if (o_.scheduler == "step") {
    sched_ = std::make_unique<optim::StepLR>(*opt_, std::max<int64_t>(1, total_steps / 3), 0.1);
  }
}

std::unique_ptr<data::DataLoader> Trainer::make_loader(std::shared_ptr<data::InMemoryDataset> ds, bool train) {
  data::DataLoaderOptions lo;
  lo.batch_size(train ? o_.batch_size : 1000)
      .shuffle(train)
      .drop_last(train && o_.graph)  // graph mode replays one static batch shape
      .num_workers(train ? o_.workers : std::min(o_.workers, 2))
      .pin_memory(o_.pin_memory)
      .non_blocking(o_.pin_memory)
      .device(device_)
      .seed(o_.seed)
      .normalize(mean_, std_)
      .dtype(DType::f32);
  if (train && o_.augment)
    lo.transform(std::make_shared<data::Compose>(std::vector<std::shared_ptr<const data::Transform>>{
        std::make_shared<data::RandomCrop>(splits_.shape.height, splits_.shape.width, 2),
        std::make_shared<data::RandomHorizontalFlip>(0.5)}));
  if (pg_) lo.shuffle(false);  // the samplers below shuffle (or not) themselves
  if (pg_ && train) {
    // each rank its shard of every epoch's permutation (padded to equal shards)
    auto sampler = std::make_shared<data::DistributedSampler>(
        ds->size(),
        data::DistributedSamplerOptions().world_size(pg_->size()).rank(pg_->rank()).shuffle(true).seed(o_.seed));
    return std::make_unique<data::DataLoader>(ds, lo, sampler);
  }
  if (pg_) {
    // evaluation: every sample exactly once over the ranks (rank r takes r, r + w, ...)
    return std::make_unique<data::DataLoader>(ds, lo,
                                              std::make_shared<StridedSampler>(ds->size(), pg_->rank(), pg_->size()));
  }
  return std::make_unique<data::DataLoader>(ds, lo);
}

// ---- the step ----

void Trainer::eager_step(const Tensor& x, const Tensor& y, bool do_step) {
  Tensor logits, loss;
  // --distributed with --grad-accum: only the micro-batch that steps reduces the gradients
  std::unique_ptr<dist::DistributedDataParallel::NoSync> no_sync;
  if (ddp_ && !do_step) no_sync = std::make_unique<dist::DistributedDataParallel::NoSync>(*ddp_);
  {
    std::optional<autocast::Scope> ac;
    if (amp_dtype_ != DType::f32) ac.emplace(device_.type, amp_dtype_);
    logits = ddp_ ? ddp_->forward(x) : model_->forward(x);
    CrossEntropyOptions ce;
    ce.label_smoothing = o_.label_smoothing;
    loss = cross_entropy(logits, y, ce);
  }
  Tensor scaled = o_.grad_accum > 1 ? div(loss, static_cast<double>(o_.grad_accum)) : loss;
  if (scaler_) scaled = scaler_->scale(scaled);
  scaled.backward();
  {
    autograd::NoGradGuard ng;
    Tensor l = loss.detach().to(DType::f32).reshape({1});
    loss_sum_.add_(l);
    correct_.add_(sum(eq(argmax(logits.detach(), 1), y)).reshape({1}));
    // divergence (Note [no host syncs in the step]): NaN or inf gives l - l != 0; the count of
    // consecutive bad losses and the step where it reached the limit stay on the device
    Tensor run = where(ne(sub(l, l), 0.0), add(nonfinite_run_, 1.0), 0.0);
    Tensor at = where(ge(run, static_cast<double>(o_.max_nonfinite_steps)),
                      where(lt(diverged_at_, 0.0), add(dev_step_, 1.0), diverged_at_), diverged_at_);
    copy_(nonfinite_run_, run);
    copy_(diverged_at_, at);
  }
  if (do_step) {
    optimizer_step();
    autograd::NoGradGuard ng;
    copy_(dev_step_, add(dev_step_, 1.0));
  }
  if (o_.sync_every_step && !capturing_) {  // (a captured step syncs after each replay: graph_step)
    runtime::AllowSyncScope allow;
    (void)loss.item();  // the naive loop: a host read every step
  }
}

void Trainer::optimizer_step() {
  if (o_.clip_grad > 0) {
    if (scaler_) scaler_->unscale_(*opt_);
    optim::clip_grad_norm_(params_, o_.clip_grad);
  }
  if (scaler_) {
    scaler_->step(*opt_);
    scaler_->update();
  } else {
    opt_->step();
  }
  opt_->zero_grad(o_.zero_grad_to_none);
}

bool Trainer::capture_graph(const Tensor& x, const Tensor& y) {
  static_x_ = empty(x.shape(), TensorOptions(x.dtype()).device(device_));
  static_y_ = empty(y.shape(), TensorOptions(y.dtype()).device(device_));
  copy_(static_x_, x, true);
  copy_(static_y_, y, true);
  opt_->sync_hyperparameters();
  {
    runtime::AllowSyncScope allow;
    cuda::device_synchronize(device_.index);
  }
  graph_ = std::make_unique<cuda::Graph>();
  try {
    graph_->capture_begin(cuda::current_stream(device_.index));
    opt_->zero_grad(true);  // the grads the step writes are allocated inside the graph's pool
    capturing_ = true;
    eager_step(static_x_, static_y_, true);
    capturing_ = false;
    graph_->capture_end();
  } catch (const std::exception& e) {
    capturing_ = false;
    graph_.reset();
    graph_failed_ = true;
    if (scaler_) scaler_->discard_step();
    opt_->zero_grad(true);
    std::fprintf(stderr, "mnist_train: --graph: the training step cannot be captured (%s); continuing eagerly\n",
                 e.what());
    return false;
  }
  // the capture did not run the step: replay it once for this batch
  if (ddp_) ddp_->replay_graph(*graph_);  // the group's watchdog times the replayed all_reduce
  else graph_->replay();
  return true;
}

void Trainer::graph_step(const Tensor& x, const Tensor& y) {
  copy_(static_x_, x, true);
  copy_(static_y_, y, true);
  if (ddp_) ddp_->replay_graph(*graph_);  // the group's watchdog times the replayed all_reduce
  else graph_->replay();
  if (o_.sync_every_step) {
    runtime::AllowSyncScope allow;
    (void)loss_sum_.item();
  }
}

// ---- logging ----

void Trainer::mark_step_event() {
  if (!device_.is_cuda()) return;
  if (events_used_ == events_.size()) events_.emplace_back(true);
  events_[events_used_++].record(cuda::current_stream(device_.index));
}

std::pair<double, double> Trainer::log_interval(RunResult& r, int epoch, int64_t step_in_epoch) {
  if (interval_steps_ == 0) return {0, 0};
  runtime::AllowSyncScope allow;  // the one read per interval
  const double world = pg_ ? static_cast<double>(pg_->size()) : 1.0;
  if (pg_) {
    // what every rank saw: the mean of the ranks' loss sums, the total of correct predictions
    pg_->all_reduce(loss_sum_, dist::ReduceOp::kAvg)->wait();
    pg_->all_reduce(correct_, dist::ReduceOp::kSum)->wait();
    // every rank stops at the same interval when any of them saw the divergence or a signal
    pg_->all_reduce(diverged_at_, dist::ReduceOp::kMax)->wait();
    Tensor stop = full({1}, stop_signal() != 0 ? 1.0 : 0.0, TensorOptions(DType::f32).device(device_));
    pg_->all_reduce(stop, dist::ReduceOp::kMax)->wait();
    stop_agreed_ = stop_agreed_ || stop.item() > 0;
  }
  double loss_sum = loss_sum_.item();
  double correct = correct_.item() / world;  // per rank, like interval_samples_
  if (diverged_step_ < 0) {
    const double at = diverged_at_.item();  // already on its way with the reads above
    if (at >= 0) diverged_step_ = static_cast<int64_t>(at);
  }
  {
    autograd::NoGradGuard ng;
    loss_sum_.zero_();
    correct_.zero_();
  }
  double loss = loss_sum / static_cast<double>(interval_steps_);
  double acc = 100.0 * correct / static_cast<double>(interval_samples_);
  // GPU busy and idle time from the step events, all complete after the reads above. Events come
  // in (start, end) pairs; slot 0 may hold the previous interval's last end event.
  if (events_used_ >= 2) {
    size_t first = events_used_ % 2;  // 1 when slot 0 is a carried-over end event
    for (size_t k = first; k + 1 < events_used_; k += 2) {
      gpu_busy_ms_ += events_[k].elapsed_ms(events_[k + 1]);
      if (k >= 1) gpu_idle_ms_ += events_[k - 1].elapsed_ms(events_[k]);
    }
    std::swap(events_[0], events_[events_used_ - 1]);  // the last end event starts the next gap
    events_used_ = 1;
  }
  double now = now_s();
  double rate = world * static_cast<double>(interval_samples_) / std::max(now - interval_start_, 1e-9);
  r.curve_steps.push_back(static_cast<double>(global_step_));
  r.curve_loss.push_back(loss);
  logs_->step({.epoch = epoch + 1,
               .step = global_step_,
               .step_in_epoch = step_in_epoch,
               .loss = loss,
               .accuracy = acc,
               .lr = current_lr(),
               .samples_per_s = rate});
  interval_samples_ = 0;
  interval_steps_ = 0;
  interval_start_ = now;
  return {loss_sum, correct};
}

std::string Trainer::nonfinite_weight() const {
  for (const auto& [k, t] : model_->state_dict()) {
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
  if (save_failed_) return;
  TrainingCheckpoint ck;
  ck.model(*model_).optimizer(*opt_).info(run_info());
  if (sched_) ck.scheduler(*sched_);
  if (scaler_) ck.add("scaler", *scaler_);
  runtime::AllowSyncScope allow;
  try {
    ck.save(o_.save, {epoch, step});
  } catch (const std::exception& e) {
    save_failed_ = true;
    output_failed("--save", o_.save, e.what());
  }
}

// Under --distributed the ranks agree at each log interval (log_interval), so that they all leave
// the loop after the same step; alone, the signal is seen after the step it arrived in.
bool Trainer::stop_requested() const { return pg_ ? stop_agreed_ : stop_signal() != 0; }

double Trainer::current_lr() const { return opt_->param_groups().at(0).options().get_lr(); }

namespace {
std::string exact(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}
}  // namespace

// What a resume must agree on (Note [checkpoints mean what they say] in ckpt/): the optimizer and
// the schedule continue from the saved state, so a flag that would change them cannot be honoured.
// --epochs and --max-steps only matter to a schedule laid out over the run (not to --scheduler none,
// whose runs can be extended), so they are recorded only then.
Metadata Trainer::run_info() const {
  Metadata m;
  m["model"] = o_.model;
  m["optimizer"] = o_.optimizer;
  m["batch_size"] = std::to_string(o_.batch_size);
  m["grad_accum"] = std::to_string(o_.grad_accum);
  m["lr"] = exact(o_.lr);
  m["weight_decay"] = exact(o_.weight_decay);
  m["momentum"] = exact(o_.momentum);
  m["scheduler"] = o_.scheduler;
  if (o_.scheduler != "none") {
    m["epochs"] = std::to_string(o_.epochs);
    m["max_steps"] = std::to_string(o_.max_steps);
    m["total_steps"] = std::to_string(total_steps_);
  }
  // which samples are seen, in which split and order
  m["seed"] = std::to_string(o_.seed);
  m["val_split"] = exact(o_.val_split);
  m["data_train_images"] = std::to_string(splits_.train_file_images);
  m["data_test_images"] = std::to_string(splits_.test_file_images);
  m["data_labels"] = splits_.labels_checksum;
  // what the model takes and how its inputs were normalised: --eval-only and --predict need them
  m["input_shape"] = shape_text(splits_.shape);
  m["classes"] = nlohmann::json(splits_.classes).dump();
  m["normalize_mean"] = doubles_text(mean_);
  m["normalize_std"] = doubles_text(std_);
  m["steps_per_epoch"] = std::to_string(steps_per_epoch_);
  return m;
}

void Trainer::check_resume_flags(const Metadata& saved) const {
  const Metadata now = run_info();
  struct Field {
    const char* key;
    const char* name;  // the flag, or what the value is
    const char* why;
    bool derived;  // follows from the others: named only when no flag or data difference explains it
  };
  const Field fields[] = {
      {"model", "--model", "a checkpoint resumes the model it was saved from", false},
      {"optimizer", "--optimizer", "the optimizer state continues from the checkpoint", false},
      {"batch_size", "--batch-size", "the step counts and the schedule are laid out over the saved batch size", false},
      {"grad_accum", "--grad-accum", "the step counts and the schedule are laid out over the saved value", false},
      {"lr", "--lr", "the optimizer and the schedule continue with the saved learning rate", false},
      {"weight_decay", "--weight-decay", "the optimizer continues with the saved value", false},
      {"momentum", "--momentum", "the optimizer continues with the saved value", false},
      {"scheduler", "--scheduler", "the schedule continues from the checkpoint", false},
      {"epochs", "--epochs",
       "the schedule is laid out over the saved run's length (--scheduler none runs can be extended)", false},
      {"max_steps", "--max-steps", "the schedule is laid out over the saved run's length", false},
      {"seed", "--seed", "the seed decides the validation split and the order of the samples", false},
      {"val_split", "--val-split", "the split decides which samples train and which validate", false},
      {"data_train_images", "--data: the training images", "another dataset: the split and the schedule would change",
       false},
      {"data_test_images", "--data: the test images", "another dataset", false},
      {"data_labels", "--data: the labels' checksum", "another dataset, or the same size with other labels", false},
      {"input_shape", "--data: the image shape (CxHxW)", "the model takes the saved shape", false},
      {"classes", "--data: the classes", "the model's outputs are the saved classes", false},
      {"steps_per_epoch", "the steps per epoch", "another number of processes under --distributed?", true},
      {"total_steps", "the planned steps", "the schedule is laid out over the saved run's length", true},
  };
  auto numeric = [](const std::string& key) {
    return key == "lr" || key == "weight_decay" || key == "momentum" || key == "val_split";
  };
  auto shown = [&](const std::string& key, const std::string& v) {
    if (!numeric(key)) return v;
    char b[40];
    std::snprintf(b, sizeof b, "%g", std::strtod(v.c_str(), nullptr));
    return std::string(b);
  };
  // Every difference is named, each with both values: a user fixing one at a time would otherwise
  // need a run per difference.
  std::string diffs, derived, wanted;
  for (const Field& f : fields) {
    auto it = saved.find(f.key);
    if (it == saved.end()) continue;  // an older checkpoint, or a key not recorded for this run
    auto mine = now.find(f.key);
    std::string value = mine == now.end() ? std::string() : mine->second;
    if (mine == now.end() && std::string(f.key) == "epochs") value = std::to_string(o_.epochs);
    if (mine == now.end() && std::string(f.key) == "max_steps") value = std::to_string(o_.max_steps);
    if (mine == now.end() && std::string(f.key) == "total_steps") value = std::to_string(total_steps_);
    bool same = value == it->second;
    if (!same && numeric(f.key)) same = std::strtod(value.c_str(), nullptr) == std::strtod(it->second.c_str(), nullptr);
    if (same) continue;
    std::string& out = f.derived ? derived : diffs;
    out += std::string(out.empty() ? "" : "; ") + f.name + " " + shown(f.key, value) +
           " differs from the checkpoint's " + shown(f.key, it->second) + " (" + f.why + ")";
    if (!f.derived && f.name[0] == '-' && std::string(f.name).find(':') == std::string::npos)
      wanted += std::string(wanted.empty() ? "" : " ") + f.name + " " + shown(f.key, it->second);
  }
  if (diffs.empty()) diffs = derived;
  EMBER_CHECK(diffs.empty(), "--resume ", o_.resume, ": ", diffs, "; resume with ",
              wanted.empty() ? std::string("the checkpoint's data and settings") : wanted,
              ", or start a new run without --resume");
}

void Trainer::check_resume_progress(const Metadata& saved, const TrainingProgress& p, int64_t steps_per_epoch) const {
  const std::string ck = o_.resume;
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
    mean_ = t->mean;  // the inputs are normalised as in training
    std_ = t->std;
  }
  TensorDict model_state;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("model.", 0) == 0) model_state.insert(name.substr(6), t);
  const bool plain = model_state.empty();
  if (plain) model_state = f.tensors;  // a plain model state dict
  check_module_state(model_state, *model_, plain ? "" : "model.", "--eval-only " + path);
  model_->load_state_dict(model_state, true);
}

// The profiler writes its trace with plain streams: it goes to a scratch file first, and from there
// into --profile through io::AtomicFile (never a half-written or empty trace under that name).
void Trainer::ProfileWindow::write(const std::string& path) {
  try {
    runtime::AllowSyncScope allow;
    if (state_ != State::done) prof_.stop();
    state_ = State::done;
    std::string scratch = (std::filesystem::temp_directory_path() / "mnist_train.profile.XXXXXX").string();
    std::vector<char> buf(scratch.begin(), scratch.end());
    buf.push_back('\0');
    int fd = ::mkstemp(buf.data());
    EMBER_CHECK(fd >= 0, "cannot create a scratch file ", scratch, ": ", std::strerror(errno));
    ::close(fd);
    scratch = buf.data();
    size_t n = 0;
    std::string trace;
    try {
      n = prof_.write_chrome_trace(scratch);
      std::ifstream in(scratch, std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      trace = ss.str();
      EMBER_CHECK(in.good() || in.eof(), "cannot read back the trace from ", scratch);
      EMBER_CHECK(!trace.empty() && nlohmann::json::accept(trace), "the trace in ", scratch,
                  " is incomplete (disk full?)");
    } catch (...) {
      ::unlink(scratch.c_str());
      throw;
    }
    ::unlink(scratch.c_str());
    io::write_file_atomic(path, trace);
    std::printf("\nprofile: %zu events written to %s (open in Perfetto or chrome://tracing)\n%s", n, path.c_str(),
                prof_.top_ops_table(15).c_str());
  } catch (const std::exception& e) {
    output_failed("--profile", path, e.what());
  }
}

// ---- evaluation ----

EvalResult Trainer::evaluate(const std::shared_ptr<data::InMemoryDataset>& ds) {
  autograd::NoGradGuard ng;
  bool was_training = model_->is_training();
  model_->eval();
  auto loader = make_loader(ds, false);
  const int64_t k = splits_.shape.classes;
  Tensor counts = zeros({k * k}, TensorOptions(DType::i64).device(device_));
  int64_t n = 0;
  for (data::Batch& b : *loader) {
    Tensor logits;
    {
      std::optional<autocast::Scope> ac;
      if (amp_dtype_ != DType::f32) ac.emplace(device_.type, amp_dtype_);
      logits = model_->forward(b.images);
    }
    Tensor pred = argmax(logits, 1);
    Tensor cell = add(mul(b.labels, static_cast<double>(k)), pred);
    counts = index_add(counts, 0, cell, ones({b.size()}, TensorOptions(DType::i64).device(device_)));
    n += b.size();
  }
  if (pg_) {
    // the whole test set: every rank's confusion counts and sample count, summed
    Tensor total = full({1}, static_cast<double>(n), TensorOptions(DType::i64).device(device_));
    pg_->all_reduce(counts, dist::ReduceOp::kSum)->wait();
    pg_->all_reduce(total, dist::ReduceOp::kSum)->wait();
    runtime::AllowSyncScope allow;
    n = static_cast<int64_t>(total.item());
  }
  EvalResult r;
  r.samples = n;
  std::vector<int64_t> c;
  {
    runtime::AllowSyncScope allow;
    c = counts.to_vector<int64_t>();
  }
  int64_t right = 0;
  r.confusion.assign(static_cast<size_t>(k), std::vector<int64_t>(static_cast<size_t>(k), 0));
  for (int64_t t = 0; t < k; ++t)
    for (int64_t p = 0; p < k; ++p) {
      const int64_t v = c[static_cast<size_t>(t * k + p)];
      r.confusion[static_cast<size_t>(t)][static_cast<size_t>(p)] = v;
      if (t == p) right += v;
    }
  r.accuracy = n > 0 ? 100.0 * static_cast<double>(right) / static_cast<double>(n) : 0;
  model_->train(was_training);
  return r;
}

// ---- the run ----

// The run: the epochs until --epochs, --max-steps, a divergence or a stop signal; each epoch the
// steps (load, forward, loss, backward, optimizer step, log), then evaluation, the epoch's record
// and the checkpoint.
RunResult Trainer::run() {
  RunResult r;
  r.has_val = splits_.val != nullptr;
  run_start_ = now_s();
  upload_device_resident(r);
  auto loader = make_loader(train_dev_ ? train_dev_ : splits_.train, true);
  plan_run(loader->size());
  if (!o_.resume.empty()) resume_from_checkpoint();
  {
    autograd::NoGradGuard ng;
    dev_step_.fill_(static_cast<double>(global_step_));
  }
  const bool want_graph = graph_wanted(r);
  if (o_.sync_debug) runtime::set_sync_debug(runtime::SyncDebug::warn);
  events_used_ = 0;
  for (int epoch = start_epoch_; epoch < o_.epochs; ++epoch) {
    if (stop_requested()) break;
    if (o_.max_steps > 0 && global_step_ >= o_.max_steps) break;  // resumed at the --max-steps cap
    const EpochStats e = train_epoch(*loader, epoch, want_graph, r);
    if (!end_epoch(e, epoch, *loader, r) || e.max_steps_reached) break;
  }
  finish_run(r);
  return r;
}

void Trainer::upload_device_resident(RunResult& r) {
  if (o_.device_resident && device_.is_cuda()) {  // uploaded once, as uint8
    train_dev_ = splits_.train->to(device_);
    if (splits_.val) val_dev_ = splits_.val->to(device_);
    test_dev_ = splits_.test->to(device_);
  } else if (o_.device_resident) {
    r.notes.push_back("--device-resident needs a CUDA device: the data stayed on the host");
  }
}

// The run's length, the schedule over it and the profiling window.
void Trainer::plan_run(int64_t micro_per_epoch) {
  micro_per_epoch_ = micro_per_epoch;
  // With --grad-accum N the last group of an epoch may be short: it steps too, so a group never
  // spans two epochs (the scheduler's step count is exact, and a checkpoint holds no pending grads).
  steps_per_epoch_ = std::max<int64_t>(1, (micro_per_epoch + o_.grad_accum - 1) / o_.grad_accum);
  total_steps_ = steps_per_epoch_ * o_.epochs;
  if (o_.max_steps > 0) total_steps_ = std::min(total_steps_, o_.max_steps);
  build_scheduler(total_steps_);
  if (!o_.profile.empty()) profile_ = std::make_unique<ProfileWindow>(total_steps_);
}

void Trainer::resume_from_checkpoint() {
  TrainingCheckpoint ck;
  ck.model(*model_).optimizer(*opt_);
  if (sched_) ck.scheduler(*sched_);
  if (scaler_) ck.add("scaler", *scaler_);
  io::SafetensorsFile f = io::load_safetensors(o_.resume);
  StateDict sd{std::move(f.tensors), std::move(f.metadata)};
  Metadata saved_run;
  for (const auto& [k, v] : sd.metadata)
    if (k.rfind("run.", 0) == 0) saved_run[k.substr(4)] = v;
  check_resume_flags(saved_run);  // before anything is loaded (a different --optimizer, --model ...)
  TrainingProgress p;
  try {
    p = ck.restore(sd);
  } catch (const std::exception& e) {
    EMBER_FAIL("--resume ", o_.resume, ": ", e.what());
  }
  check_resume_progress(p.run, p, steps_per_epoch_);
  start_epoch_ = static_cast<int>(p.epoch);
  global_step_ = p.step;
  if (!o_.quiet)
    std::printf("resumed from %s at epoch %lld, step %lld\n", o_.resume.c_str(), static_cast<long long>(p.epoch),
                static_cast<long long>(p.step));
}

bool Trainer::graph_wanted(RunResult& r) const {
  if (!o_.graph) return false;
  if (!device_.is_cuda()) {
    r.notes.push_back("--graph needs a CUDA device: ran eagerly on the CPU");
    return false;
  }
  if (o_.grad_accum > 1) {
    r.notes.push_back("--graph with --grad-accum > 1 is not captured (the step is not one static unit): ran eagerly");
    return false;
  }
  return true;
}

// One epoch of steps. Stops early at --max-steps, a divergence or a stop signal.
Trainer::EpochStats Trainer::train_epoch(data::DataLoader& loader, int epoch, bool want_graph, RunResult& r) {
  model_->train();
  loader.set_epoch(epoch);
  events_used_ = 0;  // the gap across the evaluation is not idle time between steps
  EpochStats e;
  e.wait_before = loader.stats().wait_seconds;
  e.start = now_s();
  interval_start_ = e.start;
  logs_->begin_epoch(epoch, micro_per_epoch_);
  micro_ = 0;
  for (data::Batch& b : loader) {
    mark_step_event();
    if (profile_) profile_->before_step(global_step_);
    ++micro_;
    const bool do_step = micro_ == o_.grad_accum || e.micro + 1 == micro_per_epoch_;
    if (do_step) micro_ = 0;
    train_step(b, do_step, want_graph, r);
    mark_step_event();
    ++e.micro;
    e.samples += b.size();
    interval_samples_ += b.size();
    ++interval_steps_;
    if (do_step) {
      ++global_step_;
      ++steps_here_;
      if (sched_) sched_->step();
      if (graph_) opt_->sync_hyperparameters();  // the next replay reads the new lr from the device
    }
    if (profile_) profile_->after_step(global_step_);
    if (e.micro % o_.log_interval == 0 || e.micro == micro_per_epoch_) add_interval(e, log_interval(r, epoch, e.micro));
    if (diverged_step_ >= 0 || stop_requested()) break;
    if (o_.max_steps > 0 && global_step_ >= o_.max_steps) {
      e.max_steps_reached = true;
      break;
    }
  }
  if (interval_steps_ > 0) add_interval(e, log_interval(r, epoch, e.micro));
  logs_->end_epoch();
  return e;
}

void Trainer::add_interval(EpochStats& e, std::pair<double, double> loss_and_correct) {
  e.loss += loss_and_correct.first;
  e.correct += loss_and_correct.second;
}

// One micro-batch: captured into a CUDA graph once warm, then replayed; else eager. Warm means
// kGraphWarmup steps of this process (a resumed run too): they tune the kernels (--autotune, cuDNN's
// benchmark mode), make the optimizer's state and the pinned buffers, and let DDP rebuild its
// buckets, none of which may happen inside a capture.
void Trainer::train_step(const data::Batch& b, bool do_step, bool want_graph, RunResult& r) {
  constexpr int64_t kGraphWarmup = 3;
  if (want_graph && !graph_ && !graph_failed_ && steps_here_ >= kGraphWarmup && do_step) {
    if (capture_graph(b.images, b.labels)) {
      r.graph_used = true;
    } else {
      r.notes.push_back("--graph: capture failed, ran eagerly (see the message above)");
      eager_step(b.images, b.labels, do_step);  // the batch the capture did not train
    }
  } else if (graph_) {
    graph_step(b.images, b.labels);
  } else {
    eager_step(b.images, b.labels, do_step);
  }
}

// After an epoch's steps: stops on a divergence or a signal (false), else evaluates, records and
// saves the epoch.
bool Trainer::end_epoch(const EpochStats& e, int epoch, data::DataLoader& loader, RunResult& r) {
  if (diverged_step_ >= 0) {
    r.error = str("training diverged: the loss was NaN or inf for ", o_.max_nonfinite_steps, " consecutive step",
                  o_.max_nonfinite_steps == 1 ? "" : "s", " at step ", diverged_step_, " (epoch ", epoch + 1,
                  "; --max-nonfinite-steps ", o_.max_nonfinite_steps, "); stopped without saving a checkpoint of it",
                  o_.save.empty() ? std::string() : " (" + o_.save + " keeps the last good one, if any)",
                  "; try a lower --lr or --clip-grad");
    return false;
  }
  if (stop_requested() && e.micro < micro_per_epoch_) {
    r.interrupted_by = stop_signal() != 0 ? stop_signal() : SIGTERM;
    r.notes.push_back(str("stopped by ", r.interrupted_by == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM", " during epoch ",
                          epoch + 1, " after ", e.micro, " of ", micro_per_epoch_,
                          " micro-batches: that partial epoch is not reported or saved"));
    return false;
  }
  if (device_.is_cuda()) {
    runtime::AllowSyncScope allow;
    cuda::current_stream(device_.index).synchronize();
  }
  const double e_train = now_s() - e.start;
  train_total_ += e_train;
  wait_total_ += loader.stats().wait_seconds - e.wait_before;
  EpochResult er;
  er.epoch = epoch + 1;
  er.seconds = e_train;
  er.samples_per_s = (pg_ ? pg_->size() : 1) * static_cast<double>(e.samples) / std::max(e_train, 1e-9);
  er.train_loss = e.micro > 0 ? e.loss / static_cast<double>(e.micro) : 0;
  er.train_acc = e.samples > 0 ? 100.0 * e.correct / static_cast<double>(e.samples) : 0;
  er.lr = current_lr();
  if (splits_.val) er.val_acc = evaluate(val_dev_ ? val_dev_ : splits_.val).accuracy;
  EvalResult test = evaluate(test_dev_ ? test_dev_ : splits_.test);
  er.test_acc = test.accuracy;
  r.final_test = test;
  r.samples += e.samples;
  if (test.accuracy > r.best_test_acc || r.epochs.empty()) {
    r.best_test_acc = test.accuracy;
    r.time_to_best = now_s() - run_start_;
  }
  r.epochs.push_back(er);
  logs_->epoch(er);
  return o_.save.empty() || save_epoch(e, epoch, r);
}

// The epoch's checkpoint; false (and r.error) when the weights hold NaN or inf.
bool Trainer::save_epoch(const EpochStats& e, int epoch, RunResult& r) {
  // never a non-finite checkpoint: fewer than --max-nonfinite-steps bad steps may have ended the
  // epoch (the weights are read to the host for the save anyway)
  if (const std::string bad = nonfinite_weight(); !bad.empty()) {
    r.error = str("training diverged: weight '", bad, "' holds NaN or inf after epoch ", epoch + 1, " (step ",
                  global_step_, "); not saving it to ", o_.save, "; try a lower --lr or --clip-grad");
    return false;
  }
  // A checkpoint marks a finished epoch (resume starts the next one); a --max-steps stop in the
  // middle of an epoch would otherwise be resumed as if the rest of that epoch had run.
  if (e.micro == micro_per_epoch_) save_checkpoint(epoch + 1, global_step_);
  else
    r.notes.push_back(str("--max-steps stopped epoch ", epoch + 1, " after ", e.micro, " of ", micro_per_epoch_,
                          " micro-batches: no checkpoint for the partial epoch (", o_.save,
                          epoch > start_epoch_ ? " holds the last finished one)" : " was not written)"));
  return true;
}

// The run's totals, the profile and the summary record.
void Trainer::finish_run(RunResult& r) {
  if (r.epochs.empty() && r.error.empty() &&
      !stop_requested()) {  // resumed at or past --epochs: report the loaded model
    r.final_test = evaluate(test_dev_ ? test_dev_ : splits_.test);
    r.best_test_acc = r.final_test.accuracy;
    r.notes.push_back(str("the checkpoint is at epoch ", start_epoch_, " of ", o_.epochs,
                          ": nothing left to train (raise --epochs to continue)"));
  }
  if (o_.sync_debug) runtime::set_sync_debug(runtime::SyncDebug::off);
  r.steps = global_step_;
  r.train_seconds = train_total_;
  r.samples_per_s = (pg_ ? pg_->size() : 1) * static_cast<double>(r.samples) / std::max(train_total_, 1e-9);
  r.data_wait_fraction = train_total_ > 0 ? wait_total_ / train_total_ : 0;
  if (device_.is_cuda() && gpu_busy_ms_ + gpu_idle_ms_ > 0)
    r.gpu_idle_fraction = gpu_idle_ms_ / (gpu_busy_ms_ + gpu_idle_ms_);
  if (scaler_) r.skipped_steps = scaler_->skipped_steps();
  if (r.interrupted_by == 0 && stop_requested()) r.interrupted_by = stop_signal() != 0 ? stop_signal() : SIGTERM;
  if (profile_) profile_->write(o_.profile);
  r.total_seconds = now_s() - run_start_;
  logs_->summary(r);
}

}  // namespace mnist
