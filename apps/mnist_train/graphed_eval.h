// --graph with --device-resident: evaluation as a CUDA graph too. A pass over a resident split
// (the validation or the test set, already on the GPU as uint8) is a fixed sequence of kernels on
// fixed buffers: slices of the resident images normalised, the forward pass, argmax, and the
// (label, prediction) cells counted into a confusion table on the device. The first pass over a
// split runs eagerly (it warms the kernels up: --autotune tunes them at the evaluation's batch
// size, which no capture may do), the second is captured and replayed, every later one replayed:
// one launch per evaluation instead of about ten per batch. The model's weights are read in place,
// so a replay sees the latest ones. A capture that fails leaves that split eager, with a note.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/graph.h"
#include "core/tensor.h"

namespace mnist {

class GraphedEval {
 public:
  // The confusion counts of one pass over the split `key` (i64 [classes^2] on the device): `pass`
  // queues the pass's work on the current stream and returns its counts. Eager, captured or
  // replayed as the header says.
  ember::Tensor counts(const void* key, ember::Device device, const std::function<ember::Tensor()>& pass);
  // Passes replayed from a graph so far, and the notes of failed captures (for the summary).
  int64_t replays() const { return replays_; }
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  struct Split {
    int64_t passes = 0;
    bool failed = false;
    std::unique_ptr<ember::cuda::Graph> graph;
    ember::Tensor counts;  // the captured pass's output, in the graph's pool
  };
  std::map<const void*, Split> splits_;
  int64_t replays_ = 0;
  std::vector<std::string> notes_;
};

}  // namespace mnist
