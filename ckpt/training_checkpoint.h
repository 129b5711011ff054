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
// "scheduler.last_epoch", ...), and what the program recorded about its run under "run." (info()).
// The model part loads in PyTorch after stripping "model.".
//
// Note [checkpoints mean what they say]: restore() checks meaning, not just form, before anything
// is applied, with one-line errors naming the tensor or field: a model tensor whose dtype differs
// from the model's (never cast silently), non-finite (NaN/inf) model weights, negative counters,
// optimizer state missing in whole after step 0 (as one missing tensor is already an error), and
// (in Optimizer::load_state_dict) non-finite optimizer state or negative second moments.
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
  Metadata run;  // on load: the "run." entries (without the prefix) the saving program recorded
};

// Checks that `state` can be loaded into `m` without changing its meaning: every tensor that the
// module also has must have the module's dtype, and floating tensors must be finite. Errors name
// the tensor as "<prefix><name>" and start with `where`.
void check_module_state(const TensorDict& state, const nn::Module& m, const std::string& prefix,
                        const std::string& where);

class TrainingCheckpoint {
 public:
  TrainingCheckpoint& model(nn::Module& m, const std::string& name = "model");
  TrainingCheckpoint& optimizer(optim::Optimizer& o, const std::string& name = "optimizer");
  TrainingCheckpoint& scheduler(optim::LRScheduler& s, const std::string& name = "scheduler");
  // Any other component (e.g. the gradient scaler).
  TrainingCheckpoint& add(const std::string& name, Stateful& component);
  // Facts about the run saved as "run.<key>" metadata (flags, for a resume to compare).
  TrainingCheckpoint& info(const Metadata& run_info);

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
  Metadata info_;
};

}  // namespace ember
