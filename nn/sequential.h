// Sequential: runs its modules in order, feeding each one's output to the next. Children are named
// "0", "1", ... (or the names given to push_back).
//
//   nn::Sequential net(nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10));
//   Tensor logits = net(x);
//
// Note [fused activations]: a Linear directly followed by a ReLU runs as one linear call with the
// relu fused (its epilogue; the backward applies the mask as it loads the gradient, Note [fused
// linear backward] in kernels/ops/linear.cu). The result is the two ops' bit for bit where the
// same GEMM kernel runs (autotune tunes the fused call apart from the plain one): relu commutes
// with rounding, and the mask y > 0 of the fused output is the mask of the separate relu. What
// changes is the launches: a relu layer's forward and backward each lose the elementwise one, and
// no pre-activation is kept for the backward. Only a module of exactly the Linear and ReLU types
// is fused (a subclass may do something else in forward). GELU is not: linear's gelu backward
// recomputes the pre-activation, a GEMM more for the launch it saves. A ReLU directly followed by a
// MaxPool2d runs as one max_pool2d with the relu (Note [relu after max pooling] in
// kernels/ops/pool.h): the same values and gradients, the relu on the pooled tensor and no launch
// of its own either way; also where the ReLU ends a nested Sequential (a conv block, as
// mnist_train's fast model) and the MaxPool2d follows it, when both fuse. fuse_activations = false
// runs every module on its own (mnist_train --no-fuse-activations, the ablation's baseline).
//
// Note [fused MLP stacks]: with fuse_activations, two or more Linears in a row, each followed by a
// ReLU or not (exactly those types, up to kMlpMaxLayers), run as one mlp op (kernels/ops/mlp.*):
// on CUDA one launch each way where every layer is at most 128 wide (Note [fused
// MLP] in kernels/ops/mlp.cu), the layers' own ops elsewhere, with the same values. The op keeps
// the hidden layers' outputs, which the layers would have kept anyway. fuse_mlp = false runs the
// stack layer by layer (mnist_train --no-fuse-mlp).
//
// Note [fused layer and max pooling]: with fuse_activations, a Conv2d or BatchNorm2d followed by a
// MaxPool2d, directly or after a ReLU (exactly those types), runs as one conv2d_max_pool2d or
// batch_norm_max_pool2d (Note [max pooling in the conv backward] in kernels/ops/conv2d.h, Note [max
// pooling in the batch norm backward] in kernels/ops/batch_norm.h), and a BatchNorm2d followed by
// an AdaptiveAvgPool2d to 1x1, the same way, as one batch_norm_global_avg_pool2d (Note [global
// average pooling in the batch norm backward]): the same values and gradients; CUDA's kernels pool
// the layer's output before storing it and read the pooled gradient in the backward, so neither
// the layer-sized output nor its gradient reaches memory. Also where the layer (and its ReLU) ends
// a nested Sequential and the pooling follows it (mnist_train's fast model: conv, batch norm, relu
// blocks). fuse_pool = false leaves the layer on its own and the ReLU in a max pool (mnist_train
// --no-fuse-pool).
#pragma once

#include "nn/max_pool2d.h"
#include "nn/module.h"

namespace ember::nn {

class SequentialImpl : public Module {
 public:
  SequentialImpl() : Module("Sequential") {}
  template <class First, class... Rest, std::enable_if_t<!std::is_same_v<std::decay_t<First>, SequentialImpl>, int> = 0>
  explicit SequentialImpl(First&& first, Rest&&... rest) : Module("Sequential") {
    push_back(std::forward<First>(first));
    (push_back(std::forward<Rest>(rest)), ...);
  }

  void push_back(std::shared_ptr<Module> m) { push_back(std::to_string(items_.size()), std::move(m)); }
  void push_back(const std::string& name, std::shared_ptr<Module> m);
  template <class H, std::enable_if_t<std::is_base_of_v<ModuleHolderBase, H>, int> = 0>
  void push_back(const H& holder) {
    push_back(std::static_pointer_cast<Module>(holder.ptr()));
  }
  template <class H, std::enable_if_t<std::is_base_of_v<ModuleHolderBase, H>, int> = 0>
  void push_back(const std::string& name, const H& holder) {
    push_back(name, std::static_pointer_cast<Module>(holder.ptr()));
  }
  template <class M, std::enable_if_t<std::is_base_of_v<Module, M> && !std::is_same_v<M, Module>, int> = 0>
  void push_back(std::shared_ptr<M> m) {
    push_back(std::static_pointer_cast<Module>(std::move(m)));
  }

  Tensor forward(const Tensor& x) override;

  bool fuse_activations = true;  // Note [fused activations]
  bool fuse_mlp = true;          // Note [fused MLP stacks]; only with fuse_activations
  bool fuse_pool = true;         // Note [fused layer and max pooling]; only with fuse_activations

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // Replaces the registered child and the layer forward() runs (convert_sync_batchnorm).
  std::shared_ptr<Module> replace_module(const std::string& name, std::shared_ptr<Module> m) override {
    std::shared_ptr<Module> old = Module::replace_module(name, m);
    for (auto& item : items_)
      if (item == old) item = m;
    return old;
  }
  // The i-th module as its concrete type (an error if it is another type).
  template <class M>
  M& at(size_t i) const {
    auto* p = dynamic_cast<M*>((*this)[i].get());
    EMBER_CHECK(p != nullptr, "Sequential: module ", i, " is a ", (*this)[i]->type_name(), ", not the requested type");
    return *p;
  }

 private:
  struct Stack;
  Stack stack_at(size_t i, size_t end) const;  // within items [i, end)
  size_t pool_after_layer(size_t i, size_t end, bool& relu) const;
  // block's forward followed by the pooling module `pool`, fused where block ends with a layer that
  // pools (pools_into), a ReLU or both (y in, the pooled output out); false (y untouched) where
  // nothing fuses.
  bool run_block_pooled(SequentialImpl& block, Tensor& y, const std::shared_ptr<Module>& pool) const;
  // Items [0, end) on x, fused as forward() fuses them.
  Tensor run_items(const Tensor& x, size_t end);
  std::vector<std::shared_ptr<Module>> items_;
};
EMBER_MODULE(Sequential);

}  // namespace ember::nn
