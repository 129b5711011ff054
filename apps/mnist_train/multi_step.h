// --graph: many optimizer steps per graph launch. Once the one-step graph is captured (the process
// is warm), each run of K consecutive full steps that ends at or before the next log line, the end
// of the epoch or --max-steps is one replay of a graph of K steps. Its K batches are staged first,
// into static device buffers the graph reads (the trainer's stage_batches):
//   --device-resident  the loader hands over the K batches' dataset indices (one device copy);
//                      step j gathers and normalises its batch from them as the loader would;
//   the host loader    the K batches the loader copied to the device are copied into one buffer
//                      (everything after the host-to-device copy is in the graph).
// Step j then runs the same forward, loss, backward and optimizer step, reading row j of the
// optimizer's hyperparameter table, which the host fills from the schedule before the replay
// (Note [hyperparameter rows] in optim/optimizer.h). Same kernels in the same order as K one-step
// replays: the losses and weights are the same, bit for bit. The host reads the device once per
// log line. One graph per K: a run has a few (the log interval; the first, shorter one after the
// warm-up; an epoch's tail; --max-steps' tail). A capture that fails leaves the run on one-step
// graphs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/graph.h"
#include "core/tensor.h"

namespace mnist {

class MultiStepGraphs {
 public:
  struct Hooks {
    // Step j of the launch: one optimizer step on the j-th staged batch.
    std::function<void(int64_t j)> step;
    // The hyperparameter row the steps that follow read (-1: the optimizer's single tensor).
    std::function<void(int64_t row)> use_row;
    // The first thing inside a capture (gradients set to none, allocated in the graph's pool).
    std::function<void()> capture_start;
    // After a failed capture: what it left to undo (the loss scaler's step, the gradients).
    std::function<void()> after_failure;
  };

  MultiStepGraphs(ember::Device device, int64_t max_steps);

  int64_t max_steps() const { return max_steps_; }
  bool failed() const { return failed_; }
  // Runs the K steps whose batches are staged and whose hyperparameter rows are uploaded: replays
  // the graph of K steps, capturing it first if there is none. A failed capture runs them eagerly
  // (nothing is lost but time) and sets failed(): the caller then keeps to one step per launch and
  // calls run no more.
  void run(int64_t k, const Hooks& hooks);
  // Optimizer steps run by replays of K-step graphs, and the replays.
  int64_t steps() const { return steps_; }
  int64_t launches() const { return launches_; }
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  bool capture(int64_t k, const Hooks& hooks);
  void steps_of(int64_t k, const Hooks& hooks);

  ember::Device device_;
  int64_t max_steps_;
  std::map<int64_t, std::unique_ptr<ember::cuda::Graph>> graphs_;
  bool failed_ = false;
  int64_t steps_ = 0, launches_ = 0;
  std::vector<std::string> notes_;
};

}  // namespace mnist
