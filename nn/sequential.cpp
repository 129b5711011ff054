#include "nn/sequential.h"

#include <typeinfo>

#include "kernels/functional.h"
#include "kernels/ops/mlp.h"  // kMlpMaxLayers
#include "nn/adaptive_avg_pool2d.h"
#include "nn/batch_norm2d.h"
#include "nn/conv2d.h"
#include "nn/linear.h"
#include "nn/max_pool2d.h"
#include "nn/relu.h"

namespace ember::nn {

void SequentialImpl::push_back(const std::string& name, std::shared_ptr<Module> m) {
  add_child(name, m);
  items_.push_back(std::move(m));
}

namespace {

// m is of exactly type M (not a subclass, whose forward may differ).
template <class M>
M* exactly(const std::shared_ptr<Module>& m) {
  const Module& ref = *m;
  return typeid(ref) == typeid(M) ? static_cast<M*>(m.get()) : nullptr;
}

}  // namespace

// The Linear/ReLU stack that starts at item i (Note [fused MLP stacks]): its layers' weights,
// biases and relu bits, and the items it spans; none (items 0) where fewer than two Linears follow
// each other there.
struct SequentialImpl::Stack {
  std::vector<Tensor> weights, biases;
  uint64_t relu_mask = 0;
  size_t items = 0;
};

SequentialImpl::Stack SequentialImpl::stack_at(size_t i, size_t end) const {
  Stack s;
  size_t j = i;
  while (j < end && s.weights.size() < static_cast<size_t>(kMlpMaxLayers)) {
    const LinearImpl* lin = exactly<LinearImpl>(items_[j]);
    if (lin == nullptr) break;
    s.weights.push_back(lin->weight);
    s.biases.push_back(lin->bias);
    ++j;
    if (j < end && exactly<ReLUImpl>(items_[j]) != nullptr) {
      s.relu_mask |= uint64_t{1} << (s.weights.size() - 1);
      ++j;
    }
  }
  if (s.weights.size() >= 2) s.items = j - i;
  return s;
}

namespace {

// A pooling that runs as one op with the layer before it (Note [fused layer and max pooling]): a
// MaxPool2d after a Conv2d or BatchNorm2d, an AdaptiveAvgPool2d to 1x1 after a BatchNorm2d.
bool pools_into(const std::shared_ptr<Module>& layer, const std::shared_ptr<Module>& pool) {
  const bool bn = exactly<BatchNorm2dImpl>(layer) != nullptr;
  if (exactly<MaxPool2dImpl>(pool) != nullptr) return bn || exactly<Conv2dImpl>(layer) != nullptr;
  const AdaptiveAvgPool2dImpl* avg = exactly<AdaptiveAvgPool2dImpl>(pool);
  return bn && avg != nullptr && avg->options.output_size() == ExpandingArray2{1, 1};
}

bool is_pool(const std::shared_ptr<Module>& m) {
  return exactly<MaxPool2dImpl>(m) != nullptr || exactly<AdaptiveAvgPool2dImpl>(m) != nullptr;
}

// pool(layer(y)), with relu between them when `relu`, as one op (pools_into(layer, pool)).
Tensor forward_pooled(const std::shared_ptr<Module>& layer, const Tensor& y, const std::shared_ptr<Module>& pool,
                      bool relu) {
  auto* bn = exactly<BatchNorm2dImpl>(layer);
  const MaxPool2dImpl* max = exactly<MaxPool2dImpl>(pool);
  if (max == nullptr) return bn->forward_global_avg_pooled(y, relu);
  const MaxPool2dOptions& o = max->options;
  if (bn != nullptr) return bn->forward_max_pooled(y, o.kernel_size(), o.stride(), o.padding(), relu);
  return exactly<Conv2dImpl>(layer)->forward_max_pooled(y, o.kernel_size(), o.stride(), o.padding(), relu);
}

}  // namespace

// The pooling that follows the layer at item i, directly or after a ReLU, and runs as one op with it
// (pools_into; Note [fused layer and max pooling]): its item, or 0 where there is none.
size_t SequentialImpl::pool_after_layer(size_t i, size_t end, bool& relu) const {
  size_t j = i + 1;
  relu = j < end && exactly<ReLUImpl>(items_[j]) != nullptr;
  if (relu) ++j;
  return j < end && pools_into(items_[i], items_[j]) ? j : 0;
}

bool SequentialImpl::run_block_pooled(SequentialImpl& block, Tensor& y, const std::shared_ptr<Module>& pool) const {
  if (!block.fuse_activations || block.empty()) return false;
  const size_t last = block.size() - 1;
  const bool relu = exactly<ReLUImpl>(block.items_[last]) != nullptr;
  const size_t tail = relu ? last : last + 1;                                // the block's ReLU, or its end
  if (fuse_pool && tail >= 1 && pools_into(block.items_[tail - 1], pool)) {  // Note [fused layer and max pooling]
    y = forward_pooled(block.items_[tail - 1], block.run_items(y, tail - 1), pool, relu);
    return true;
  }
  const MaxPool2dImpl* max = exactly<MaxPool2dImpl>(pool);
  if (!relu || max == nullptr) return false;
  const MaxPool2dOptions& o = max->options;
  y = relu_max_pool2d(block.run_items(y, last), o.kernel_size(), o.stride(),
                      o.padding());  // Note [relu after max pooling]
  return true;
}

Tensor SequentialImpl::forward(const Tensor& x) { return run_items(x, items_.size()); }

Tensor SequentialImpl::run_items(const Tensor& x, size_t end) {
  Tensor y = x;
  for (size_t i = 0; i < end; ++i) {
    if (fuse_activations && fuse_mlp) {
      Stack s = stack_at(i, end);
      if (s.items > 0) {  // Note [fused MLP stacks]
        y = mlp(y, s.weights, s.biases, s.relu_mask);
        i += s.items - 1;
        continue;
      }
    }
    bool relu = false;
    if (const size_t j = fuse_activations && fuse_pool ? pool_after_layer(i, end, relu) : 0; j > 0) {
      y = forward_pooled(items_[i], y, items_[j], relu);  // Note [fused layer and max pooling]
      i = j;
      continue;
    }
    if (fuse_activations && i + 1 < end) {
      const LinearImpl* lin = exactly<LinearImpl>(items_[i]);
      if (lin != nullptr && exactly<ReLUImpl>(items_[i + 1]) != nullptr) {  // Note [fused activations]
        y = linear(y, lin->weight, lin->bias, Activation::relu);
        ++i;
        continue;
      }
      if (is_pool(items_[i + 1])) {
        SequentialImpl* block = exactly<SequentialImpl>(items_[i]);
        if (block != nullptr && run_block_pooled(*block, y, items_[i + 1])) {
          ++i;
          continue;
        }
      }
      if (const MaxPool2dImpl* pool = exactly<MaxPool2dImpl>(items_[i + 1]);
          pool != nullptr && exactly<ReLUImpl>(items_[i]) != nullptr) {  // Note [relu after max pooling]
        const MaxPool2dOptions& o = pool->options;
        y = relu_max_pool2d(y, o.kernel_size(), o.stride(), o.padding());
        ++i;
        continue;
      }
    }
    y = items_[i]->forward(y);
  }
  return y;
}

const std::shared_ptr<Module>& SequentialImpl::operator[](size_t i) const {
  EMBER_CHECK(i < items_.size(), "Sequential: index ", i, " out of range (", items_.size(), " modules)");
  return items_[i];
}

}  // namespace ember::nn
