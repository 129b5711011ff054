// Activation checkpointing: trade compute for memory.
//
// checkpoint(fn, inputs) runs fn without recording its graph, so none of the activations inside
// the segment stay alive after forward; only the inputs are kept. In backward, fn runs again
// (with the random-number state of the forward, so dropout draws the same mask, and the same
// autocast state) and the gradients flow through the recomputed graph: into the inputs, and
// directly into the .grad of every parameter fn uses (as PyTorch's reentrant checkpoint). Peak
// memory drops from "every activation of every segment" to "the segment inputs plus one
// segment's activations"; the price is one more forward per segment.
//
// The result of checkpoint is part of the graph whenever grad mode is on (even when no input
// requires grad: the segment's parameters may), so a checkpointed first layer still trains.
// Like PyTorch's reentrant form, it supports backward() (not autograd::grad() into the
// parameters of the segment).
#pragma once

#include <functional>
#include <vector>

#include "nn/module.h"

namespace ember::nn {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs, bool preserve_rng_state = true);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, bool preserve_rng_state = true);

// A module wrapper: forward runs the wrapped module under checkpoint() while training with grad
// mode on, and plainly otherwise. The wrapped module is child "module" (so state_dict names gain a
// "module." prefix).
class CheckpointImpl : public Module {
 public:
  explicit CheckpointImpl(std::shared_ptr<Module> module);
  template <class H, std::enable_if_t<std::is_base_of_v<ModuleHolderBase, H>, int> = 0>
  explicit CheckpointImpl(const H& holder) : CheckpointImpl(std::static_pointer_cast<Module>(holder.ptr())) {}
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> module;
};
EMBER_MODULE(Checkpoint);

}  // namespace ember::nn
