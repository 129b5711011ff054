// --graph: the training step as a CUDA graph. The step of an optimizer step is captured once this
// process is warm and replayed for every later one; a capture that fails leaves the run eager, and
// the batch it was for is trained eagerly, so nothing is lost but time.
//
// Warm means kWarmup optimizer steps of this process, a resumed run too: they tune the kernels
// (--autotune, cuDNN's benchmark mode), make the optimizer's state and the pinned buffers, and let
// DDP rebuild its buckets, none of which may happen inside a capture.
#pragma once

#include <functional>
#include <memory>

#include "core/cuda/graph.h"
#include "core/tensor.h"

namespace mnist {

class GraphedStep {
 public:
  static constexpr int64_t kWarmup = 3;

  // What the step is, told by the trainer.
  struct Hooks {
    // The eager step of an optimizer step: forward, loss, backward, optimizer (and what it
    // accumulates for the log). Captured once, then replayed.
    std::function<void(const ember::Tensor& x, const ember::Tensor& y)> step;
    // Before the capture: what must be on the device first (the optimizer's hyper-parameters).
    std::function<void()> before_capture;
    // The first thing inside the capture (gradients set to none, so that the step allocates them
    // in the graph's pool).
    std::function<void()> capture_start;
    // After a failed capture: what it left to undo (gradients allocated in the capture, the loss
    // scaler's step).
    std::function<void()> after_failure;
    // Launches the graph (DDP times the collectives of a replay; nullptr: replay it).
    std::function<void(ember::cuda::Graph&)> launch;
  };
  enum class Outcome { eager, captured, capture_failed, replayed };

  GraphedStep(ember::Device device, bool wanted) : device_(device), wanted_(wanted) {}

  // Runs one optimizer step's batch: eagerly while warming up (and for good after a failed
  // capture), by capturing and replaying it once warm, by replaying it after.
  Outcome run(const ember::Tensor& x, const ember::Tensor& y, int64_t steps_here, const Hooks& hooks);
  // True inside the capture: the step is recorded, not run (no host reads).
  bool capturing() const { return capturing_; }
  bool captured() const { return graph_ != nullptr; }
  // Whether the steps to come run as they will for the rest of the run: replayed, or eager for
  // good (not wanted, or the capture failed).
  bool settled() const { return graph_ != nullptr || !wanted_ || failed_; }

 private:
  bool capture(const ember::Tensor& x, const ember::Tensor& y, const Hooks& hooks);
  void replay(const ember::Tensor& x, const ember::Tensor& y, const Hooks& hooks);

  ember::Device device_;
  bool wanted_;
  bool failed_ = false;
  bool capturing_ = false;
  std::unique_ptr<ember::cuda::Graph> graph_;
  ember::Tensor static_x_, static_y_;  // the graph's inputs: each batch is copied into them
};

}  // namespace mnist
