// LR schedulers with PyTorch's exact formulas and stepping semantics (torch.optim.lr_scheduler).
//
//   optim::SGD opt(params, optim::SGDOptions(0.1));
//   optim::CosineAnnealingLR sched(opt, /*T_max=*/100);
//   for (epoch ...) { train(); sched.step(); }        // lr follows the schedule
//
// Construction performs PyTorch's initial step: last_epoch becomes 0 and the optimizer's lr is
// set to the schedule's value at 0. Each step() advances last_epoch and writes the new lr (and, for
// OneCycleLR/CyclicLR, momentum or Adam's beta1) into every parameter group. The values are
// computed in double with PyTorch's own (chainable, recursive) forms, so several schedulers on one
// optimizer compose as they do in PyTorch; each class also documents its closed form, which the
// tests compare against. The first scheduler created on an optimizer records each group's
// initial_lr; base_lrs are those initial lrs.
//
// state_dict(): metadata only ("scheduler", "last_epoch", "step_count", "base_lrs", "last_lr" and
// what a subclass adds); the configuration is not saved (construct the same scheduler, then
// load_state_dict), as with PyTorch.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/state_dict.h"
#include "optim/optimizer.h"

namespace ember::optim {

class LRScheduler : public Stateful {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  ~LRScheduler() override = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (or iteration) and updates the optimizer.
  virtual void step();
  // The lr of every group after the last step().
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  virtual std::string name() const = 0;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 protected:
  // The lrs at last_epoch_ (already advanced), PyTorch's get_lr().
  virtual std::vector<double> get_lr() = 0;
  // PyTorch's _get_closed_form_lr, used when stepping to a given epoch (SequentialLR's step(0)).
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  // PyTorch's _initial_step(): every concrete constructor ends with it.
  void initial_step();
  // step(epoch): jumps to `epoch` and uses the closed form when there is one.
  void step_to(int64_t epoch);
  // The current lr of each group.
  std::vector<double> group_lrs() const;
  void set_lrs(const std::vector<double>& lrs);
  // Extra state of a subclass, under its own metadata keys.
  virtual void save_extra(Metadata&) const {}
  virtual void load_extra(const Metadata&) {}

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;

  friend class SequentialLR;
  friend class ChainedScheduler;
};

// A scheduler made of others (SequentialLR, ChainedScheduler): the children write the lrs, so
// get_lr() reads them back, and the state is each child's.
class ComposedScheduler : public LRScheduler {
 protected:
  // By reference: a subclass may read `schedulers` for the optimizer in the same call.
  ComposedScheduler(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>>&& schedulers)
      : LRScheduler(optimizer), schedulers_(std::move(schedulers)) {}
  // Every child exists and steps this scheduler's optimizer; errors name the subclass.
  void check_children() const;

  std::vector<double> get_lr() override { return group_lrs(); }
  void save_extra(Metadata& m) const override;
  void load_extra(const Metadata& m) override;

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

}  // namespace ember::optim
