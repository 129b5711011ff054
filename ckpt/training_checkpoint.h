// A full training checkpoint in one safetensors file: model weights, optimizer state, scheduler,
// any other Stateful component (the loss scaler of amp/), the default generator's RNG state and the
// epoch/step counters. Resuming from it continues training with bitwise-identical results on the
// CPU (same program, same thread count).
//
//   TrainingCheckpoint ckpt;
//   ckpt.model(*net).optimizer(opt).scheduler(sched);      // .add("scaler", scaler) when present
//   ckpt.save("run/last.safetensors", {epoch, step});      // atomic: a crash keeps the old file
//   ...
//   TrainingProgress p = ckpt.load("run/last.safetensors"); // restores everything, returns epoch/step
//
// File layout: tensors "model.<name>", "optimizer.state.<k>.<name>", "<component>.<name>";
// metadata "ember.checkpoint" = "training/1", "progress.epoch", "progress.step", "rng.seed",
// "rng.offset" (decimal), and each component's metadata under its prefix ("optimizer.param_groups",
// "scheduler.last_epoch", ...). The model part loads in PyTorch after stripping "model.".
#pragma once

#include <string>
#include <vector>

#include "io/state_dict.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace ember {

struct TrainingProgress {
  int64_t epoch = 0;
  int64_t step = 0;
};

class TrainingCheckpoint {
 public:
  TrainingCheckpoint& model(nn::Module& m, const std::string& name = "model");
  TrainingCheckpoint& optimizer(optim::Optimizer& o, const std::string& name = "optimizer");
  TrainingCheckpoint& scheduler(optim::LRScheduler& s, const std::string& name = "scheduler");
  // Any other component (e.g. the gradient scaler).
  TrainingCheckpoint& add(const std::string& name, Stateful& component);

  // Everything as one state (what save() writes).
  StateDict collect(const TrainingProgress& progress) const;
  void save(const std::string& path, const TrainingProgress& progress) const;
  // Restores every registered component and the RNG state; returns the saved progress.
  // strict applies to the model's keys (see Module::load_state_dict).
  TrainingProgress restore(const StateDict& state, bool strict = true);
  TrainingProgress load(const std::string& path, bool strict = true);

 private:
  struct Entry {
    std::string name;
    nn::Module* module = nullptr;
    Stateful* stateful = nullptr;
  };
  void add_entry(Entry e);
  std::vector<Entry> entries_;
};

}  // namespace ember
