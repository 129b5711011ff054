// BatchNorm1d / BatchNorm2d, as torch.nn.BatchNorm1d/2d.
//
//   train: y = (x - mean_B) / sqrt(var_B + eps) * weight + bias over the batch (and spatial) dims,
//          and, with track_running_stats, running_mean/var <- (1 - m) running + m batch stat (the
//          variance unbiased), num_batches_tracked += 1. momentum = nullopt uses the cumulative
//          average m = 1 / num_batches_tracked (which reads that counter on the host each step).
//   eval:  normalises with the running statistics (or with the batch's when not tracking them).
// Parameters weight (ones) and bias (zeros) when affine; buffers running_mean (zeros), running_var
// (ones), num_batches_tracked (i64 scalar) when track_running_stats. Formulas: kernels/ops/batch_norm.h.
// BatchNorm1d takes (N, C) or (N, C, L); BatchNorm2d (N, C, H, W), NCHW or channels-last.
#pragma once

#include <optional>

#include "core/arg.h"
#include "nn/module.h"

namespace ember::nn {

struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  EMBER_ARG(int64_t, num_features);
  EMBER_ARG(double, eps) = 1e-5;
  EMBER_ARG(std::optional<double>, momentum) = 0.1;
  EMBER_ARG(bool, affine) = true;
  EMBER_ARG(bool, track_running_stats) = true;
};

// The shared implementation; BatchNorm1dImpl and BatchNorm2dImpl only check the input rank.
class BatchNormImplBase : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;

  BatchNormOptions options;
  Tensor weight, bias;                                    // [C] when affine
  Tensor running_mean, running_var, num_batches_tracked;  // when track_running_stats

 protected:
  BatchNormImplBase(const BatchNormOptions& options, const char* name);
  virtual void check_input(const Tensor& x) const = 0;
  // Checks x; whether to normalise with the batch's statistics, the running statistics' momentum
  // for this step, and the counter the op adds the batch to (Note [batch norm counts its batches]
  // in kernels/ops/batch_norm.h; undefined when nothing counts, or when momentum = None counted
  // it here).
  bool begin_step(const Tensor& x, double& factor, Tensor& count);
};

}  // namespace ember::nn
