#include "nn/batch_norm.h"

#include "core/autograd/node.h"
#include "kernels/functional.h"
#include "nn/batch_norm1d.h"
#include "nn/batch_norm2d.h"
#include "nn/init.h"

namespace ember::nn {

BatchNormImplBase::BatchNormImplBase(const BatchNormOptions& o, const char* name) : Module(name), options(o) {
  EMBER_CHECK(o.num_features() > 0, name, ": num_features must be positive, got ", o.num_features());
  EMBER_CHECK(o.eps() > 0, name, ": eps must be positive, got ", o.eps());
  EMBER_CHECK(!o.momentum() || (*o.momentum() >= 0 && *o.momentum() <= 1), name, ": momentum must be in [0, 1], got ",
              o.momentum().value_or(0));
  const int64_t c = o.num_features();
  if (o.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
}

void BatchNormImplBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  autograd::NoGradGuard ng;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNormImplBase::reset_parameters() {
  reset_running_stats();
  if (options.affine()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

bool BatchNormImplBase::begin_step(const Tensor& x, double& factor, Tensor& count) {
  check_input(x);
  EMBER_CHECK(x.shape()[1] == options.num_features(), type_name(), ": input ", x.shape(), " has ", x.shape()[1],
              " channels but the layer expects ", options.num_features());
  factor = options.momentum().value_or(0.0);
  count = Tensor();
  if (is_training() && options.track_running_stats()) {
    if (options.momentum()) {
      count = num_batches_tracked;  // the op counts the batch in its own launch
    } else {
      // Cumulative moving average: 1 / (batches seen), the counter read after counting (a host
      // sync on CUDA, as in PyTorch).
      autograd::NoGradGuard ng;
      num_batches_tracked.add_(1.0);
      factor = 1.0 / num_batches_tracked.item();
    }
  }
  // Batch statistics while training, and always when there are no running statistics (the running
  // tensors are then undefined, so nothing is updated).
  return is_training() || !options.track_running_stats();
}

Tensor BatchNormImplBase::forward(const Tensor& x) {
  double factor = 0;
  Tensor count;
  const bool use_batch = begin_step(x, factor, count);
  return batch_norm(x, weight, bias, running_mean, running_var, use_batch, factor, options.eps(), count);
}

Tensor BatchNorm2dImpl::forward_max_pooled(const Tensor& x, std::array<int64_t, 2> kernel,
                                           std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, bool relu) {
  double factor = 0;
  Tensor count;
  const bool use_batch = begin_step(x, factor, count);
  return batch_norm_max_pool2d(x, weight, bias, running_mean, running_var, use_batch, factor, options.eps(), kernel,
                               stride, padding, relu, count);
}

Tensor BatchNorm2dImpl::forward_global_avg_pooled(const Tensor& x, bool relu) {
  double factor = 0;
  Tensor count;
  const bool use_batch = begin_step(x, factor, count);
  return batch_norm_global_avg_pool2d(x, weight, bias, running_mean, running_var, use_batch, factor, options.eps(),
                                      relu, count);
}

std::string BatchNormImplBase::extra_repr() const {
  return str(options.num_features(), ", eps=", options.eps(),
             ", momentum=", options.momentum() ? str(*options.momentum()) : std::string("None"),
             ", affine=", options.affine() ? "true" : "false",
             ", track_running_stats=", options.track_running_stats() ? "true" : "false");
}

void BatchNorm1dImpl::check_input(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d: expects a 2-D or 3-D input (N, C) or (N, C, L), got ",
              x.shape());
}

void BatchNorm2dImpl::check_input(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 4, "BatchNorm2d: expects a 4-D input (N, C, H, W), got ", x.shape());
}

}  // namespace ember::nn
