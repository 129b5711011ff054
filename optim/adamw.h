// AdamW (torch.optim.AdamW): Adam with decoupled weight decay, p *= 1 - lr * weight_decay before
// the Adam update (default weight_decay 1e-2); amsgrad optional. Same state as Adam.
#pragma once

#include "optim/adam.h"

namespace ember::optim {

struct AdamWOptions : AdamOptions {
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay(1e-2); }
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamWOptions>(*this); }
};

// (The options type is AdamOptions so that AdamWOptions(1e-3).eps(1e-6), whose chained setters
// return AdamOptions&, is accepted; AdamWOptions only changes the weight decay default.)
class AdamW : public AdamBase {
 public:
  AdamW(std::vector<Tensor> params, const AdamOptions& defaults = AdamWOptions());
  AdamW(std::vector<ParamGroup> groups, const AdamOptions& defaults = AdamWOptions());
};

}  // namespace ember::optim
