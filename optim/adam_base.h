// The step shared by Adam and AdamW (they differ in the weight decay only): one adam_step op per
// (group, device, dtype). Group options must be AdamOptions (or AdamWOptions).
#pragma once

#include "optim/optimizer.h"

namespace ember::optim {

class AdamBase : public Optimizer {
 public:
  using Optimizer::step;
  void step(const GradScaling& scaling) override;

 protected:
  AdamBase(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults, bool decoupled,
           std::string name);
  std::vector<double> hyper_values(const OptimizerOptions& o) const override;
  std::vector<std::string> state_names(const OptimizerOptions& o) const override;

 private:
  bool decoupled_;
};

}  // namespace ember::optim
