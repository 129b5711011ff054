// Named tensors and the state of stateful objects (modules, optimizers, schedulers, loss
// scalers), as saved to and loaded from safetensors files.
//
//   TensorDict  an insertion-ordered map name -> Tensor (like torch's OrderedDict): what
//               Module::state_dict() returns and what a safetensors file holds
//   StateDict   tensors plus string metadata (safetensors' __metadata__ is a string -> string map);
//               optimizers and schedulers keep their non-tensor state (hyperparameters, counters)
//               in the metadata, as JSON or decimal text
//   Stateful    the interface a training checkpoint saves and restores (ckpt/)
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember {

class TensorDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  TensorDict() = default;
  TensorDict(std::initializer_list<Item> items) {
    for (const Item& it : items) insert(it.first, it.second);
  }

  // Adds a new entry; a name that is already present is an error.
  void insert(const std::string& name, const Tensor& value) {
    EMBER_CHECK(index_.find(name) == index_.end(), "TensorDict: duplicate name '", name, "'");
    index_.emplace(name, items_.size());
    items_.emplace_back(name, value);
  }
  // Adds or replaces.
  void set(const std::string& name, const Tensor& value) {
    auto it = index_.find(name);
    if (it == index_.end()) insert(name, value);
    else items_[it->second].second = value;
  }
  bool contains(const std::string& name) const { return index_.find(name) != index_.end(); }
  const Tensor& at(const std::string& name) const {
    auto it = index_.find(name);
    EMBER_CHECK(it != index_.end(), "TensorDict: no entry named '", name, "'");
    return items_[it->second].second;
  }
  Tensor& at(const std::string& name) {
    auto it = index_.find(name);
    EMBER_CHECK(it != index_.end(), "TensorDict: no entry named '", name, "'");
    return items_[it->second].second;
  }
  const Tensor& operator[](const std::string& name) const { return at(name); }
  // nullptr when absent.
  const Tensor* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }
  const std::vector<Item>& items() const { return items_; }
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const Item& it : items_) k.push_back(it.first);
    return k;
  }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

using Metadata = std::map<std::string, std::string>;

struct StateDict {
  TensorDict tensors;
  Metadata metadata;
};

// Something a training checkpoint can save and restore.
class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual StateDict state_dict() const = 0;
  virtual void load_state_dict(const StateDict& state) = 0;
};

}  // namespace ember
