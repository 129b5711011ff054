// Test samples of train_stats (kernels/ops/train_stats.*): finite, NaN and inf losses below, at and
// past the guard's limit, an already diverged run, a micro-batch that does not step; logits with
// ties and NaNs (argmax's first maximum), strided logits, more rows than one block, no rows.
#include <cmath>

#include "kernels/functional.h"
#include "kernels/ops/train_stats.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

struct StatsCase {
  const char* name;
  Tensor logits;   // f64 [N, K]
  double loss;     // this step's
  double run = 0;  // the guard's state before
  double diverged_at = -1;
  int64_t limit = 1, count_step = 1;
};

OpSample stats_sample(const StatsCase& sc, uint64_t seed) {
  const int64_t N = sc.logits.shape()[0], K = std::max<int64_t>(1, sc.logits.shape()[1]);
  OpSample s;
  s.name = sc.name;
  // labels: every third row the logits' first maximum (so some rows count), the rest drawn
  Tensor labels = samples::randint({N}, K, seed);
  if (N > 0) {
    Tensor best = argmax(sc.logits, 1);
    for (int64_t i = 0; i < N; i += 3) labels.data<int64_t>()[i] = best.data<int64_t>()[i];
  }
  s.inputs = {sc.logits,
              labels,
              full({1}, sc.loss, DType::f32),
              full({1}, 2.5, DType::f32),
              full({1}, 7, DType::i64),
              full({1}, sc.run, DType::f32),
              full({1}, sc.diverged_at, DType::f32),
              full({1}, 41, DType::f32)};
  s.attrs = TrainStatsAttrs{sc.limit, sc.count_step};
  s.keep_dtype = {2, 3, 5, 6, 7};
  s.gradcheck = false;
  return s;
}

}  // namespace

std::vector<OpSample> samples_train_stats() {
  const TensorOptions f64(DType::f64);
  Tensor ties = tensor({1, 3, 3, 0, 2, 2, 2, 2, -1, 5, 5, 5}, {4, 3}, f64);
  Tensor nans = tensor({1, NAN, 3, NAN, NAN, 0, 2, 1, NAN}, {3, 3}, f64);
  Tensor wide = samples::uniform({10, 40}, -1, 1, 5);
  std::vector<StatsCase> cases{
      {"finite loss, MNIST batch [128,10]", samples::uniform({128, 10}, -3, 3, 1), 0.75},
      {"ties: the first maximum", ties, 1.25},
      {"NaN logits: the first NaN is the maximum", nans, 0.5},
      {"strided logits (a column slice)", wide.slice(1, 3, 13), 2.0},
      {"more rows than a block [1000,7]", samples::uniform({1000, 7}, -1, 1, 2), 0.1},
      {"NaN loss reaches limit 1: diverged at steps + 1", samples::uniform({5, 4}, -1, 1, 3), NAN},
      {"inf loss below limit 3", samples::uniform({5, 4}, -1, 1, 4), INFINITY, 1, -1, 3},
      {"inf loss reaching limit 3", samples::uniform({5, 4}, -1, 1, 6), -INFINITY, 2, -1, 3},
      {"finite loss resets the run", samples::uniform({5, 4}, -1, 1, 7), 3.0, 2, -1, 3},
      {"already diverged: the step stays", samples::uniform({5, 4}, -1, 1, 8), NAN, 4, 12, 3},
      {"a micro-batch that does not step", samples::uniform({6, 2}, -1, 1, 9), NAN, 0, -1, 1, 0},
      {"no rows", zeros({0, 10}, DType::f64), 0.5},
  };
  std::vector<OpSample> out;
  uint64_t seed = 8000;
  for (const StatsCase& sc : cases) out.push_back(stats_sample(sc, ++seed));
  return out;
}

}  // namespace ember
