// What each term assumes: Note [launch time model] in time_model.h.
#include "bench/model/time_model.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ember::model {

namespace {

[[noreturn]] void fail_at(const std::string& path, int line, const std::string& what) {
  throw std::runtime_error(path + ":" + std::to_string(line) + ": " + what);
}

// The file's keys: the times in microseconds (what a person reads), the fractions as they are.
struct Key {
  const char* name;
  double TimeParams::*field;
  double unit;  // file value x unit = field value
};
constexpr std::array<Key, 6> kKeys{{{"launch_us", &TimeParams::launch_s, 1e-6},
                                    {"wave_us", &TimeParams::wave_s, 1e-6},
                                    {"step_us", &TimeParams::step_s, 1e-6},
                                    {"hbm_fraction", &TimeParams::hbm_fraction, 1},
                                    {"tensor_fraction", &TimeParams::tensor_fraction, 1},
                                    {"simt_fraction", &TimeParams::simt_fraction, 1}}};
constexpr const char* kStale = "stale";

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool is_tensor(MathUnit u) { return u != MathUnit::fp32_simt; }

// Least squares of log(predicted / measured): every call counts the same whatever its size.
double objective(const GpuSpec& gpu, const TimeParams& p, const std::vector<TimedCall>& calls) {
  double sum = 0;
  for (const TimedCall& c : calls) {
    double r = std::log(predict_time(gpu, p, c.in).predicted_s / c.measured_s);
    sum += r * r;
  }
  return sum;
}

TimeParams with_logs(TimeParams p, const std::array<double, 3>& x) {
  p.launch_s = std::exp(x[0]);
  p.wave_s = std::exp(x[1]);
  p.step_s = std::exp(x[2]);
  return p;
}

}  // namespace

// Format: '#' lines are the header (kept, in order), blank lines are skipped, every other line is
// "<key> <value>" with each key of kKeys exactly once, or "stale <op> <variant> <case>" (any number).
TimeParams load_time_params(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error(path + ": cannot open the time model's parameters (kernel_model --fit writes them)");
  TimeParams p;
  std::array<bool, kKeys.size()> seen{};
  std::string text;
  int line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.empty()) continue;
    if (text[0] == '#') {
      p.header.push_back(text);
      continue;
    }
    std::istringstream ss(text);
    std::string key, value, extra;
    ss >> key;
    if (key == kStale) {
      std::string rest = text.substr(std::min(text.size(), key.size() + 1));
      if (std::count(rest.begin(), rest.end(), ' ') < 2)
        fail_at(path, line, "expected 'stale <op> <variant> <case>', got '" + text + "'");
      p.stale.push_back(rest);
      continue;
    }
    ss >> value;
    if (ss >> extra) fail_at(path, line, "expected '<key> <value>', got '" + text + "'");
    auto it = std::find_if(kKeys.begin(), kKeys.end(), [&](const Key& k) { return key == k.name; });
    if (it == kKeys.end()) fail_at(path, line, "unknown key '" + key + "'");
    size_t i = static_cast<size_t>(it - kKeys.begin());
    if (seen[i]) fail_at(path, line, "'" + key + "' given twice");
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno != 0 || !(v > 0) || !std::isfinite(v))
      fail_at(path, line, "expected a positive number for " + key + ", got '" + value + "'");
    p.*(it->field) = v * it->unit;
    seen[i] = true;
  }
  for (size_t i = 0; i < kKeys.size(); ++i)
    if (!seen[i]) fail_at(path, line, std::string("the key '") + kKeys[i].name + "' is missing");
  return p;
}

void save_time_params(const std::string& path, const TimeParams& p) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    for (const std::string& h : p.header) out << h << "\n";
    char buf[64];
    for (const Key& k : kKeys) {
      std::snprintf(buf, sizeof buf, "%s %.4g\n", k.name, p.*(k.field) / k.unit);
      out << buf;
    }
    for (const std::string& row : p.stale) out << kStale << " " << row << "\n";
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": writing the time model's parameters failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": could not replace the file with " + tmp);
  }
}

std::vector<KernelLatency> kernel_latencies(const std::vector<KernelStats>& kernels, const std::vector<int>& resident) {
  if (resident.size() != kernels.size()) throw std::invalid_argument("kernel_latencies: one resident count per kernel");
  std::vector<KernelLatency> out;
  std::vector<double> traffic;
  double total = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelStats& k = kernels[i];
    KernelLatency l;
    l.launches = std::max(k.launches, 1);
    l.blocks_per_launch = static_cast<double>(k.blocks) / l.launches;
    l.steps_per_block =
        k.blocks == 0 ? 0 : static_cast<double>(k.barriers + k.mbarrier_phases) / static_cast<double>(k.blocks);
    l.threads_per_block = std::max(k.threads_per_block, 1);
    l.resident_blocks_per_sm = resident[i];
    double t = static_cast<double>((k.shared_load + k.shared_store).wavefronts) +
               static_cast<double>((k.global_load + k.global_store).sectors) * 32 / kL1WavefrontBytes;
    traffic.push_back(t);
    total += t;
    out.push_back(l);
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].share = total > 0 ? traffic[i] / total : 1.0 / out.size();
  return out;
}

TimeBreakdown predict_time(const GpuSpec& gpu, const TimeParams& p, const TimeInput& in) {
  TimeBreakdown t;
  // the roofline's terms at full issue rate; each kernel applies its own below
  double issue0 = std::max(in.roofline.issue_efficiency, 1e-3);
  double memory = in.roofline.memory_s * issue0 / p.hbm_fraction;
  double compute = in.roofline.compute_s * issue0 / (is_tensor(in.unit) ? p.tensor_fraction : p.simt_fraction);
  double l1 = in.roofline.l1_s * issue0;
  double mem_sum = 0, compute_sum = 0, l1_sum = 0;
  for (const KernelLatency& k : in.kernels) {
    double blocks = std::max(1.0, k.blocks_per_launch * in.work_scale);
    int resident = std::max(k.resident_blocks_per_sm, 1);
    double waves = std::ceil(blocks / (static_cast<double>(resident) * gpu.sms));
    double active = std::min(1.0, blocks / gpu.sms);
    double per_sm = std::min(static_cast<double>(resident), std::ceil(blocks / gpu.sms));
    double warps = per_sm * std::ceil(k.threads_per_block / 32.0);
    double issue = std::max(std::min(1.0, warps / gpu.max_warps_per_sm / kFullLatencyHidingOccupancy), 1e-3);
    mem_sum += k.share * memory / issue;
    compute_sum += k.share * compute / issue / active;
    l1_sum += k.share * l1 / issue / active;
    t.waves = std::max(t.waves, waves);
    t.latency_s += k.launches * waves * (p.wave_s + k.steps_per_block * p.step_s);
    t.launch_s += k.launches * p.launch_s;
  }
  t.throughput_s = std::max({mem_sum, compute_sum, l1_sum});
  t.predicted_s = t.launch_s + std::max(t.throughput_s, t.latency_s);
  if (t.launch_s >= std::max(t.throughput_s, t.latency_s)) t.bound = "launch";
  else if (t.latency_s >= t.throughput_s) t.bound = "latency";
  else if (t.throughput_s == mem_sum) t.bound = "memory";
  else if (t.throughput_s == compute_sum) t.bound = "compute";
  else t.bound = "L1";
  return t;
}

std::vector<double> relative_errors(const GpuSpec& gpu, const TimeParams& p, const std::vector<TimedCall>& calls) {
  std::vector<double> e;
  for (const TimedCall& c : calls) e.push_back(std::abs(predict_time(gpu, p, c.in).predicted_s / c.measured_s - 1));
  return e;
}

// Nelder-Mead (reflection 1, expansion 2, contraction 1/2, shrink 1/2) over the three logarithms,
// from a simplex one factor of 3 wide around the start; 3 parameters converge in a few hundred
// evaluations of a cheap objective.
TimeParams fit_time_params(const GpuSpec& gpu, const TimeParams& start, const std::vector<TimedCall>& calls) {
  if (calls.size() < 3)
    throw std::invalid_argument("fit_time_params: " + std::to_string(calls.size()) +
                                " measured call(s); fitting three parameters needs at least 3");
  using Point = std::array<double, 3>;
  auto f = [&](const Point& x) { return objective(gpu, with_logs(start, x), calls); };
  Point x0{std::log(start.launch_s), std::log(start.wave_s), std::log(start.step_s)};
  std::array<Point, 4> s{x0, x0, x0, x0};
  for (size_t i = 0; i < 3; ++i) s[i + 1][i] += std::log(3.0);
  std::array<double, 4> fs{};
  for (size_t i = 0; i < 4; ++i) fs[i] = f(s[i]);
  auto along = [](const Point& c, const Point& w, double t) {
    Point r;
    for (size_t i = 0; i < 3; ++i) r[i] = c[i] + t * (w[i] - c[i]);
    return r;
  };
  for (int iter = 0; iter < 2000; ++iter) {
    std::array<size_t, 4> idx{0, 1, 2, 3};
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return fs[a] < fs[b]; });
    std::array<Point, 4> ss;
    std::array<double, 4> fss;
    for (size_t i = 0; i < 4; ++i) ss[i] = s[idx[i]], fss[i] = fs[idx[i]];
    s = ss;
    fs = fss;
    if (fs[3] - fs[0] < 1e-12 * (1 + fs[0])) break;
    Point c{};
    for (size_t i = 0; i < 3; ++i)
      for (size_t j = 0; j < 3; ++j) c[j] += s[i][j] / 3;
    Point r = along(c, s[3], -1);
    double fr = f(r);
    if (fr < fs[0]) {
      Point e = along(c, s[3], -2);
      double fe = f(e);
      s[3] = fe < fr ? e : r;
      fs[3] = std::min(fe, fr);
    } else if (fr < fs[2]) {
      s[3] = r;
      fs[3] = fr;
    } else {
      Point k = along(c, s[3], 0.5);
      double fk = f(k);
      if (fk < fs[3]) {
        s[3] = k;
        fs[3] = fk;
      } else {
        for (size_t i = 1; i < 4; ++i) {
          s[i] = along(s[0], s[i], 0.5);
          fs[i] = f(s[i]);
        }
      }
    }
  }
  size_t best = static_cast<size_t>(std::min_element(fs.begin(), fs.end()) - fs.begin());
  return with_logs(start, s[best]);
}

FitReport fit_report(const GpuSpec& gpu, const TimeParams& p, const std::vector<TimedCall>& calls, double tolerance,
                     bool loo) {
  FitReport r;
  r.calls = calls.size();
  std::vector<double> e = relative_errors(gpu, p, calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    r.small += calls[i].small;
    r.within += e[i] <= tolerance;
    r.small_within += calls[i].small && e[i] <= tolerance;
  }
  r.median_abs_error = median(e);
  if (!loo || calls.size() < 4) return r;
  std::vector<double> loo_e;
  for (size_t i = 0; i < calls.size(); ++i) {
    std::vector<TimedCall> rest = calls;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
    TimeParams q = fit_time_params(gpu, p, rest);
    double ei = std::abs(predict_time(gpu, q, calls[i].in).predicted_s / calls[i].measured_s - 1);
    loo_e.push_back(ei);
    r.loo_small_within += calls[i].small && ei <= tolerance;
  }
  r.loo_median_abs_error = median(loo_e);
  return r;
}

}  // namespace ember::model
