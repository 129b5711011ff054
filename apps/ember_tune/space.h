// ember_tune's search space: the parameters, how each maps to and from the unit cube the samplers work in, and how a
// space is read from the command line (--param) or a JSON file (--space).
//
// Note [latent and feature coordinates]: a point is held as one latent coordinate per parameter, u in [0, 1]: random
// search, the Latin hypercube and TPE sample there, and the study file stores it so a resumed study sees exactly what
// the sampler saw. decode() turns u into the value mnist_train gets: lo + u (hi - lo) for floats, the same in log
// space for log floats (so 1e-4..1e-1 is sampled per decade, not mostly near 1e-1), the bucket floor(u * count) for
// integers and categoricals. The Gaussian process sees features() instead: numeric parameters as their decoded value
// mapped back into [0, 1] (an integer's bucket centre, so points that decode to the same value are the same to the
// GP), and each categorical one-hot (an order between choices such as sgd < adam would be invented).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ember::tune {

enum class ParamType { uniform, log_uniform, integer, categorical };

struct Param {
  std::string name;  // mnist_train's flag without the dashes: lr, weight-decay (weight_decay works too)
  ParamType type = ParamType::uniform;
  double lo = 0, hi = 1;             // numeric bounds, both inclusive
  std::vector<std::string> choices;  // categorical

  int64_t count() const;  // values of an integer or categorical parameter
};

// A parameter's decoded value: a number, or for a categorical its choice's index.
struct Space {
  std::vector<Param> params;

  size_t size() const { return params.size(); }
  // The GP's input width: numeric parameters one column each, categoricals one per choice.
  size_t feature_size() const;

  std::vector<double> decode(
      const std::vector<double>& u) const;  // u -> values (Note [latent and feature coordinates])
  std::vector<double> features(const std::vector<double>& u) const;
  // u -> the value as text, as mnist_train gets it on its command line.
  std::string value_text(size_t i, double value) const;
  // {"lr": 0.003, "batch-size": 128, "optimizer": "adamw"} for the study file and the table.
  nlohmann::json values_json(const std::vector<double>& u) const;

  nlohmann::json to_json() const;
  static Space from_json(const nlohmann::json& j);  // throws ember::Error naming the problem
};

// "lr=log:1e-4:1e-1", "momentum=float:0:0.99", "epochs=int:1:5", "optimizer=cat:sgd,adam,adamw". Throws ember::Error
// naming the problem (unknown type, empty range, log bound <= 0, ...).
Param parse_param(const std::string& spec);
// The whole space from a JSON file: {"params": [{"name": "lr", "type": "log", "low": 1e-4, "high": 0.1}, {"name":
// "optimizer", "type": "categorical", "choices": ["sgd", "adam"]}]}.
Space load_space_file(const std::string& path);

}  // namespace ember::tune
