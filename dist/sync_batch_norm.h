// SyncBatchNorm: batch normalisation whose training statistics cover the global batch, i.e. the
// union of every rank's local batch, as torch.nn.SyncBatchNorm.
//
//   auto pg = dist::init_process_group();
//   auto model = dist::convert_sync_batchnorm(make_model());   // every BatchNorm1d/2d replaced
//   // or directly: dist::SyncBatchNorm bn(dist::SyncBatchNormOptions(64).process_group(pg));
//
// Same options, parameters (weight, bias), buffers (running_mean, running_var, num_batches_tracked)
// and state_dict names as nn::BatchNorm1d/2d, so checkpoints interchange. Input (N, C) or (N, C, *)
// (2-D, 3-D, 4-D NCHW or channels-last). Ranks may have different local batch sizes (even 0).
//
// Training, with a group of size > 1 (one collective each way, no host reads of values):
//   Per channel c, rank r holds n_r = numel / C values x_i (n_r known from the shape) and computes,
//   in the statistics dtype s (f32 for f16/bf16/f32 input, f64 for f64; two passes, stable)
//     mean_r = sum_i x_i / n_r,   var_r = sum_i (x_i - mean_r)^2 / n_r     (0, 0 when n_r = 0)
//   forward:  ONE all_gather of the packed [2C + 1] tensor (mean_r, var_r, n_r) -> [W, 2C + 1], then
//     M    = sum_r n_r
//     mean = sum_r n_r mean_r / M
//     var  = sum_r n_r (var_r + (mean_r - mean)^2) / M              (biased: for normalising)
//     invstd = 1 / sqrt(var + eps),  xhat = (x - mean) invstd,  y = xhat w + b
//     running_mean <- (1 - m) running_mean + m mean
//     running_var  <- (1 - m) running_var + m var M / (M - 1)        (unbiased), num_batches_tracked += 1
//   This is PyTorch's scheme (batch_norm_stats + all_gather + gather_stats_with_counts). It is used
//   instead of an all_reduce of (sum x, sum x^2, n) because var = E[x^2] - mean^2 cancels
//   catastrophically in f32 when |mean| >> std; here every term is a non-negative sum.
//   backward (g = dL/dy): local per-channel sums
//     sum_g = sum_i g_i,   sum_gx = sum_i g_i xhat_i
//   then ONE all_reduce (sum) of the packed [2C] tensor (sum_g, sum_gx) -> global S_g, S_gx, and
//     dx     = w invstd (g - S_g / M - xhat S_gx / M)
//     dw     = sum_gx  (this rank's contribution; all_reduce(sum) over ranks = the full-batch dw)
//     db     = sum_g   (likewise) -- what DDP then averages, as in PyTorch.
//   The all_reduce runs only when dx is needed. Every rank must run forward and backward through
//   the layer together (collectives are matched in order). No double backward.
//
// Everything else is exactly nn::BatchNorm (kernels/ops/batch_norm.h), with no communication:
//   - eval mode with running statistics (normalise with them);
//   - eval mode without running statistics (the local batch's statistics, as PyTorch);
//   - a group of size 1, or no group at all in a process that was not started as part of a
//     multi-process job (launch_env().world_size <= 1).
// Training with no group (neither options.process_group nor dist::default_group()) in a process
// started with WORLD_SIZE > 1 is an error: normalising with local statistics there is a silent bug.
// momentum = nullopt (cumulative average) reads num_batches_tracked on the host, as nn::BatchNorm.
// The process group is resolved at each forward: options' group, else default_group().
#pragma once

#include <memory>
#include <optional>

#include "dist/process_group.h"
#include "core/arg.h"
#include "nn/batch_norm.h"
#include "nn/module.h"

namespace ember::dist {

struct SyncBatchNormOptions {
  SyncBatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  SyncBatchNormOptions(const nn::BatchNormOptions& o)                          // NOLINT
      : num_features_(o.num_features()),
        eps_(o.eps()),
        momentum_(o.momentum()),
        affine_(o.affine()),
        track_running_stats_(o.track_running_stats()) {}
  nn::BatchNormOptions batch_norm_options() const {
    return nn::BatchNormOptions(num_features_)
        .eps(eps_)
        .momentum(momentum_)
        .affine(affine_)
        .track_running_stats(track_running_stats_);
  }
  EMBER_ARG(int64_t, num_features);
  EMBER_ARG(double, eps) = 1e-5;
  EMBER_ARG(std::optional<double>, momentum) = 0.1;
  EMBER_ARG(bool, affine) = true;
  EMBER_ARG(bool, track_running_stats) = true;
  // null: dist::default_group() at each forward.
  EMBER_ARG(ProcessGroupPtr, process_group);
};

class SyncBatchNormImpl : public nn::Module {
 public:
  explicit SyncBatchNormImpl(const SyncBatchNormOptions& options);
  // A SyncBatchNorm that adopts bn's parameters and buffers (the same tensors, so an optimizer
  // built on bn's parameters keeps working), options and train/eval mode.
  static std::shared_ptr<SyncBatchNormImpl> from_batch_norm(const nn::BatchNormImplBase& bn,
                                                            ProcessGroupPtr pg = nullptr);

  Tensor forward(const Tensor& x) override;
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;
  // The group forward would use now (options', else the default; null when neither).
  ProcessGroupPtr group() const;

  SyncBatchNormOptions options;
  Tensor weight, bias;                                    // [C] when affine
  Tensor running_mean, running_var, num_batches_tracked;  // when track_running_stats

 private:
  SyncBatchNormImpl(const SyncBatchNormOptions& options, const nn::BatchNormImplBase* adopt);
};
EMBER_MODULE(SyncBatchNorm);

// Replaces every nn::BatchNorm1d / BatchNorm2d in the tree under `model` by a SyncBatchNorm that
// carries the same parameters and buffers (the same tensors), options and mode, with process group
// `pg` (null: the default group at each forward). Returns the model, or the new SyncBatchNorm when
// `model` itself is a BatchNorm. Children are replaced in their parent's registration
// (Module::replace_module, state_dict keys unchanged) and in the handles Sequential, Residual and
// Checkpoint keep. A parent of another type that keeps its own handle (a member nn::BatchNorm2d)
// would go on calling the old layer: such a BatchNorm that is still referenced after the
// replacement is reported on stderr; build such modules with SyncBatchNorm directly.
std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> model, ProcessGroupPtr pg = nullptr);

}  // namespace ember::dist
