// A full training checkpoint (model, optimizer, scheduler, extra components, RNG, progress)
// resumes training with bitwise-identical results on the CPU.
#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

#include "ckpt/training_checkpoint.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "kernels/functional.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

namespace {

std::string scratch(const std::string& name) {
  static std::string dir = [] {
    std::string d = std::string(EMBER_BINARY_DIR) + "/test_training_checkpoint." + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir + "/" + name;
}

// A stand-in for the loss scaler of amp/: some tensor state and some metadata.
struct Counter : Stateful {
  Tensor scale = full({1}, 65536.0);
  int64_t growth = 0;
  StateDict state_dict() const override {
    StateDict s;
    s.tensors.insert("scale", scale);
    s.metadata["growth"] = std::to_string(growth);
    return s;
  }
  void load_state_dict(const StateDict& s) override {
    scale.copy_(s.tensors.at("scale"));
    growth = std::stoll(s.metadata.at("growth"));
  }
};

struct Run {
  nn::Sequential model;
  std::unique_ptr<optim::AdamW> opt;
  std::shared_ptr<optim::LinearLR> warm;
  std::shared_ptr<optim::CosineAnnealingLR> cosine;
  std::unique_ptr<optim::SequentialLR> sched;
  Counter counter;
  TrainingCheckpoint ckpt;

  explicit Run(uint64_t seed) {
    manual_seed(seed);
    model = nn::Sequential(nn::Linear(8, 32), nn::GELU(), nn::Dropout(0.2), nn::Linear(32, 32), nn::ReLU(),
                           nn::Linear(32, 2));
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions(1e-2).amsgrad(true));
    warm = std::make_shared<optim::LinearLR>(*opt, 0.1, 1.0, 3);
    cosine = std::make_shared<optim::CosineAnnealingLR>(*opt, 20);
    sched = std::make_unique<optim::SequentialLR>(*opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warm, cosine},
                                                  std::vector<int64_t>{3});
    ckpt.model(*model).optimizer(*opt).scheduler(*sched).add("scaler", counter);
  }

  // One step: fresh random data and a dropout mask (the RNG state matters), forward, backward,
  // clip, step, schedule.
  double step() {
    Tensor x = randn({16, 8});
    Tensor y = cat({sum(x, {1}, true), mean(mul(x, x), {1}, true)}, 1);
    Tensor d = sub(model(x), y);
    Tensor loss = mean(mul(d, d));
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt->step();
    opt->zero_grad();
    sched->step();
    counter.growth += 1;
    return loss.item();
  }
};

}  // namespace

TEST_CASE("training checkpoint resumes bit-identically on the CPU", "[checkpoint][resume]") {
  const int total = 12, split = 5;
  Run a(42);
  std::vector<double> losses_a;
  for (int i = 0; i < total; ++i) losses_a.push_back(a.step());

  Run b(42);
  std::vector<double> losses_b;
  for (int i = 0; i < split; ++i) losses_b.push_back(b.step());
  const std::string path = scratch("resume.safetensors");
  b.ckpt.save(path, {1, split});

  // A different process state: other seed, other initial weights, and random numbers drawn since.
  Run c(7);
  randn({1000});
  TrainingProgress p = c.ckpt.load(path);
  CHECK(p.epoch == 1);
  CHECK(p.step == split);
  CHECK(c.counter.growth == split);
  CHECK(c.sched->last_epoch() == split);
  for (int i = split; i < total; ++i) losses_b.push_back(c.step());

  CHECK(losses_a == losses_b);
  auto pa = a.model->named_parameters(), pc = c.model->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa.items()[i].first);
    CHECK(pa.items()[i].second.to_vector<float>() == pc.items()[i].second.to_vector<float>());
    const TensorDict& sa = a.opt->state(pa.items()[i].second);
    const TensorDict& sc = c.opt->state(pc.items()[i].second);
    for (const auto& [name, t] : sa) CHECK(t.to_vector<float>() == sc.at(name).to_vector<float>());
  }
  CHECK(a.opt->param_groups()[0].options().get_lr() == c.opt->param_groups()[0].options().get_lr());
  CHECK(default_generator().offset() > 0);

  // The file is a plain safetensors file: the model part is loadable on its own.
  io::SafetensorsFile f = io::load_safetensors(path);
  CHECK(f.metadata.at("ember.checkpoint") == "training/1");
  CHECK(f.tensors.contains("model.0.weight"));
  CHECK(f.tensors.contains("optimizer.state.0.max_exp_avg_sq"));
  CHECK(f.metadata.count("optimizer.param_groups") == 1);
  CHECK(f.metadata.at("scheduler.scheduler") == "SequentialLR");

  // Bad checkpoints name the problem.
  TrainingCheckpoint other;
  nn::Linear lin(nn::LinearOptions(2, 2));
  Counter extra;
  other.model(*lin).add("ema", extra);
  CHECK_THROWS_WITH(other.load(path), Catch::Contains("no state for component 'ema'"));
  io::save_safetensors(path + ".plain", lin->state_dict());
  TrainingCheckpoint just_model;
  just_model.model(*lin);
  CHECK_THROWS_WITH(just_model.load(path + ".plain"), Catch::Contains("not an ember training checkpoint"));
  CHECK_THROWS_WITH(TrainingCheckpoint().model(*lin).model(*lin), Catch::Contains("added twice"));
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}
