// AdamW (torch.optim.AdamW): Adam with decoupled weight decay, p *= 1 - lr * weight_decay before
// the Adam update (default weight_decay 1e-2); amsgrad optional. Same state as Adam.
#pragma once

#include "optim/adam.h"

namespace ember::optim {

struct AdamWOptions : AdamOptions {
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay(1e-2); }
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamWOptions>(*this); }
};

class AdamW : public AdamBase {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& defaults = AdamWOptions());
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults = AdamWOptions());
  std::string name() const override { return "AdamW"; }
};

}  // namespace ember::optim
