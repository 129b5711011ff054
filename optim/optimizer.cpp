#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/autograd/node.h"
#include "core/cuda/runtime.h"
#include "kernels/functional.h"

namespace ember::optim {

using json = nlohmann::json;

// ---- ParamGroup ----

ParamGroup::ParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}
ParamGroup::ParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
    : params_(std::move(params)), options_(std::move(options)) {}
ParamGroup::ParamGroup(const ParamGroup& o)
    : initial_lr(o.initial_lr), params_(o.params_), options_(o.options_ ? o.options_->clone() : nullptr) {}
ParamGroup& ParamGroup::operator=(const ParamGroup& o) {
  if (this != &o) {
    params_ = o.params_;
    options_ = o.options_ ? o.options_->clone() : nullptr;
    initial_lr = o.initial_lr;
  }
  return *this;
}
OptimizerOptions& ParamGroup::options() {
  EMBER_CHECK(options_ != nullptr, "ParamGroup has no options (it was not added to an optimizer)");
  return *options_;
}
const OptimizerOptions& ParamGroup::options() const {
  EMBER_CHECK(options_ != nullptr, "ParamGroup has no options (it was not added to an optimizer)");
  return *options_;
}

// ---- Optimizer ----

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults, std::string name)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  EMBER_CHECK(defaults_ != nullptr, "Optimizer: no default options");
  defaults_->validate();
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

Optimizer::~Optimizer() = default;

void Optimizer::add_param_group(ParamGroup group) {
  if (!group.has_options()) group.set_options(defaults_->clone());
  group.options().validate();
  std::set<const TensorImpl*> seen;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params()) seen.insert(p.impl());
  for (size_t i = 0; i < group.params().size(); ++i) {
    const Tensor& p = group.params()[i];
    EMBER_CHECK(p.defined(), name(), ": parameter ", i, " of the new group is undefined");
    EMBER_CHECK(is_floating(p.dtype()), name(), ": parameter ", i, " is ", p.describe(),
                "; only floating tensors can be optimized");
    EMBER_CHECK(p.is_leaf(), name(), ": parameter ", i, " is not a leaf tensor (", p.describe(),
                "); optimize the leaves (e.g. module->parameters())");
    EMBER_CHECK(seen.insert(p.impl()).second, name(), ": parameter ", i, " (", p.describe(),
                ") appears in more than one parameter group (or twice in one)");
  }
  groups_.push_back(std::move(group));
}

size_t Optimizer::size() const {
  size_t n = 0;
  for (const ParamGroup& g : groups_) n += g.params().size();
  return n;
}

// set_to_none = false keeps each gradient's storage and zeroes every one of them in one zero_many
// call (one launch on CUDA, as PyTorch's foreach zero_), not a fill per parameter.
void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard ng;
  std::vector<Tensor> grads;
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params()) {
      if (set_to_none) p.reset_grad();
      else if (p.grad().defined()) grads.push_back(p.grad());
    }
  zero_many_(grads);
}

const TensorDict& Optimizer::state(const Tensor& param) const {
  static const TensorDict empty_state;
  auto it = state_.find(param.impl());
  return it == state_.end() ? empty_state : it->second;
}

TensorDict& Optimizer::mutable_state(const Tensor& param) { return state_[param.impl()]; }

std::vector<Optimizer::Bucket> Optimizer::buckets(size_t group) const {
  std::vector<Bucket> out;
  for (const Tensor& p : groups_.at(group).params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    EMBER_CHECK(p.is_contiguous(), name(), ": parameter ", p.describe(), " must be contiguous");
    if (!g.is_contiguous()) g = g.contiguous();
    Bucket* b = nullptr;
    for (Bucket& x : out)
      if (x.device == p.device() && x.dtype == p.dtype()) b = &x;
    if (b == nullptr) {
      out.push_back({p.device(), p.dtype(), {}, {}});
      b = &out.back();
    }
    b->params.push_back(p);
    b->grads.push_back(g);
  }
  return out;
}

Optimizer::HyperSlot& Optimizer::slot(size_t group, Device device) {
  int key = static_cast<int>(device.type) * 256 + device.index;
  return hyper_[{group, key}];
}

void Optimizer::upload(HyperSlot& s, const std::vector<double>& values) {
  if (s.uploaded == values && s.tensor.defined()) return;
  if (s.tensor.device().is_cpu()) {
    // CPU kernels run synchronously: the previous step has finished reading.
    std::copy(values.begin(), values.end(), s.tensor.data<double>());
  } else {
    // Graph mode (Note [optimizer hyperparameters on the device]): the graph holds only the kernels;
    // the upload happens eagerly, stream-ordered, before each replay. A copy captured here would
    // read a transient host buffer at every replay.
    EMBER_CHECK(!cuda::current_stream(s.tensor.device().index).is_capturing(), name_,
                ": a hyperparameter (lr, momentum, betas, ...) changed inside a CUDA graph capture; call "
                "sync_hyperparameters() after scheduler.step() and before capture_begin() and each replay()");
    // A fresh pinned block per upload: the pinned caching allocator reuses it only after the copy
    // has read it (an event recorded by the copy), so the host never waits and never overwrites
    // bytes a pending copy still has to read.
    Tensor staging = empty({static_cast<int64_t>(values.size())}, TensorOptions(DType::f64).pinned_memory(true));
    std::copy(values.begin(), values.end(), staging.data<double>());
    s.tensor.copy_(staging, /*non_blocking=*/true);
  }
  s.uploaded = values;
}

Tensor Optimizer::hyper(size_t group, Device device) {
  if (row_ >= 0) {
    HyperSlot& s = slot(group, device);
    EMBER_CHECK(s.rows.defined() && row_ < s.rows.size(0), name_, ": hyperparameter row ", row_,
                " of a group without rows (make_hyper_rows first)");
    return s.rows.select(0, row_);
  }
  std::vector<double> values = hyper_values(groups_.at(group).options());
  HyperSlot& s = slot(group, device);
  if (!s.tensor.defined()) {
    s.tensor = empty({static_cast<int64_t>(values.size())}, TensorOptions(DType::f64).device(device));
    if (device.is_cuda()) s.ticket = zeros({1}, TensorOptions(DType::i32).device(device));
  }
  upload(s, values);
  return s.tensor;
}

Tensor Optimizer::ticket(size_t group, Device device) { return slot(group, device).ticket; }

Tensor Optimizer::hyperparameter_tensor(size_t group, Device device) { return hyper(group, device); }

void Optimizer::for_each_slot(const std::function<void(size_t, Device)>& f) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::set<int> devices;
    for (const Tensor& p : groups_[g].params()) {
      Device d = p.device();
      if (devices.insert(static_cast<int>(d.type) * 256 + d.index).second) f(g, d);
    }
  }
}

void Optimizer::sync_hyperparameters() {
  for_each_slot([&](size_t g, Device d) { hyper(g, d); });
}

void Optimizer::make_hyper_rows(int64_t rows) {
  EMBER_CHECK(rows >= 1 && row_ < 0, name_, ": make_hyper_rows(", rows, ") needs rows >= 1, outside use_hyper_row");
  for_each_slot([&](size_t g, Device d) {
    const auto k = static_cast<int64_t>(hyper(g, d).numel());
    HyperSlot& s = slot(g, d);
    s.rows = empty({rows, k}, TensorOptions(DType::f64).device(d));
    s.staged.assign(static_cast<size_t>(rows * k), 0.0);
  });
}

void Optimizer::use_hyper_row(int64_t row) { row_ = row; }

void Optimizer::stage_hyper_row(int64_t row) {
  for_each_slot([&](size_t g, Device d) {
    HyperSlot& s = slot(g, d);
    const std::vector<double> values = hyper_values(groups_[g].options());
    EMBER_CHECK(s.rows.defined() && row >= 0 && row < s.rows.size(0), name_, ": no hyperparameter row ", row);
    std::copy(values.begin(), values.end(), s.staged.begin() + static_cast<std::ptrdiff_t>(row) * s.rows.size(1));
  });
}

void Optimizer::upload_hyper_rows() {
  for_each_slot([&](size_t g, Device d) {
    HyperSlot& s = slot(g, d);
    EMBER_CHECK(s.rows.defined(), name_, ": upload_hyper_rows without make_hyper_rows");
    // a fresh pinned block per upload, as upload() does: a pending copy's bytes are never overwritten
    Tensor staging =
        empty({static_cast<int64_t>(s.staged.size())}, TensorOptions(DType::f64).pinned_memory(d.is_cuda()));
    std::copy(s.staged.begin(), s.staged.end(), staging.data<double>());
    s.rows.copy_(staging.reshape(s.rows.shape()), /*non_blocking=*/d.is_cuda());
    s.on_rows = s.staged;
  });
}

bool Optimizer::use_hyper_row_if_current(int64_t row) {
  bool current = true;
  for_each_slot([&](size_t g, Device d) {
    const HyperSlot& s = slot(g, d);
    const std::vector<double> values = hyper_values(groups_[g].options());
    const auto k = static_cast<int64_t>(values.size());
    // NaN never equals itself: such a value goes through the single tensor, as the step would send it
    current = current && s.rows.defined() && row >= 0 && row < s.rows.size(0) && s.rows.size(1) == k &&
              static_cast<int64_t>(s.on_rows.size()) == s.rows.numel() &&
              std::equal(values.begin(), values.end(), s.on_rows.begin() + static_cast<std::ptrdiff_t>(row * k));
  });
  row_ = current ? row : -1;
  return current;
}

Tensor Optimizer::on_device(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  return t.to(device, /*non_blocking=*/device.is_cuda());  // a host copy must land before the CPU kernel reads it
}

// ---- state dict ----

StateDict Optimizer::state_dict() const {
  StateDict sd;
  json groups = json::array();
  int64_t k = 0;
  for (const ParamGroup& g : groups_) {
    json jg = json::object();
    json opts = json::object();
    for (const auto& [key, v] : g.options().to_map()) opts[key] = v;
    jg["options"] = opts;
    json idx = json::array();
    for (const Tensor& p : g.params()) {
      idx.push_back(k);
      auto it = state_.find(p.impl());
      if (it != state_.end())
        for (const auto& [name, t] : it->second) sd.tensors.insert("state." + std::to_string(k) + "." + name, t);
      ++k;
    }
    jg["params"] = idx;
    if (g.initial_lr) jg["initial_lr"] = *g.initial_lr;
    groups.push_back(jg);
  }
  sd.metadata["optimizer"] = name();
  sd.metadata["param_groups"] = groups.dump();
  return sd;
}

namespace {
// Values a saved state tensor can hold: finite; second moments ("..._sq") and the step count >= 0.
void check_state_values(const Tensor& t, const std::string& key, const std::string& sname, const std::string& who) {
  if (t.numel() == 0 || !(is_floating(t.dtype()) || sname == "step")) return;
  Tensor v = t.to(kCPU).to(DType::f64).contiguous();
  const double* p = v.data<double>();
  const bool non_negative = sname == "step" || (sname.size() >= 3 && sname.compare(sname.size() - 3, 3, "_sq") == 0);
  for (int64_t i = 0; i < v.numel(); ++i) {
    EMBER_CHECK(std::isfinite(p[i]), who, ".load_state_dict: state tensor '", key, "' holds a non-finite value (", p[i],
                " at element ", i, ")");
    EMBER_CHECK(!non_negative || p[i] >= 0, who, ".load_state_dict: state tensor '", key, "' holds a negative value (",
                p[i], " at element ", i, "); ", sname == "step" ? "a step count" : "a second moment",
                " is never negative");
  }
}

// The state's 'param_groups' (JSON in its metadata), from an optimizer named `who` with n_groups groups.
json saved_param_groups(const StateDict& sd, const std::string& who, size_t n_groups) {
  auto it = sd.metadata.find("optimizer");
  EMBER_CHECK(it != sd.metadata.end(), who, ".load_state_dict: the state has no 'optimizer' metadata entry");
  EMBER_CHECK(it->second == who, who, ".load_state_dict: the state is from a ", it->second, " optimizer");
  auto jt = sd.metadata.find("param_groups");
  EMBER_CHECK(jt != sd.metadata.end(), who, ".load_state_dict: the state has no 'param_groups' metadata entry");
  json groups;
  try {
    groups = json::parse(jt->second);
  } catch (const json::exception& e) {
    EMBER_FAIL(who, ".load_state_dict: 'param_groups' is not valid JSON: ", e.what());
  }
  EMBER_CHECK(groups.is_array() && groups.size() == n_groups, who, ".load_state_dict: the state has ",
              groups.is_array() ? groups.size() : 0, " parameter groups, the optimizer ", n_groups);
  return groups;
}

// Group gi's saved options, validated, for the group `g` it replaces.
std::unique_ptr<OptimizerOptions> saved_options(const json& jg, const ParamGroup& g, size_t gi,
                                                const std::string& who) {
  EMBER_CHECK(jg.is_object() && jg.contains("options") && jg.contains("params") && jg["params"].is_array(), who,
              ".load_state_dict: parameter group ", gi, " is malformed");
  EMBER_CHECK(jg["params"].size() == g.params().size(), who, ".load_state_dict: parameter group ", gi, " has ",
              jg["params"].size(), " parameters in the state but ", g.params().size(), " in the optimizer");
  std::map<std::string, double> m;
  for (auto o = jg["options"].begin(); o != jg["options"].end(); ++o) {
    EMBER_CHECK(o.value().is_number(), who, ".load_state_dict: option '", o.key(), "' of group ", gi,
                " is not a number");
    m[o.key()] = o.value().get<double>();
  }
  auto opts = g.options().clone();
  opts->from_map(m);
  opts->validate();
  return opts;
}

// The state tensors ("state.<k>.<name>") by parameter index k < n_params, then name.
std::vector<std::map<std::string, Tensor>> saved_state(const StateDict& sd, size_t n_params, const std::string& who) {
  std::vector<std::map<std::string, Tensor>> per_param(n_params);
  for (const auto& [key, t] : sd.tensors) {
    EMBER_CHECK(key.rfind("state.", 0) == 0, who, ".load_state_dict: unexpected tensor '", key, "'");
    size_t dot = key.find('.', 6);
    EMBER_CHECK(dot != std::string::npos && dot > 6, who, ".load_state_dict: malformed state key '", key, "'");
    size_t k = 0;
    try {
      k = std::stoul(key.substr(6, dot - 6));
    } catch (...) {
      EMBER_FAIL(who, ".load_state_dict: malformed parameter index in '", key, "'");
    }
    EMBER_CHECK(k < n_params, who, ".load_state_dict: state for parameter ", k, " but the optimizer has ", n_params);
    per_param[k][key.substr(dot + 1)] = t;
  }
  return per_param;
}

// Parameter k's saved state (not empty: it was stepped) against the parameter p: exactly the state `names` its
// options keep, each of the parameter's shape and dtype (the step count: one element), with sensible values.
void check_param_state(const std::map<std::string, Tensor>& state, const Tensor& p, size_t k,
                       const std::vector<std::string>& names, const std::string& who) {
  for (const auto& [sname, t] : state) {
    bool known = std::find(names.begin(), names.end(), sname) != names.end();
    EMBER_CHECK(known, who, ".load_state_dict: unexpected state '", sname, "' for parameter ", k);
    const std::string key = "state." + std::to_string(k) + "." + sname;
    if (sname == "step") {
      EMBER_CHECK(t.numel() == 1, who, ".load_state_dict: 'step' of parameter ", k, " must have one element, got ",
                  t.describe());
    } else {
      EMBER_CHECK(t.shape() == p.shape(), who, ".load_state_dict: state '", sname, "' of parameter ", k, " is ",
                  t.shape(), " but the parameter is ", p.shape());
      EMBER_CHECK(t.dtype() == p.dtype(), who, ".load_state_dict: state tensor '", key, "' is ", dtype_name(t.dtype()),
                  " but the parameter is ", dtype_name(p.dtype()), " (optimizer state is never converted silently)");
    }
    check_state_values(t, key, sname, who);
  }
  for (const std::string& n : names)
    EMBER_CHECK(state.count(n), who, ".load_state_dict: parameter ", k, " lacks state '", n, "'");
}

// Parameter p's state as the optimizer keeps it: copies on p's device, in p's dtype (the step count: an f32 scalar).
TensorDict loaded_state(const std::map<std::string, Tensor>& state, const Tensor& p) {
  TensorDict st;
  for (const auto& [sname, t] : state) {
    TensorOptions o = TensorOptions(sname == "step" ? DType::f32 : p.dtype()).device(p.device());
    Tensor dst = empty(sname == "step" ? Shape{} : p.shape(), o);
    dst.copy_(sname == "step" ? t.reshape({}) : t);
    st.set(sname, dst);
  }
  return st;
}
}  // namespace

bool Optimizer::keeps_state() const {
  for (const ParamGroup& g : groups_)
    if (!state_names(g.options()).empty()) return true;
  return false;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  const json groups = saved_param_groups(sd, name(), groups_.size());
  // Check everything first.
  std::vector<std::unique_ptr<OptimizerOptions>> new_options;
  std::vector<std::optional<double>> new_initial;
  std::vector<const Tensor*> params;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const json& jg = groups[gi];
    new_options.push_back(saved_options(jg, groups_[gi], gi, name()));
    new_initial.push_back(jg.contains("initial_lr") ? std::optional<double>(jg["initial_lr"].get<double>())
                                                    : std::nullopt);
    for (const Tensor& p : groups_[gi].params()) params.push_back(&p);
  }
  const std::vector<std::map<std::string, Tensor>> per_param = saved_state(sd, params.size(), name());
  size_t k = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    std::vector<std::string> names = state_names(*new_options[gi]);
    for (size_t j = 0; j < groups_[gi].params().size(); ++j, ++k)
      if (!per_param[k].empty()) check_param_state(per_param[k], *params[k], k, names, name());  // else never stepped
  }
  // Apply.
  autograd::NoGradGuard ng;
  state_.clear();
  k = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    groups_[gi].set_options(std::move(new_options[gi]));
    groups_[gi].initial_lr = new_initial[gi];
    for (size_t j = 0; j < groups_[gi].params().size(); ++j, ++k)
      if (!per_param[k].empty()) state_[params[k]->impl()] = loaded_state(per_param[k], *params[k]);
  }
  hyper_.clear();  // re-upload with the loaded options
}

}  // namespace ember::optim
