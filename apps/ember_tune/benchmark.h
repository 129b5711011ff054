// The samplers on standard test functions with known optima (ember_tune --benchmark), through the same suggest() a
// study uses: the proof that GP-EI needs fewer evaluations than random search.
//
//   branin        2-d, [-5, 10] x [0, 15], minimum 0.397887 at three points
//   hartmann6     6-d, [0, 1]^6, minimum -3.32237
//   noisy-branin  Branin observed with N(0, 1) noise; the regret is the true value at the point
//                 with the best observation (what a user of a noisy study would pick)
//
// Simple regret after t evaluations: f(recommended point) - f*, the recommendation being the best evaluation so far.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/ember_tune/sampler.h"

namespace ember::tune {

struct TestFunction {
  std::string name;
  Space space;
  double optimum;                                         // f*
  double noise_sd;                                        // of the observations
  std::function<double(const std::vector<double>& x)> f;  // true value at decoded x
};

std::vector<TestFunction> test_functions();
const TestFunction& test_function(const std::string& name);

// Regret after each evaluation (size evals) of one run.
std::vector<double> regret_curve(const TestFunction& fn, SamplerKind kind, uint64_t seed, int evals);

struct BenchmarkResult {
  std::string function;
  SamplerKind sampler;
  std::vector<std::vector<double>> curves;  // per seed
  std::vector<double> median() const;       // per evaluation
  double fraction_within(double tol,
                         int evals) const;  // seeds with regret <= tol by `evals`
  double seconds = 0;
};

// Every (function, sampler) pair over seeds 0..seeds-1; prints progress to stderr.
std::vector<BenchmarkResult> run_benchmark(const std::vector<std::string>& functions,
                                           const std::vector<SamplerKind>& samplers, int seeds, int evals);
// The Markdown table (median regret at 10/20/30/50, fraction within 1% of |f*| by 30, and the evaluations after which
// 90% of the seeds are within 1%).
std::string benchmark_table(const std::vector<BenchmarkResult>& r, int evals);
// Median log10 regret against evaluations, one chart per function.
void write_benchmark_svg(const std::string& path, const std::vector<BenchmarkResult>& r);

}  // namespace ember::tune
