#include "optim/lr_scheduler.h"

#include <nlohmann/json.hpp>

namespace ember::optim {

using json = nlohmann::json;

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  // PyTorch: group.setdefault("initial_lr", group["lr"]); base_lrs = initial lrs.
  for (ParamGroup& g : optimizer_.param_groups()) {
    if (!g.initial_lr) g.initial_lr = g.options().get_lr();
    base_lrs_.push_back(*g.initial_lr);
  }
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> out;
  for (const ParamGroup& g : optimizer_.param_groups()) out.push_back(g.options().get_lr());
  return out;
}

void LRScheduler::set_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  EMBER_CHECK(lrs.size() == groups.size(), name(), ": ", lrs.size(), " learning rates for ", groups.size(),
              " parameter groups (a group was added after the scheduler was created?)");
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[i]);
  last_lr_ = lrs;
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  set_lrs(get_lr());
}

void LRScheduler::step_to(int64_t epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  std::optional<std::vector<double>> closed = closed_form_lr();
  set_lrs(closed ? *closed : get_lr());
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  sd.metadata["scheduler"] = name();
  sd.metadata["last_epoch"] = std::to_string(last_epoch_);
  sd.metadata["step_count"] = std::to_string(step_count_);
  sd.metadata["base_lrs"] = json(base_lrs_).dump();
  sd.metadata["last_lr"] = json(last_lr_).dump();
  save_extra(sd.metadata);
  return sd;
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  auto get = [&](const char* k) -> const std::string& {
    auto it = sd.metadata.find(k);
    EMBER_CHECK(it != sd.metadata.end(), name(), ".load_state_dict: missing '", k, "'");
    return it->second;
  };
  EMBER_CHECK(get("scheduler") == name(), name(), ".load_state_dict: the state is from a ", get("scheduler"));
  std::vector<double> base, last;
  int64_t epoch = 0, count = 0;
  try {
    base = json::parse(get("base_lrs")).get<std::vector<double>>();
    last = json::parse(get("last_lr")).get<std::vector<double>>();
    epoch = std::stoll(get("last_epoch"));
    count = std::stoll(get("step_count"));
  } catch (const std::exception& e) {
    EMBER_FAIL(name(), ".load_state_dict: malformed state: ", e.what());
  }
  EMBER_CHECK(base.size() == base_lrs_.size(), name(), ".load_state_dict: the state has ", base.size(),
              " parameter groups, the scheduler ", base_lrs_.size());
  load_extra(sd.metadata);
  base_lrs_ = base;
  last_lr_ = last;
  last_epoch_ = epoch;
  step_count_ = count;
}

void ComposedScheduler::check_children() const {
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    EMBER_CHECK(schedulers_[i] != nullptr, name(), ": scheduler ", i, " is empty");
    EMBER_CHECK(&schedulers_[i]->optimizer() == &optimizer_, name(), ": scheduler ", i,
                " belongs to another optimizer");
  }
}

// Each child's state under "<i>.".
void ComposedScheduler::save_extra(Metadata& m) const {
  for (size_t i = 0; i < schedulers_.size(); ++i)
    for (const auto& [k, v] : schedulers_[i]->state_dict().metadata) m[std::to_string(i) + "." + k] = v;
}

void ComposedScheduler::load_extra(const Metadata& m) {
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    StateDict sd;
    const std::string prefix = std::to_string(i) + ".";
    for (const auto& [k, v] : m)
      if (k.rfind(prefix, 0) == 0) sd.metadata[k.substr(prefix.size())] = v;
    schedulers_[i]->load_state_dict(sd);
  }
}

}  // namespace ember::optim
