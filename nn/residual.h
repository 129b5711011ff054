// Residual: y = body(x) + shortcut(x), the shortcut being the identity unless given (e.g. a 1x1
// convolution that matches channels). Submodules are named "body" and "shortcut".
//
//   nn::Residual block(nn::Sequential(nn::Linear(64, 64), nn::ReLU(), nn::Linear(64, 64)));
#pragma once

#include "nn/module.h"

namespace ember::nn {

class ResidualImpl : public Module {
 public:
  explicit ResidualImpl(std::shared_ptr<Module> body, std::shared_ptr<Module> shortcut = nullptr);
  template <class B, std::enable_if_t<std::is_base_of_v<ModuleHolderBase, B>, int> = 0>
  explicit ResidualImpl(const B& body) : ResidualImpl(std::static_pointer_cast<Module>(body.ptr())) {}
  template <class B, class S,
            std::enable_if_t<std::is_base_of_v<ModuleHolderBase, B> && std::is_base_of_v<ModuleHolderBase, S>, int> = 0>
  ResidualImpl(const B& body, const S& shortcut)
      : ResidualImpl(std::static_pointer_cast<Module>(body.ptr()), std::static_pointer_cast<Module>(shortcut.ptr())) {}

  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Module> body, shortcut;
};
EMBER_MODULE(Residual);

}  // namespace ember::nn
