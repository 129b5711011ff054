#include "nn/sequential.h"

namespace ember::nn {

void SequentialImpl::push_back(const std::string& name, std::shared_ptr<Module> m) {
  add_child(name, m);
  items_.push_back(std::move(m));
}

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : items_) y = m->forward(y);
  return y;
}

const std::shared_ptr<Module>& SequentialImpl::operator[](size_t i) const {
  EMBER_CHECK(i < items_.size(), "Sequential: index ", i, " out of range (", items_.size(), " modules)");
  return items_[i];
}

}  // namespace ember::nn
