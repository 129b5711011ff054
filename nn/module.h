// Module: the base of every layer, as in libtorch.
//
//   struct NetImpl : nn::Module {
//     NetImpl() : Module("Net") {
//       fc1 = register_module("fc1", nn::Linear(nn::LinearOptions(784, 128)));
//       fc2 = register_module("fc2", nn::Linear(nn::LinearOptions(128, 10)));
//     }
//     Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x.flatten(1)))); }
//     nn::Linear fc1{nullptr}, fc2{nullptr};
//   };
//   EMBER_MODULE(Net);   // Net is a ModuleHolder<NetImpl>: Net net; net->parameters(); net(x)
//
// A module owns named parameters (tensors that require grad), named buffers (state that is saved
// but not trained, e.g. BatchNorm's running statistics) and named submodules (shared_ptr
// ownership). Names are dotted through the tree ("features.0.weight"), in registration order:
// a module's own parameters, then its buffers, then each child's, depth first (PyTorch's order).
//
// Note [parameters are updated in place]: Module::to() and load_state_dict() change a parameter's
// data in place (the TensorImpl keeps its identity, like torch's param.data = ...), so the handles
// a subclass keeps in members and an optimizer's parameter lists stay valid.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/state_dict.h"

namespace ember::nn {

class ModuleHolderBase {};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The type name used in printing ("Linear").
  const std::string& type_name() const { return type_name_; }

  // Single-tensor forward, what Sequential and checkpoint() call. Modules with other signatures
  // (losses) define their own forward and leave this one throwing.
  virtual Tensor forward(const Tensor& x);

  // ---- registration ----
  // Registers `t` as parameter `name` and sets requires_grad (when floating). Returns the stored
  // handle (the same tensor).
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  // Buffers: saved in state_dict when persistent, moved by to(), never trained.
  Tensor& register_buffer(const std::string& name, Tensor t, bool persistent = true);
  template <class M, std::enable_if_t<std::is_base_of_v<Module, M>, int> = 0>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  template <class H, std::enable_if_t<std::is_base_of_v<ModuleHolderBase, H>, int> = 0>
  H register_module(const std::string& name, H holder) {
    add_child(name, holder.ptr());
    return holder;
  }

  // Swaps the registered child `name` for `m` (same position, so state_dict order is kept) and
  // returns the old one. Only the registration changes: a subclass that keeps its own handle to the
  // child (a member, Sequential's list) must update it too (dist::convert_sync_batchnorm does that
  // for Sequential, Residual and Checkpoint).
  virtual std::shared_ptr<Module> replace_module(const std::string& name, std::shared_ptr<Module> m);

  // ---- introspection ----
  // Parameters of this module and (recurse) its descendants, without duplicates (a tensor
  // registered twice, e.g. tied weights, appears once under its first name).
  std::vector<Tensor> parameters(bool recurse = true) const;
  TensorDict named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  TensorDict named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // This module (name "") and every descendant, depth first.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  // Total element count of the parameters (trainable: only those that require grad).
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- mode ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- movement ----
  // Moves parameters and buffers (and their grads) to a device; to(dtype) converts floating ones
  // only (integer buffers such as num_batches_tracked keep their dtype).
  void to(Device device, bool non_blocking = false);
  void to(DType dtype);
  void to(Device device, DType dtype, bool non_blocking = false);

  // Sets every parameter's grad to none (set_to_none) or to zeros.
  void zero_grad(bool set_to_none = true);

  // ---- state ----
  // Parameters and persistent buffers by dotted name (the tensors themselves, not copies).
  TensorDict state_dict() const;
  // Copies values into the existing parameters and buffers (converting dtype and device). strict:
  // every key must be present and no key may be extra. A shape mismatch is always an error.
  // Everything is checked before anything is copied, so a failed load leaves the module unchanged.
  void load_state_dict(const TensorDict& state, bool strict = true);

  // ---- printing ----
  // One line of extra description after the type name: "in_features=784, out_features=128, bias=true".
  virtual std::string extra_repr() const { return ""; }
  // PyTorch-style tree.
  void pretty_print(std::ostream& os, int indent = 0) const;
  // A table: every module with its type and parameter count, then totals.
  std::string summary() const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  // No parameter, buffer or submodule is called `name` yet; `kind` is what is being registered
  // ("parameter", "buffer" or "submodule"), so a clash names both.
  void check_name_free(const std::string& name, const char* kind) const;
  void collect_parameters(const std::string& prefix, bool recurse, TensorDict& out,
                          std::vector<const TensorImpl*>& seen) const;
  void collect_buffers(const std::string& prefix, bool recurse, TensorDict& out, bool persistent_only) const;
  void collect_state(const std::string& prefix, TensorDict& out) const;
  void apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn);

  std::string type_name_;
  std::vector<std::pair<std::string, Tensor>> params_;
  struct Buffer {
    std::string name;
    Tensor tensor;
    bool persistent;
  };
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

// Replaces t's data by `value`'s in place (same TensorImpl; see Note [parameters are updated in
// place]). value must not share autograd history.
void set_data(Tensor& t, const Tensor& value);

// A shared_ptr to a module with value syntax: holder->member, holder(x) calls forward.
template <class Impl>
class ModuleHolder : public ModuleHolderBase {
 public:
  using ContainedType = Impl;

  // Default-constructs the module (for modules with a default constructor).
  ModuleHolder() : impl_(std::make_shared<Impl>()) {}
  // Empty holder, to be assigned later (register_module).
  ModuleHolder(std::nullptr_t) {}                                       // NOLINT
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}  // NOLINT
  template <
      class First, class... Rest,
      std::enable_if_t<
          !(sizeof...(Rest) == 0 && std::is_base_of_v<ModuleHolder<Impl>, std::decay_t<First>>)&&!std::is_same_v<
              std::decay_t<First>, std::shared_ptr<Impl>> &&
              !std::is_same_v<std::decay_t<First>, std::nullptr_t> && std::is_constructible_v<Impl, First&&, Rest&&...>,
          int> = 0>
  explicit ModuleHolder(First&& first, Rest&&... rest)
      : impl_(std::make_shared<Impl>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

  Impl* operator->() const { return get(); }
  Impl& operator*() const { return *get(); }
  Impl* get() const {
    EMBER_CHECK(impl_ != nullptr, "accessing an empty module holder (constructed with nullptr and never assigned)");
    return impl_.get();
  }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }

  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<Impl> impl_;
};

template <class Impl>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<Impl>& h) {
  return os << *h.get();
}

}  // namespace ember::nn

// Declares `Name` as the holder of `NameImpl`.
// (The implicit default constructor default-constructs the module; it only compiles for modules
// that have a default constructor.)
#define EMBER_MODULE(Name)                                     \
  class Name : public ::ember::nn::ModuleHolder<Name##Impl> {  \
   public:                                                     \
    using ::ember::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }
