// Optimizer: the base of SGD, Adam and AdamW, as in libtorch.
//
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
//   for (...) { opt.zero_grad(); loss.backward(); opt.step(); }
//
// Parameter groups carry their own options (lr, weight decay, ...); a group built without options
// takes the optimizer's defaults:
//   std::vector<optim::ParamGroup> groups{optim::ParamGroup(body_params),
//       optim::ParamGroup(head_params, std::make_unique<optim::SGDOptions>(SGDOptions(0.01)))};
//
// step() updates every parameter that has a gradient with one fused multi-tensor op per
// (group, device, dtype) (kernels/ops/optim.h: sgd_step, adam_step). Parameters whose grad is
// none are skipped, as in PyTorch. See Note [optimizer hyperparameters on the device] in
// kernels/ops/optim.h for how lr, momentum and the step counters reach the kernels without a
// host sync (and with CUDA graphs); sync_hyperparameters() is that upload.
//
// state_dict(): tensors "state.<k>.<name>" for parameter k (counted over the groups in order),
// metadata "optimizer" (the class) and "param_groups" (JSON: options, parameter indices,
// initial_lr). load_state_dict() checks everything before changing anything.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "io/state_dict.h"

namespace ember::optim {

class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // The value cyclic schedules vary with the lr: SGD's momentum, Adam's beta1.
  virtual double get_momentum() const = 0;
  virtual void set_momentum(double m) = 0;
  // Every field as name -> number (booleans as 0/1), for state_dict and messages.
  virtual std::map<std::string, double> to_map() const = 0;
  virtual void from_map(const std::map<std::string, double>& m) = 0;
  // Throws when a value is out of range (negative lr, ...).
  virtual void validate() const = 0;
};

class ParamGroup {
 public:
  // Options taken from the optimizer's defaults.
  explicit ParamGroup(std::vector<Tensor> params);
  ParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options);
  ParamGroup(const ParamGroup& other);
  ParamGroup& operator=(const ParamGroup& other);
  ParamGroup(ParamGroup&&) = default;
  ParamGroup& operator=(ParamGroup&&) = default;

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  bool has_options() const { return options_ != nullptr; }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }

  // The lr the first scheduler saw (PyTorch's group["initial_lr"]).
  std::optional<double> initial_lr;

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

// What scales a step's gradients: the loss scaler's hooks (amp/: both optional, f32 [1] on the
// params' device) and gradient clipping folded into the step (clip_grad_norm_into_step in
// optim/clip_grad.h; Note [clipping folded into the step] in kernels/ops/optim.h).
struct GradScaling {
  Tensor found_inf;  // nonzero: skip the step (params, state and step counters untouched)
  Tensor inv_scale;  // grads are multiplied by it before use
  Tensor clip_norm;  // the total norm: grads are multiplied by min(1, max_norm / (clip_norm + 1e-6))
  double max_norm = 0;
};

class Optimizer : public Stateful {
 public:
  Optimizer(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults, std::string name);
  ~Optimizer() override;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  void step() { step(GradScaling{}); }
  virtual void step(const GradScaling& scaling) = 0;
  // Sets every parameter's grad to none (or to zeros).
  void zero_grad(bool set_to_none = true);

  void add_param_group(ParamGroup group);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  // Number of parameters over all groups.
  size_t size() const;

  // Uploads hyperparameters that changed since the last upload to the device tensors the kernels
  // read. step() calls it; in CUDA graph mode call it before each replay (after scheduler.step()).
  void sync_hyperparameters();
  // The device tensor of group g's hyperparameters on `device` (for graph-mode code and tests).
  Tensor hyperparameter_tensor(size_t group, Device device);

  // Note [hyperparameter rows]: K optimizer steps captured in one CUDA graph must each read their
  // own hyperparameters (a schedule moves lr every step). With rows, every group's hyperparameters
  // on each device get a [rows, K] table beside the single tensor: use_hyper_row(j) makes the steps
  // that follow read row j (capture step j of the graph after it; -1: the single tensor again),
  // stage_hyper_row(j) keeps the current options' values as row j, upload_hyper_rows() copies the
  // staged rows to the device before a replay (stream-ordered, no host sync).
  void make_hyper_rows(int64_t rows);
  void use_hyper_row(int64_t row);
  void stage_hyper_row(int64_t row);
  void upload_hyper_rows();
  // Eager steps (Note [hyperparameter rows ahead] in optim/schedule_ahead.h): row j when every
  // group's uploaded row j holds exactly its options' current values (what a step's own upload
  // would copy), else the single tensor again; returns whether row j is used.
  bool use_hyper_row_if_current(int64_t row);

  // Per-parameter state ("exp_avg", "step", ...), empty before the first step.
  const TensorDict& state(const Tensor& param) const;

  // "SGD", "Adam", "AdamW".
  const std::string& name() const { return name_; }
  StateDict state_dict() const override;
  // Checks before it applies anything: names, shapes, dtypes (the parameter's: never converted
  // silently), and values (finite; second moments such as exp_avg_sq never negative; step >= 0).
  void load_state_dict(const StateDict& state) override;
  // Whether a step gives parameters state (Adam's moments, SGD's momentum buffer), i.e. whether a
  // checkpoint saved after step 0 must hold some.
  bool keeps_state() const;

 protected:
  // The values of the hyper tensor for these options (layout of the op, kernels/ops/optim.h).
  virtual std::vector<double> hyper_values(const OptimizerOptions& o) const = 0;
  // Names of the state tensors a parameter has under these options (to check a loaded state).
  virtual std::vector<std::string> state_names(const OptimizerOptions& o) const = 0;

  // The state of a parameter, created empty on first use.
  TensorDict& mutable_state(const Tensor& param);
  // Params of group g that have a grad, bucketed by (device, dtype), in group order.
  struct Bucket {
    Device device;
    DType dtype;
    std::vector<Tensor> params, grads;
  };
  std::vector<Bucket> buckets(size_t group) const;
  // The hyper tensor of group g on device, with its current values uploaded.
  Tensor hyper(size_t group, Device device);
  // Group g's ticket on a CUDA device (int32 [1], 0 at rest), made with its hyper tensor (call
  // hyper() first): the step op's update kernel counts the steps with it (kernels/ops/optim.h);
  // undefined on the CPU.
  Tensor ticket(size_t group, Device device);
  // found_inf / inv_scale moved to `device` if they live elsewhere.
  static Tensor on_device(const Tensor& t, Device device);

 private:
  struct HyperSlot {
    Tensor tensor;
    Tensor ticket;
    std::vector<double> uploaded;
    Tensor rows;                  // [rows, K] on the device (Note [hyperparameter rows])
    std::vector<double> staged;   // the rows' next values, row-major
    std::vector<double> on_rows;  // what upload_hyper_rows last copied to `rows`
  };
  // Calls f(group, device) once for every group and device its parameters are on.
  void for_each_slot(const std::function<void(size_t, Device)>& f) const;
  HyperSlot& slot(size_t group, Device device);
  void upload(HyperSlot& s, const std::vector<double>& values);

  std::string name_;
  std::vector<ParamGroup> groups_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::unordered_map<const TensorImpl*, TensorDict> state_;
  std::map<std::pair<size_t, int>, HyperSlot> hyper_;
  int64_t row_ = -1;  // the row hyper() hands out (-1: the single tensor)
};

}  // namespace ember::optim
