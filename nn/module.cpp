#include "nn/module.h"

#include <algorithm>
#include <iomanip>
#include <set>
#include <sstream>

#include "core/autograd/node.h"
#include "kernels/functional.h"

namespace ember::nn {

namespace {

void check_name(const std::string& name, const char* what) {
  EMBER_CHECK(!name.empty(), "register_", what, ": the name must not be empty");
  EMBER_CHECK(name.find('.') == std::string::npos, "register_", what, ": name '", name,
              "' must not contain '.' (dots separate the levels of the module tree)");
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::vector<Tensor> values_of(const TensorDict& named) {
  std::vector<Tensor> out;
  for (const auto& item : named) out.push_back(item.second);
  return out;
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace

void set_data(Tensor& t, const Tensor& value) {
  EMBER_CHECK(t.defined() && value.defined(), "set_data: undefined tensor");
  TensorImpl* dst = t.impl();
  TensorImpl* src = value.impl();
  if (dst == src) return;
  dst->storage = src->storage;
  dst->shape = src->shape;
  dst->strides = src->strides;
  dst->offset = src->offset;
  dst->dtype = src->dtype;
  if (dst->autograd) {
    // The gradient accumulator remembers the old dtype/device: let the next backward make a new one.
    dst->autograd->grad_accumulator.reset();
  }
}

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Tensor Module::forward(const Tensor&) {
  EMBER_FAIL(type_name_, " has no single-tensor forward(x); call its own forward");
}

void Module::check_name_free(const std::string& name, const char* kind) const {
  auto taken_by = [&](const std::string& other) {
    if (other == kind) EMBER_FAIL(type_name_, ": ", other, " '", name, "' is already registered");
    EMBER_FAIL(type_name_, ": '", name, "' is already a ", other);
  };
  for (const auto& p : params_)
    if (p.first == name) taken_by("parameter");
  for (const auto& b : buffers_)
    if (b.name == name) taken_by("buffer");
  for (const auto& c : children_)
    if (c.first == name) taken_by("submodule");
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(name, "parameter");
  check_name_free(name, "parameter");
  EMBER_CHECK(t.defined(), type_name_, ": parameter '", name, "' is undefined");
  EMBER_CHECK(t.is_leaf(), type_name_, ": parameter '", name,
              "' must be a leaf tensor (detach() it, or create it under NoGradGuard)");
  if (requires_grad && is_floating(t.dtype())) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_name(name, "buffer");
  check_name_free(name, "buffer");
  EMBER_CHECK(t.defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.push_back({name, t, persistent});
  return buffers_.back().tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, "module");
  EMBER_CHECK(m != nullptr, type_name_, ": submodule '", name, "' is empty");
  EMBER_CHECK(m.get() != this, type_name_, ": a module cannot be its own child");
  check_name_free(name, "submodule");
  children_.emplace_back(name, std::move(m));
}

std::shared_ptr<Module> Module::replace_module(const std::string& name, std::shared_ptr<Module> m) {
  EMBER_CHECK(m != nullptr, type_name_, ": replace_module('", name, "') with an empty module");
  EMBER_CHECK(m.get() != this, type_name_, ": a module cannot be its own child");
  for (auto& c : children_)
    if (c.first == name) return std::exchange(c.second, std::move(m));
  EMBER_FAIL(type_name_, ": replace_module: no submodule named '", name, "'");
}

void Module::collect_parameters(const std::string& prefix, bool recurse, TensorDict& out,
                                std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : params_) {
    if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
    seen.push_back(t.impl());
    out.insert(join(prefix, name), t);
  }
  if (!recurse) return;
  for (const auto& [name, c] : children_) c->collect_parameters(join(prefix, name), true, out, seen);
}

void Module::collect_buffers(const std::string& prefix, bool recurse, TensorDict& out, bool persistent_only) const {
  for (const Buffer& b : buffers_)
    if (!persistent_only || b.persistent) out.insert(join(prefix, b.name), b.tensor);
  if (!recurse) return;
  for (const auto& [name, c] : children_) c->collect_buffers(join(prefix, name), true, out, persistent_only);
}

void Module::collect_state(const std::string& prefix, TensorDict& out) const {
  for (const auto& [name, t] : params_) out.insert(join(prefix, name), t);
  for (const Buffer& b : buffers_)
    if (b.persistent) out.insert(join(prefix, b.name), b.tensor);
  for (const auto& [name, c] : children_) c->collect_state(join(prefix, name), out);
}

std::vector<Tensor> Module::parameters(bool recurse) const { return values_of(named_parameters(recurse)); }

TensorDict Module::named_parameters(bool recurse) const {
  TensorDict out;
  std::vector<const TensorImpl*> seen;
  collect_parameters("", recurse, out, seen);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const { return values_of(named_buffers(recurse)); }

TensorDict Module::named_buffers(bool recurse) const {
  TensorDict out;
  collect_buffers("", recurse, out, false);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& c : children_) out.push_back(c.second);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::shared_ptr<Module> self;
  try {
    self = shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    self = std::shared_ptr<Module>(this, [](Module*) {});  // a module on the stack: a non-owning handle
  }
  std::function<void(const std::string&, const std::shared_ptr<Module>&)> walk = [&](const std::string& prefix,
                                                                                     const std::shared_ptr<Module>& m) {
    out.emplace_back(prefix, m);
    for (const auto& [name, c] : m->children_) walk(join(prefix, name), c);
  };
  walk("", self);
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn) {
  autograd::NoGradGuard ng;
  std::vector<const TensorImpl*> done;  // shared tensors are converted once
  auto convert = [&](Tensor& t) {
    if (!t.defined() || std::find(done.begin(), done.end(), t.impl()) != done.end()) return;
    done.push_back(t.impl());
    Tensor nt = fn(t.detach());
    Tensor g = t.grad();
    if (!nt.is_same(t) && nt.impl() != t.impl()) set_data(t, nt);
    if (g.defined()) t.set_grad(fn(g));
  };
  for (auto& [name, mod] : named_modules()) {
    for (auto& p : mod->params_) convert(p.second);
    for (auto& b : mod->buffers_) convert(b.tensor);
  }
}

void Module::to(Device device, bool non_blocking) {
  apply_to_tensors([&](const Tensor& t) { return t.device() == device ? t : t.to(device, non_blocking); });
}

void Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), "Module::to: dtype must be floating, got ", dtype);
  apply_to_tensors([&](const Tensor& t) { return is_floating(t.dtype()) && t.dtype() != dtype ? t.to(dtype) : t; });
}

void Module::to(Device device, DType dtype, bool non_blocking) {
  to(dtype);
  to(device, non_blocking);
}

void Module::zero_grad(bool set_to_none) {
  autograd::NoGradGuard ng;
  std::vector<Tensor> grads;  // kept: zeroed together, in one launch on CUDA (Optimizer::zero_grad)
  for (Tensor p : parameters()) {
    if (set_to_none) p.reset_grad();
    else if (p.grad().defined()) grads.push_back(p.grad());
  }
  zero_many_(grads);
}

TensorDict Module::state_dict() const {
  TensorDict out;
  collect_state("", out);
  return out;
}

void Module::load_state_dict(const TensorDict& state, bool strict) {
  TensorDict own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : own) {
    const Tensor* src = state.find(name);
    if (src == nullptr) {
      missing.push_back(name);
      continue;
    }
    EMBER_CHECK(src->defined(), "load_state_dict: entry '", name, "' is undefined");
    if (src->shape() != t.shape())
      mismatched.push_back(str(name, ": the checkpoint has shape ", src->shape(), ", the module ", t.shape()));
  }
  for (const auto& [name, t] : state)
    if (!own.contains(name)) unexpected.push_back(name);
  std::ostringstream err;
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    if (v.empty()) return;
    err << (err.tellp() > 0 ? "; " : "") << what << ": ";
    for (size_t i = 0; i < v.size(); ++i) err << (i ? ", " : "") << '"' << v[i] << '"';
  };
  list("size mismatch for", mismatched);
  if (strict) {
    list("missing key(s)", missing);
    list("unexpected key(s)", unexpected);
  }
  EMBER_CHECK(err.tellp() == 0, "Error(s) in loading state_dict for ", type_name_, ": ", err.str());
  autograd::NoGradGuard ng;
  for (const auto& [name, t] : own) {
    const Tensor* src = state.find(name);
    if (src == nullptr) continue;
    Tensor dst = t;
    dst.copy_(*src);
  }
}

void Module::pretty_print(std::ostream& os, int indent) const {
  os << type_name_ << "(" << extra_repr();
  if (children_.empty()) {
    os << ")";
    return;
  }
  if (!extra_repr().empty()) os << ", ";
  os << "\n";
  for (const auto& [name, c] : children_) {
    os << std::string(static_cast<size_t>(indent + 2), ' ') << "(" << name << "): ";
    c->pretty_print(os, indent + 2);
    os << "\n";
  }
  os << std::string(static_cast<size_t>(indent), ' ') << ")";
}

std::string Module::summary() const {
  struct Row {
    std::string name, type;
    int64_t own = 0, total = 0;
  };
  std::vector<Row> rows;
  std::function<int64_t(const std::string&, const Module&, int)> walk = [&](const std::string& name, const Module& m,
                                                                            int depth) {
    size_t idx = rows.size();
    rows.push_back({std::string(static_cast<size_t>(depth * 2), ' ') + (name.empty() ? "(root)" : name), m.type_name_});
    int64_t own = 0;
    for (const auto& p : m.params_) own += p.second.numel();
    int64_t total = own;
    for (const auto& [cn, c] : m.children_) total += walk(cn, *c, depth + 1);
    rows[idx].own = own;
    rows[idx].total = total;
    return total;
  };
  walk("", *this, 0);
  size_t wn = 6, wt = 4;
  for (const Row& r : rows) {
    wn = std::max(wn, r.name.size());
    wt = std::max(wt, r.type.size());
  }
  std::ostringstream os;
  os << std::left << std::setw(static_cast<int>(wn)) << "module"
     << "  " << std::setw(static_cast<int>(wt)) << "type"
     << "  " << std::right << std::setw(14) << "params"
     << "\n";
  os << std::string(wn + wt + 18, '-') << "\n";
  for (const Row& r : rows)
    os << std::left << std::setw(static_cast<int>(wn)) << r.name << "  " << std::setw(static_cast<int>(wt)) << r.type
       << "  " << std::right << std::setw(14) << with_commas(r.total) << "\n";
  os << std::string(wn + wt + 18, '-') << "\n";
  int64_t buf = 0;
  for (const Tensor& b : buffers()) buf += b.numel();
  os << "parameters: " << with_commas(num_parameters()) << " (trainable " << with_commas(num_parameters(true))
     << "), buffer elements: " << with_commas(buf) << "\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  m.pretty_print(os);
  return os;
}

}  // namespace ember::nn
