#include "apps/ember_tune/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "apps/ember_tune/rng.h"
#include "core/error.h"
#include "logging/svg_plot.h"

namespace ember::tune {

namespace {

Param uniform(const std::string& name, double lo, double hi) {
  Param p;
  p.name = name;
  p.type = ParamType::uniform;
  p.lo = lo;
  p.hi = hi;
  return p;
}

double branin(const std::vector<double>& x) {
  const double a = 1, b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, r = 6, s = 10, t = 1 / (8 * M_PI);
  const double q = x[1] - b * x[0] * x[0] + c * x[0] - r;
  return a * q * q + s * (1 - t) * std::cos(x[0]) + s;
}

double hartmann6(const std::vector<double>& x) {
  static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  static const double A[4][6] = {
      {10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14}, {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}};
  static const double P[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                 {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                 {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                 {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double e = 0;
    for (int j = 0; j < 6; ++j)
      e += A[i][j] * (x[static_cast<size_t>(j)] - P[i][j]) * (x[static_cast<size_t>(j)] - P[i][j]);
    sum += alpha[i] * std::exp(-e);
  }
  return -sum;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<TestFunction> test_functions() {
  std::vector<TestFunction> fns;
  Space br;
  br.params = {uniform("x1", -5, 10), uniform("x2", 0, 15)};
  fns.push_back({"branin", br, 0.397887357729739, 0.0, branin});
  Space h6;
  for (int i = 1; i <= 6; ++i) h6.params.push_back(uniform("x" + std::to_string(i), 0, 1));
  fns.push_back({"hartmann6", h6, -3.32236801141551, 0.0, hartmann6});
  fns.push_back({"noisy-branin", br, 0.397887357729739, 1.0, branin});
  return fns;
}

const TestFunction& test_function(const std::string& name) {
  static const std::vector<TestFunction> fns = test_functions();
  for (const TestFunction& f : fns)
    if (f.name == name) return f;
  EMBER_FAIL("unknown test function '", name, "' (expected branin, hartmann6 or noisy-branin)");
}

std::vector<double> regret_curve(const TestFunction& fn, SamplerKind kind, uint64_t seed, int evals) {
  SamplerOptions o;
  o.kind = kind;
  o.seed = seed;
  Rng noise(seed, 0xB0157ull);
  std::vector<Observation> history;
  std::vector<double> curve;
  double best_obs = std::numeric_limits<double>::infinity(), best_true = 0;
  for (int t = 0; t < evals; ++t) {
    const std::vector<double> u = suggest(fn.space, o, static_cast<uint64_t>(t), history, {});
    const double truth = fn.f(fn.space.decode(u));
    const double obs = truth + fn.noise_sd * noise.normal();
    history.push_back({u, obs, false});
    if (obs < best_obs) {
      best_obs = obs;
      best_true = truth;
    }
    curve.push_back(std::max(best_true - fn.optimum, 0.0));
  }
  return curve;
}

std::vector<double> BenchmarkResult::median() const {
  std::vector<double> m;
  for (size_t t = 0; t < curves.at(0).size(); ++t) {
    std::vector<double> col;
    for (const auto& c : curves) col.push_back(c[t]);
    m.push_back(median_of(col));
  }
  return m;
}

double BenchmarkResult::fraction_within(double tol, int evals) const {
  int hit = 0;
  for (const auto& c : curves) hit += c.at(static_cast<size_t>(evals - 1)) <= tol;
  return static_cast<double>(hit) / static_cast<double>(curves.size());
}

std::vector<BenchmarkResult> run_benchmark(const std::vector<std::string>& functions,
                                           const std::vector<SamplerKind>& samplers, int seeds, int evals) {
  EMBER_CHECK(seeds >= 1 && evals >= 1, "--benchmark needs at least one seed and one evaluation");
  std::vector<BenchmarkResult> out;
  for (const std::string& name : functions) {
    const TestFunction& fn = test_function(name);
    for (SamplerKind k : samplers) {
      BenchmarkResult r{name, k, {}, 0};
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < seeds; ++s) r.curves.push_back(regret_curve(fn, k, static_cast<uint64_t>(s), evals));
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "ember_tune: %s with %s: %d seeds x %d evaluations in %.1f s\n", name.c_str(),
                   sampler_name(k), seeds, evals, r.seconds);
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::string benchmark_table(const std::vector<BenchmarkResult>& results, int evals) {
  std::vector<int> at;
  for (int t : {10, 20, 30, 50, 100})
    if (t <= evals) at.push_back(t);
  std::ostringstream os;
  os << "| function | sampler |";
  for (int t : at) os << " regret @" << t << " |";
  os << " within 1% of f* by 30 | evaluations until 90% of seeds are within 1% | s per seed |\n|---|---|";
  for (size_t i = 0; i < at.size(); ++i) os << "---|";
  os << "---|---|---|\n";
  char buf[64];
  for (const BenchmarkResult& r : results) {
    const std::vector<double> m = r.median();
    os << "| " << r.function << " | " << sampler_name(r.sampler) << " |";
    for (int t : at) {
      std::snprintf(buf, sizeof buf, " %.3g |", m[static_cast<size_t>(t - 1)]);
      os << buf;
    }
    const double tol = 0.01 * std::abs(test_function(r.function).optimum);
    if (evals >= 30) {
      std::snprintf(buf, sizeof buf, " %.0f%% |", 100 * r.fraction_within(tol, 30));
      os << buf;
    } else {
      os << " - |";
    }
    int until = 0;
    for (int t = 1; t <= evals && until == 0; ++t)
      if (r.fraction_within(tol, t) >= 0.9) until = t;
    os << (until ? " " + std::to_string(until) + " |" : " > " + std::to_string(evals) + " |");
    std::snprintf(buf, sizeof buf, " %.2f |\n", r.seconds / static_cast<double>(r.curves.size()));
    os << buf;
  }
  return os.str();
}

void write_benchmark_svg(const std::string& path, const std::vector<BenchmarkResult>& results) {
  std::map<std::string, logging::Chart> charts;
  std::vector<std::string> order;
  for (const BenchmarkResult& r : results) {
    if (!charts.count(r.function)) {
      charts[r.function] = {r.function + ": median simple regret over " + std::to_string(r.curves.size()) + " seeds",
                            "evaluations",
                            "simple regret",
                            {}};
      charts[r.function].log_y = true;
      order.push_back(r.function);
    }
    logging::Series s{sampler_name(r.sampler), {}, {}};
    const std::vector<double> m = r.median();
    for (size_t t = 0; t < m.size(); ++t) {
      s.x.push_back(static_cast<double>(t + 1));
      s.y.push_back(std::max(m[t], 1e-8));  // a regret of 0 drawn at 1e-8 (the log axis has no 0)
    }
    charts[r.function].series.push_back(s);
  }
  std::vector<logging::Chart> list;
  for (const std::string& f : order) list.push_back(charts[f]);
  logging::write_svg(path, list);
}

}  // namespace ember::tune
