#include "nn/sequential.h"

#include <typeinfo>

#include "kernels/functional.h"
#include "nn/linear.h"
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

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (fuse_activations && i + 1 < items_.size()) {
      const LinearImpl* lin = exactly<LinearImpl>(items_[i]);
      if (lin != nullptr && exactly<ReLUImpl>(items_[i + 1]) != nullptr) {  // Note [fused activations]
        y = linear(y, lin->weight, lin->bias, Activation::relu);
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
