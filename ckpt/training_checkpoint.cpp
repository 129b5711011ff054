#include "ckpt/training_checkpoint.h"

#include <cmath>

#include "core/rng.h"
#include "io/safetensors.h"

namespace ember {

namespace {
constexpr const char* kFormat = "training/1";

int64_t parse_int(const Metadata& m, const std::string& key, const std::string& where) {
  auto it = m.find(key);
  EMBER_CHECK(it != m.end(), where, ": no '", key, "' entry; not an ember training checkpoint?");
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    EMBER_CHECK(used == it->second.size(), "trailing characters");
    return v;
  } catch (const std::exception&) {
    EMBER_FAIL(where, ": '", key, "' is not an integer: '", it->second, "'");
  }
}

uint64_t parse_u64(const Metadata& m, const std::string& key, const std::string& where) {
  auto it = m.find(key);
  EMBER_CHECK(it != m.end(), where, ": no '", key, "' entry");
  try {
    size_t used = 0;
    unsigned long long v = std::stoull(it->second, &used);
    EMBER_CHECK(used == it->second.size() && it->second[0] != '-', "bad");
    return v;
  } catch (const std::exception&) {
    EMBER_FAIL(where, ": '", key, "' is not an unsigned integer: '", it->second, "'");
  }
}
}  // namespace

void check_module_state(const TensorDict& state, const nn::Module& m, const std::string& prefix,
                        const std::string& where) {
  const TensorDict own = m.state_dict();
  for (const auto& [k, t] : state) {
    if (!own.contains(k)) continue;  // an unexpected key: load_state_dict's strict rule decides
    const Tensor& mine = own.at(k);
    EMBER_CHECK(t.dtype() == mine.dtype(), where, ": tensor '", prefix, k, "' is ", dtype_name(t.dtype()),
                " but the model's is ", dtype_name(mine.dtype()), " (a checkpoint is never converted silently)");
    if (!is_floating(t.dtype()) || t.numel() == 0) continue;
    Tensor v = t.to(kCPU).to(DType::f64).contiguous();
    const double* p = v.data<double>();
    int64_t nan = 0, inf = 0;
    for (int64_t i = 0; i < v.numel(); ++i) {
      if (std::isnan(p[i])) ++nan;
      else if (std::isinf(p[i])) ++inf;
    }
    EMBER_CHECK(nan + inf == 0, where, ": tensor '", prefix, k, "' holds non-finite values (", nan, " NaN, ", inf,
                " inf of ", v.numel(), "): the run that saved it had diverged");
  }
}

void TrainingCheckpoint::add_entry(Entry e) {
  EMBER_CHECK(!e.name.empty() && e.name.find('.') == std::string::npos, "TrainingCheckpoint: component name '", e.name,
              "' must be non-empty and contain no '.'");
  EMBER_CHECK(e.name != "progress" && e.name != "rng" && e.name != "ember" && e.name != "run", "TrainingCheckpoint: '",
              e.name, "' is a reserved name");
  for (const Entry& o : entries_)
    EMBER_CHECK(o.name != e.name, "TrainingCheckpoint: component '", e.name, "' added twice");
  entries_.push_back(std::move(e));
}

TrainingCheckpoint& TrainingCheckpoint::model(nn::Module& m, const std::string& name) {
  add_entry({name, &m, nullptr});
  return *this;
}
TrainingCheckpoint& TrainingCheckpoint::optimizer(optim::Optimizer& o, const std::string& name) {
  add_entry({name, nullptr, &o});
  return *this;
}
TrainingCheckpoint& TrainingCheckpoint::scheduler(optim::LRScheduler& s, const std::string& name) {
  add_entry({name, nullptr, &s});
  return *this;
}
TrainingCheckpoint& TrainingCheckpoint::add(const std::string& name, Stateful& c) {
  add_entry({name, nullptr, &c});
  return *this;
}
TrainingCheckpoint& TrainingCheckpoint::info(const Metadata& run_info) {
  info_ = run_info;
  return *this;
}

StateDict TrainingCheckpoint::collect(const TrainingProgress& p) const {
  StateDict out;
  out.metadata["ember.checkpoint"] = kFormat;
  out.metadata["progress.epoch"] = std::to_string(p.epoch);
  out.metadata["progress.step"] = std::to_string(p.step);
  out.metadata["rng.seed"] = std::to_string(default_generator().seed());
  out.metadata["rng.offset"] = std::to_string(default_generator().offset());
  for (const auto& [k, v] : info_) out.metadata["run." + k] = v;
  std::string components;
  for (const Entry& e : entries_) {
    components += (components.empty() ? "" : ",") + e.name;
    if (e.module != nullptr) {
      for (const auto& [k, t] : e.module->state_dict()) out.tensors.insert(e.name + "." + k, t);
      continue;
    }
    StateDict sd = e.stateful->state_dict();
    for (const auto& [k, t] : sd.tensors) out.tensors.insert(e.name + "." + k, t);
    for (const auto& [k, v] : sd.metadata) out.metadata[e.name + "." + k] = v;
  }
  out.metadata["ember.components"] = components;
  return out;
}

void TrainingCheckpoint::save(const std::string& path, const TrainingProgress& progress) const {
  StateDict sd = collect(progress);
  io::save_safetensors(path, sd.tensors, sd.metadata);
}

TrainingProgress TrainingCheckpoint::restore(const StateDict& state, bool strict) {
  const std::string where = "training checkpoint";
  auto fmt = state.metadata.find("ember.checkpoint");
  EMBER_CHECK(fmt != state.metadata.end(), where, ": no 'ember.checkpoint' metadata; not an ember training checkpoint");
  EMBER_CHECK(fmt->second == kFormat, where, ": format '", fmt->second, "', this ember reads '", kFormat, "'");
  TrainingProgress p;
  p.epoch = parse_int(state.metadata, "progress.epoch", where);
  p.step = parse_int(state.metadata, "progress.step", where);
  EMBER_CHECK(p.epoch >= 0, where, ": 'progress.epoch' is negative (", p.epoch, ")");
  EMBER_CHECK(p.step >= 0, where, ": 'progress.step' is negative (", p.step, ")");
  for (const auto& [k, v] : state.metadata)
    if (k.rfind("run.", 0) == 0) p.run[k.substr(4)] = v;
  const uint64_t seed = parse_u64(state.metadata, "rng.seed", where);
  const uint64_t offset = parse_u64(state.metadata, "rng.offset", where);
  // Split the state per component; every registered component must be present.
  std::vector<StateDict> parts(entries_.size());
  std::vector<bool> present(entries_.size(), false);
  auto owner = [&](const std::string& key) -> int {
    for (size_t i = 0; i < entries_.size(); ++i) {
      const std::string prefix = entries_[i].name + ".";
      if (key.rfind(prefix, 0) == 0) return static_cast<int>(i);
    }
    return -1;
  };
  std::vector<std::string> unowned;
  for (const auto& [k, t] : state.tensors) {
    int i = owner(k);
    if (i < 0) {
      unowned.push_back(k);
      continue;
    }
    parts[static_cast<size_t>(i)].tensors.insert(k.substr(entries_[static_cast<size_t>(i)].name.size() + 1), t);
    present[static_cast<size_t>(i)] = true;
  }
  for (const auto& [k, v] : state.metadata) {
    int i = owner(k);
    if (i < 0) continue;
    parts[static_cast<size_t>(i)].metadata[k.substr(entries_[static_cast<size_t>(i)].name.size() + 1)] = v;
    present[static_cast<size_t>(i)] = true;
  }
  std::string listed = state.metadata.count("ember.components") ? state.metadata.at("ember.components") : "";
  for (size_t i = 0; i < entries_.size(); ++i) {
    bool in_list = ("," + listed + ",").find("," + entries_[i].name + ",") != std::string::npos;
    EMBER_CHECK(present[i] || in_list, where, ": no state for component '", entries_[i].name,
                "' (the checkpoint has: ", listed.empty() ? std::string("nothing") : listed, ")");
  }
  EMBER_CHECK(!strict || unowned.empty(), where, ": tensor '", unowned.empty() ? std::string() : unowned[0],
              "' belongs to no registered component (the checkpoint has: ", listed,
              "); it was written by a different program or model setup");
  // Meaning before anything is applied (Note [checkpoints mean what they say]).
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].module != nullptr) {
      check_module_state(parts[i].tensors, *entries_[i].module, entries_[i].name + ".", where);
      continue;
    }
    const auto* opt = dynamic_cast<const optim::Optimizer*>(entries_[i].stateful);
    if (opt != nullptr && p.step > 0 && opt->keeps_state())
      EMBER_CHECK(!parts[i].tensors.empty(), where, ": no optimizer state ('", entries_[i].name,
                  ".state.*' tensors) although the checkpoint is at step ", p.step, " and ", opt->name(),
                  " keeps per-parameter state (resuming would restart it from zero)");
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].module != nullptr) entries_[i].module->load_state_dict(parts[i].tensors, strict);
    else entries_[i].stateful->load_state_dict(parts[i]);
  }
  default_generator().set_state(seed, offset);
  return p;
}

TrainingProgress TrainingCheckpoint::load(const std::string& path, bool strict) {
  io::SafetensorsFile f = io::load_safetensors(path);
  StateDict sd{std::move(f.tensors), std::move(f.metadata)};
  return restore(sd, strict);
}

}  // namespace ember
