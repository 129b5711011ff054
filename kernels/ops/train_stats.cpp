// train_stats (see train_stats.h): shape checks, the CPU kernel, the op's definition and its
// functional API.
#include "kernels/ops/train_stats.h"

#include <cmath>

#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

void check_state(const char* what, const Tensor& t, DType dtype) {
  EMBER_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.is_contiguous(), "train_stats: ", what,
              " must be a one-element contiguous ", dtype, " tensor, got ",
              t.defined() ? t.describe() : std::string("undefined"));
}

std::vector<TensorSpec> infer_train_stats(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 8,
              "train_stats: expects (logits, labels, loss, loss_sum, correct, nonfinite_run, diverged_at, steps), got ",
              in.size(), " inputs");
  const Tensor &logits = in[0], &labels = in[1];
  check_state("loss", in[2], DType::f32);
  EMBER_CHECK(logits.defined() && logits.dim() == 2 && is_floating(logits.dtype()),
              "train_stats: logits must be a floating [N, K] tensor, got ",
              logits.defined() ? logits.describe() : std::string("undefined"));
  EMBER_CHECK(
      labels.defined() && labels.dim() == 1 && labels.dtype() == DType::i64 && labels.shape()[0] == logits.shape()[0],
      "train_stats: labels must be i64 [", logits.shape()[0], "] (one per row of the logits), got ",
      labels.defined() ? labels.describe() : std::string("undefined"));
  EMBER_CHECK(logits.shape()[1] >= 1 || logits.shape()[0] == 0, "train_stats: logits ", logits.shape(),
              " have no classes");
  check_state("loss_sum", in[3], DType::f32);
  check_state("correct", in[4], DType::i64);
  check_state("nonfinite_run", in[5], DType::f32);
  check_state("diverged_at", in[6], DType::f32);
  check_state("steps", in[7], DType::f32);
  const auto& a = attrs.get<TrainStatsAttrs>();
  EMBER_CHECK(a.limit >= 1 && (a.count_step == 0 || a.count_step == 1),
              "train_stats: limit must be >= 1 and count_step 0 or 1, got limit = ", a.limit,
              ", count_step = ", a.count_step);
  std::vector<TensorSpec> out;
  for (int i = 3; i < 8; ++i) out.push_back({in[i].shape(), in[i].dtype(), {}, i});
  return out;
}

template <class T>
int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const int64_t N = logits.shape()[0], K = logits.shape()[1];
  const int64_t sr = logits.strides()[0], sk = logits.strides()[1];
  const T* p = static_cast<const T*>(logits.data_ptr());
  const int64_t* y = labels.data<int64_t>();
  const int64_t sy = labels.strides()[0];
  int64_t correct = 0;
  for (int64_t i = 0; i < N; ++i) {
    const T* row = p + i * sr;
    double best = static_cast<double>(row[0]);
    int64_t idx = 0;
    for (int64_t k = 1; k < K && !std::isnan(best); ++k) {
      const double v = static_cast<double>(row[k * sk]);
      if (v > best || std::isnan(v)) {
        best = v;
        idx = k;
      }
    }
    correct += idx == y[i * sy] ? 1 : 0;
  }
  return correct;
}

void train_stats_cpu(const KernelCall& c) {
  const auto& a = c.attr<TrainStatsAttrs>();
  int64_t correct = 0;
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "train_stats", [&] { correct = count_correct<scalar_t>(c.in[0], c.in[1]); });
  const float loss = *c.in[2].data<float>();
  float &sum = *c.in[3].data<float>(), &run = *c.in[5].data<float>(), &at = *c.in[6].data<float>(),
        &steps = *c.in[7].data<float>();
  sum += loss;
  *c.in[4].data<int64_t>() += correct;
  run = std::isfinite(loss) ? 0.0f : run + 1.0f;
  if (run >= static_cast<float>(a.limit) && at < 0.0f) at = steps + 1.0f;
  if (a.count_step != 0) steps += 1.0f;
}

}  // namespace

void define_op_train_stats(OpInfo& info) {
  info.doc = "a training step's loss sum, correct count and divergence guard, in place, one launch";
  info.infer = infer_train_stats;
  info.contiguous_inputs = false;  // the logits and labels are read through their strides
  info.dtype_input = 0;            // a call's dtype is its logits' (the counters are always f32)
  info.cost = [](const KernelCall& c) { return Cost{static_cast<double>(c.in[0].nbytes() + c.in[1].nbytes()), 0}; };
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = train_stats_cpu,
                    .dtypes = kFloatTypes,
                    .note = "one loop over the rows"});
}

void train_stats_(const Tensor& logits, const Tensor& labels, const Tensor& loss, Tensor& loss_sum, Tensor& correct,
                  Tensor& nonfinite_run, Tensor& diverged_at, Tensor& steps, int64_t limit, bool count_step) {
  call_into(OpId::train_stats, {logits, labels, loss, loss_sum, correct, nonfinite_run, diverged_at, steps},
            {loss_sum, correct, nonfinite_run, diverged_at, steps}, TrainStatsAttrs{limit, count_step ? 1 : 0});
}

}  // namespace ember
