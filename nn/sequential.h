// Sequential: runs its modules in order, feeding each one's output to the next. Children are named
// "0", "1", ... (or the names given to push_back).
//
//   nn::Sequential net(nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10));
//   Tensor logits = net(x);
#pragma once

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
  std::vector<std::shared_ptr<Module>> items_;
};
EMBER_MODULE(Sequential);

}  // namespace ember::nn
