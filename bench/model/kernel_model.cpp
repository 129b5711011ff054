// kernel_model: runs every CUDA kernel variant of ember's own (not cuBLAS/cuDNN) in the SIMT
// simulator with its efficiency counters on (sim/counters.h), and prints per op,
// variant, benchmark case and dtype: global sector efficiency, shared-memory bank-conflict
// factor, theoretical occupancy, bytes (the op's minimum) and the traffic the kernels asked for
// against them, FLOPs, and a roofline lower bound and a predicted
// time on an H100 and an H200 (Note [kernel roofline model] in bench/model/roofline.h). Every
// time it prints is a prediction; nothing here runs on a GPU.
//
//   kernel_model [--quick] [--op a,b] [--variant v] [--case TEXT] [--kernels] [--markdown]
//                [--resources FILE] [--gate FILE] [--measured DIR [--fit FILE] [--require F]] [--params FILE]
//
//   --quick      run smaller shapes with the same access pattern (the simulator runs about 1e7-1e8
//                simple operations per second: a 4096^3 GEMM would take hours). A benchmark case
//                with explicit input shapes is shrunk: every dimension above 64 is halved, all of
//                them together, until the inputs hold at most 2^16 elements, so equal dimensions
//                stay equal (M, K, N of a GEMM; a broadcast pair). A case with custom inputs
//                (conv2d, the optimisers, index ops) cannot be shrunk from outside, so the op's
//                largest test sample within the same budget and 2^23 FLOPs runs instead, once per
//                dtype, and is what the row predicts. A shrunk case predicts its full benchmark
//                shape: the counters' ratios are applied to the full shape's cost. Cases that
//                shrink alike (4096^2 and 8192^2) run once.
//   --kernels    also print one line per kernel (launches, efficiencies, occupancy, registers)
//   --markdown   print the op table as a Markdown table (docs/perf.md)
//   --gate FILE  check the expectations in FILE (bench/model/expectations.h) against every kernel
//                that ran; exit 1 listing each violation
//   --resources  the ptxas resource table (default: bench/model/kernel_resources_sm90.txt)
//   --measured DIR  run only the ember rows of the GPU runs' results files in DIR (bench/results/),
//                at their full shape when the inputs hold at most 2^21 elements (else the quick
//                shape), and print the time model's prediction (Note [launch time model] in
//                bench/model/time_model.h) beside each measured time, with its errors
//   --fit FILE   with --measured: refit the time model to those rows and write its parameters to
//                FILE (bench/model/time_model_h200.txt is the checked-in fit)
//   --params FILE  the time model's parameters (default: bench/model/time_model_h200.txt)
//   --require F  with --measured: exit 1 unless at least this fraction of the measured calls, and of
//                the small-shape ones, are predicted within +-35%, and of the cases with two or more
//                measured ember variants, ranked in the measured order (none yet: not scored) (CI
//                runs it with 0.8: a kernel change that moves a measured case must list its row as
//                stale, or refit)
//   --case TEXT  only the benchmark cases whose names contain TEXT (repeatable)
//
// Only the simulator build has the counters, so the tool exists only there (built with the tests,
// also when benchmarks are off, as in CI's simulator stage).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/lab/lab.h"
#include "bench/name_filter.h"
#include "bench/op_shapes/op_shapes.h"
#include "bench/model/expectations.h"
#include "bench/model/gpu_model.h"
#include "bench/model/roofline.h"
#include "bench/model/time_model.h"
#include "bench/lab/library_rule.h"
#include "core/autograd/node.h"
#include "core/cuda/runtime.h"
#include "sim/counters.h"
#include "core/rng.h"
#include "ember.h"
#include "kernels/registry.h"
#include "tests/op_samples/op_samples.h"

using namespace ember;

namespace {

constexpr int64_t kQuickElements = int64_t{1} << 16;  // input elements of a quick case
constexpr int64_t kQuickKeepDim = 64;                 // dimensions up to this are never shrunk
constexpr double kQuickFlops = 1 << 23;               // FLOPs of a quick sample (a conv runs ~1 s per 1e7)

constexpr int64_t kMeasuredFullElements = int64_t{1} << 21;  // --measured: larger inputs run quick
constexpr double kErrorTolerance = 0.35;                     // issue target: within +-35% of the measured time
// A small-shape case: what the time model's accuracy target is about (launch and latency bound).
constexpr double kSmallFlops = 1 << 30, kSmallBytes = 1 << 26;

struct Options {
  bool quick = false, kernels = false, markdown = false;
  std::vector<std::string> ops, variants, cases;
  std::string gate, measured, fit;
  double require = 0;  // --measured: the least fraction of calls (small ones, ranked cases) that must pass
  std::string resources = EMBER_SOURCE_DIR "/bench/model/kernel_resources_sm90.txt";
  std::string params = EMBER_SOURCE_DIR "/bench/model/time_model_h200.txt";
  std::string results_dir = EMBER_SOURCE_DIR "/bench/results";  // the "measured" column's
  std::vector<BenchResult> results;  // the ember rows of --measured's folder, or of results_dir
};

// The measured row of (op, case, variant), or nullptr.
const BenchResult* measured_row(const Options& opt, const std::string& op, const std::string& case_name,
                                const std::string& variant) {
  for (const BenchResult& r : opt.results)
    if (r.op == op && r.case_name == case_name && (variant.empty() || r.variant == variant)) return &r;
  return nullptr;
}

bool wanted_case(const Options& opt, const std::string& name) {
  if (opt.cases.empty()) return true;
  return std::any_of(opt.cases.begin(), opt.cases.end(),
                     [&](const std::string& c) { return name.find(c) != std::string::npos; });
}

using bench::split_names;
using bench::wanted;

int64_t elements(const std::vector<TensorSpec>& in) {
  int64_t n = 0;
  for (const TensorSpec& s : in) n += s.shape.numel();
  return n;
}

// Strides in the same dimension order as `s.strides` (largest stride outermost), for a new shape;
// zero strides (expanded dimensions) stay zero.
Strides restride(const Shape& shape, const Strides& old) {
  int n = shape.size();
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return old[a] < old[b]; });
  Strides out = old;
  int64_t step = 1;
  for (int i : order) {
    if (old[i] == 0) continue;
    out[i] = step;
    step *= shape[i];
  }
  return out;
}

// The quick form of a benchmark case (see the header comment).
std::vector<TensorSpec> shrink(std::vector<TensorSpec> in) {
  while (elements(in) > kQuickElements) {
    bool any = false;
    for (TensorSpec& s : in)
      for (int64_t& d : s.shape)
        if (d > kQuickKeepDim) {
          d /= 2;
          any = true;
        }
    if (!any) break;
  }
  for (TensorSpec& s : in)
    if (!s.strides.empty()) s.strides = restride(s.shape, s.strides);
  return in;
}

std::string shape_str(const std::vector<Tensor>& in) {
  std::string s;
  for (const Tensor& t : in)
    if (t.defined()) s += (s.empty() ? "" : " ") + str(t.shape());
  return s;
}

// Random contiguous or strided CPU tensors for the specs, then copied to `d` with their layout.
std::vector<Tensor> make_from_specs(const std::vector<TensorSpec>& specs, Device d) {
  std::vector<Tensor> out;
  for (const TensorSpec& s : specs) {
    Tensor t = s.strides.empty() ? empty(s.shape, TensorOptions(s.dtype))
                                 : empty_strided(s.shape, s.strides, TensorOptions(s.dtype));
    if (is_floating(s.dtype)) uniform_(t, -1, 1);
    else t.fill_(1);
    if (d.is_cuda()) {
      Tensor g = s.strides.empty() ? empty(s.shape, TensorOptions(s.dtype).device(d))
                                   : empty_strided(s.shape, s.strides, TensorOptions(s.dtype).device(d));
      g.copy_(t);
      t = g;
    }
    out.push_back(t);
  }
  return out;
}

std::vector<Tensor> alloc_outputs(const OpInfo& info, std::vector<Tensor>& in, const Attrs& attrs, Device d) {
  std::vector<Tensor> out;
  for (const TensorSpec& s : info.infer(in, attrs))
    out.push_back(s.alias >= 0 ? in[static_cast<size_t>(s.alias)] : empty(s.shape, TensorOptions(s.dtype).device(d)));
  return out;
}

// The most common dtype among the floating operands (as variant_runs counts a call: an optimizer
// step's f64 hyper-parameter tensor does not make it an f64 call), else the first operand's.
DType main_dtype(const std::vector<Tensor>& in) {
  std::vector<std::pair<DType, int>> count;
  for (const Tensor& t : in) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    auto it = std::find_if(count.begin(), count.end(), [&](const auto& c) { return c.first == t.dtype(); });
    if (it == count.end()) count.push_back({t.dtype(), 1});
    else ++it->second;
  }
  if (!count.empty())
    return std::max_element(count.begin(), count.end(),
                            [](const auto& a, const auto& b) { return a.second < b.second; })
        ->first;
  for (const Tensor& t : in)
    if (t.defined()) return t.dtype();
  return DType::f32;
}

// The cost of a case at its full benchmark shape, from CPU tensors that are never filled (the cost
// models read shapes only).
bool full_cost(const OpInfo& info, const BenchCase& bc, Cost* cost) {
  if (bc.make || !info.cost) return false;
  std::vector<Tensor> in;
  for (const TensorSpec& s : bc.inputs)
    in.push_back(s.strides.empty() ? empty(s.shape, TensorOptions(s.dtype))
                                   : empty_strided(s.shape, s.strides, TensorOptions(s.dtype)));
  std::vector<Tensor> out;
  for (const TensorSpec& s : info.infer(in, bc.attrs))
    out.push_back(s.alias >= 0 ? in[static_cast<size_t>(s.alias)] : empty(s.shape, TensorOptions(s.dtype)));
  KernelCall c{info.id, in, out, bc.attrs};
  *cost = info.cost(c);
  return true;
}

// One case to run: inputs on the device, and what to predict.
struct Case {
  std::string name;        // the benchmark case's name, or "sample: <name>"
  std::vector<Tensor> in;  // on the device
  Attrs attrs;
  bool has_target = false;  // predict the full benchmark shape (target) from this smaller run
  Cost target;
  std::string run_shape;  // shapes that ran, when they differ from the case's name
  // A shrunk case's full-shape inputs: a variant that refuses them (a small-shape kernel whose
  // bound the quick shape fits) is not modelled on the case.
  std::vector<TensorSpec> full;
};

// The call that asks the variants whether they take a shrunk case's full shape: unfilled inputs on
// `d` (a variant's supports may look at their device and alignment) and empty outputs, as the
// registry's probes pass; nullopt for a case that ran at its full shape. Made once per case and
// dropped with it, so at most one case's full-size buffers exist at a time.
struct FullShapeProbe {
  std::vector<Tensor> in, out;
};
std::optional<FullShapeProbe> full_shape_probe(const OpInfo& info, const Case& c, Device d) {
  if (c.full.empty()) return std::nullopt;
  FullShapeProbe p;
  for (const TensorSpec& s : c.full)
    p.in.push_back(s.strides.empty() ? empty(s.shape, TensorOptions(s.dtype).device(d))
                                     : empty_strided(s.shape, s.strides, TensorOptions(s.dtype).device(d)));
  for (const TensorSpec& s : info.infer(p.in, c.attrs))
    p.out.push_back(s.alias >= 0 ? p.in[static_cast<size_t>(s.alias)] : empty({0}, TensorOptions(s.dtype)));
  return p;
}

// The op's largest sample (by FLOPs, then bytes) whose inputs hold at most kQuickElements, cast to
// `dtype` on the CPU and copied to the device.
bool largest_sample(const OpInfo& info, DType dtype, Device d, Case* out) {
  if (!info.cost) return false;
  double best = -1;
  for (const OpSample& s : op_samples(info.id)()) {
    if (!s.dtypes.has(dtype) && is_floating(dtype)) continue;
    int64_t n = 0;
    for (const Tensor& t : s.inputs)
      if (t.defined()) n += t.numel();
    if (n > kQuickElements) continue;
    std::vector<Tensor> in;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const Tensor& t = s.inputs[i];
      bool keep = std::find(s.keep_dtype.begin(), s.keep_dtype.end(), static_cast<int>(i)) != s.keep_dtype.end();
      if (!t.defined()) {
        in.push_back(t);
        continue;
      }
      Tensor c = t.contiguous();
      if (!keep && is_floating(c.dtype())) c = c.to(dtype);
      in.push_back(c);
    }
    Cost cost;
    try {
      std::vector<Tensor> o = alloc_outputs(info, in, s.attrs, kCPU);
      KernelCall call{info.id, in, o, s.attrs};
      cost = info.cost(call);
    } catch (const std::exception&) {
      continue;  // a sample meant to fail (bad input)
    }
    double work = std::max(cost.flops, cost.bytes);
    if (cost.flops > kQuickFlops || work <= best) continue;
    best = work;
    out->name = "sample: " + s.name;
    out->attrs = s.attrs;
    out->in.clear();
    for (const Tensor& t : in) out->in.push_back(t.defined() ? t.to(d) : t);
    out->has_target = false;
    out->run_shape.clear();
  }
  return best >= 0;
}

// The cases of one op: its benchmark cases (shrunk with --quick), or with --quick its largest
// sample per dtype for cases with custom inputs.
std::vector<Case> op_cases(const OpInfo& info, const Options& opt, Device d) {
  std::vector<Case> out;
  std::vector<std::string> seen;  // quick shapes repeat (4096^2 and 8192^2 shrink alike)
  std::vector<DType> sample_dtypes;
  bool measured = !opt.measured.empty();
  for (const BenchCase& bc : op_benches(info.id)()) {
    if (!wanted_case(opt, bc.name) || (measured && !measured_row(opt, info.name, bc.name, ""))) continue;
    bool quick = opt.quick || (measured && !bc.make && elements(bc.inputs) > kMeasuredFullElements);
    if (bc.make && opt.quick) {
      // the dtype of a custom case is only known from its inputs; conv2d's name says it
      DType dt = DType::f32;
      for (DType t : {DType::f16, DType::bf16})
        if (bc.name.find(str(" ", t)) != std::string::npos) dt = t;
      if (std::find(sample_dtypes.begin(), sample_dtypes.end(), dt) != sample_dtypes.end()) continue;
      sample_dtypes.push_back(dt);
      Case c;
      if (largest_sample(info, dt, d, &c)) out.push_back(std::move(c));
      continue;
    }
    Case c;
    c.name = bc.name;
    c.attrs = bc.attrs;
    if (bc.make) {
      c.in = bc.make(d);
    } else if (quick) {
      std::vector<TensorSpec> small = shrink(bc.inputs);
      std::string key(bc.attrs.bytes());  // the same inputs with other attributes are another case
      for (const TensorSpec& s : small) key += str(s.dtype, s.shape, s.strides, ";");
      if (!measured && std::find(seen.begin(), seen.end(), key) != seen.end()) continue;  // each measured row runs
      seen.push_back(key);
      c.in = make_from_specs(small, d);
      c.has_target = full_cost(info, bc, &c.target);
      c.full = bc.inputs;
      c.run_shape = shape_str(c.in);
    } else {
      c.in = make_from_specs(bc.inputs, d);
    }
    out.push_back(std::move(c));
  }
  return out;
}

struct Row {
  std::string op, variant, case_name, run_shape, dtype;
  Cost run, target;
  std::vector<model::KernelStats> kernels;
  std::vector<double> occupancy;
  std::vector<const model::KernelResources*> resources;
  model::Prediction h100, h200;
  std::vector<int> resident;  // blocks per SM of each kernel; 0: not in the resource table
  model::TimedCall timed;     // the time model's input, and the measured time with --measured
  model::TimeBreakdown time;  // on an H200
};

std::string si(double v, const char* unit) {
  const char* prefix[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return str(std::round(v * 100) / 100, " ", prefix[i], unit);
}

std::string us(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 1e-3 ? "%.2f" : "%.0f", s * 1e6);
  return buf;
}

std::string occ_str(const model::Prediction& p) {
  if (p.occupancy < 0) return "?";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%%s", 100 * p.occupancy, p.occupancy_unknown ? "*" : "");
  return buf;
}

// bytes moved / the op's minimum (Prediction::traffic_ratio); "-" when the op has no cost bytes
std::string traffic_str(const model::Prediction& p) {
  if (!(p.traffic_ratio > 0)) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.2fx", p.traffic_ratio);
  return buf;
}

// The time model's view of a row (Note [launch time model]), with its measured time if any.
model::TimedCall timed_call(const Row& r, const BenchResult* measured) {
  model::TimedCall t;
  t.label = str(r.op, " ", r.case_name, " ", r.variant);
  t.in.roofline = r.h200;
  t.in.unit = model::math_unit_for(r.variant, r.dtype);
  t.in.kernels = model::kernel_latencies(r.kernels, r.resident);
  double run_work = r.run.flops > 0 ? r.run.flops : r.run.bytes;
  double target_work = r.run.flops > 0 ? r.target.flops : r.target.bytes;
  if (run_work > 0 && target_work > 0) t.in.work_scale = target_work / run_work;
  t.small = r.target.flops <= kSmallFlops && r.target.bytes <= kSmallBytes;
  if (measured) t.measured_s = measured->median_us * 1e-6;
  return t;
}

bool is_stale(const Row& r, const model::TimeParams& p) {
  std::string key = str(r.op, " ", r.variant, " ", r.case_name);
  return std::find(p.stale.begin(), p.stale.end(), key) != p.stale.end();
}

// The measured calls the fit and the errors use: every row but the stale ones.
std::vector<model::TimedCall> fit_calls(const std::vector<Row>& rows, const model::TimeParams& p) {
  std::vector<model::TimedCall> calls;
  for (const Row& r : rows)
    if (!is_stale(r, p)) calls.push_back(r.timed);
  return calls;
}

// The ranking target's score: of the cases with two or more measured ember variants, how many the
// model puts in the measured order.
struct Ranking {
  size_t cases = 0, right = 0;
};

// --measured: each row's measured time beside the model's, then the errors (leave-one-out too) and
// the variant ranking (into `ranking`). Returns the fit report of the non-stale rows.
model::FitReport print_measured(const std::vector<Row>& rows, const model::TimeParams& p, bool kernels,
                                Ranking& ranking) {
  std::printf("%-8s %-12s %-34s %10s %10s %8s %-8s %8s %6s %7s %10s %5s\n", "op", "variant", "case", "measured",
              "model", "error", "bound", "blocks", "waves", "steps", "thru (us)", "small");
  std::vector<model::TimedCall> calls = fit_calls(rows, p);
  for (const Row& r : rows) {
    const model::TimedCall& t = r.timed;
    double pred = r.time.predicted_s;
    // the kernel with the most blocks: the one the waves and steps columns speak of
    model::KernelLatency k;
    for (const model::KernelLatency& x : t.in.kernels)
      if (x.blocks_per_launch >= k.blocks_per_launch) k = x;
    std::printf("%-8s %-12s %-34s %10.1f %10.1f %+7.0f%% %-8s %8.0f %6.0f %7.1f %10.1f %5s\n", r.op.c_str(),
                r.variant.c_str(), r.case_name.c_str(), t.measured_s * 1e6, pred * 1e6, 100 * (pred / t.measured_s - 1),
                r.time.bound, k.blocks_per_launch * t.in.work_scale, r.time.waves, k.steps_per_block,
                r.time.throughput_s * 1e6,
                is_stale(r, p) ? "stale"
                : t.small      ? "yes"
                               : "");
    if (kernels)
      for (size_t i = 0; i < t.in.kernels.size(); ++i)
        std::printf("    %d launch(es) x %.0f blocks, %.1f steps, %d resident per SM: %s\n", t.in.kernels[i].launches,
                    t.in.kernels[i].blocks_per_launch, t.in.kernels[i].steps_per_block,
                    t.in.kernels[i].resident_blocks_per_sm, r.kernels[i].kernel.c_str());
  }
  const model::GpuSpec& gpu = model::h200();
  const bool loo = calls.size() >= 4;  // fit_report's leave-one-out fits need three calls each
  model::FitReport f = model::fit_report(gpu, p, calls, kErrorTolerance, loo);
  std::printf("\ntime model (H200; launch %.2f us, wave %.3f us, step %.4f us, hbm x%.3f, tensor x%.3f):\n",
              p.launch_s * 1e6, p.wave_s * 1e6, p.step_s * 1e6, p.hbm_fraction, p.tensor_fraction);
  std::printf("  within +-%.0f%%: %zu of %zu calls, %zu of %zu small-shape calls; median |error| %.1f%%\n",
              100 * kErrorTolerance, f.within, f.calls, f.small_within, f.small, 100 * f.median_abs_error);
  if (loo)
    std::printf(
        "  leave-one-out (each call predicted by a fit without it): median |error| %.1f%%, %zu of %zu "
        "small-shape calls within +-%.0f%%\n",
        100 * f.loo_median_abs_error, f.loo_small_within, f.small, 100 * kErrorTolerance);
  // the ranking target: the variants of one case in the measured order
  std::vector<std::string> seen;
  size_t& ranked = ranking.cases;
  size_t& right = ranking.right;
  for (const Row& r : rows) {
    std::string key = r.op + "|" + r.case_name;
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    std::vector<const Row*> same;
    for (const Row& o : rows)
      if (o.op == r.op && o.case_name == r.case_name) same.push_back(&o);
    if (same.size() < 2) continue;
    ++ranked;
    bool ok = true;
    for (const Row* a : same)
      for (const Row* b : same)
        ok = ok && !(a->timed.measured_s < b->timed.measured_s && a->time.predicted_s > b->time.predicted_s);
    right += ok;
  }
  std::printf("  ranking: %zu of %zu cases with two or more measured ember variants ranked in the measured order\n",
              right, ranked);
  return f;
}

void print_rows(const std::vector<Row>& rows, bool markdown, bool quick) {
  if (markdown) {
    std::printf(
        "| op | variant | case | dtype | sector eff | conflicts | occupancy | bytes | traffic | FLOPs | unit | "
        "H100 bound (us) | H100 predicted (us) | %% | H200 bound (us) | H200 predicted (us) | %% | limit (H100) |\n");
    std::printf("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
  } else {
    std::printf("%-22s %-16s %-44s %-5s %6s %6s %5s %10s %7s %10s %-4s | %9s %9s %5s | %9s %9s %5s %-12s | %9s %9s\n",
                "op", "variant", "case", "dtype", "sector", "confl", "occ", "bytes", "traffic", "FLOPs", "unit",
                "H100 lb", "predicted", "%", "H200 lb", "predicted", "%", " limit (H100)", "H200 time", "measured");
  }
  for (const Row& r : rows) {
    const Cost& c = r.target.bytes > 0 || r.target.flops > 0 ? r.target : r.run;
    std::string name = r.case_name;
    if (quick && !r.run_shape.empty()) name += " (ran " + r.run_shape + ")";
    const char* unit = model::math_unit_name(model::math_unit_for(r.variant, r.dtype));
    if (markdown) {
      std::printf(
          "| %s | %s | %s | %s | %.1f%% | %.2f | %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %.0f | %s |\n",
          r.op.c_str(), r.variant.c_str(), name.c_str(), r.dtype.c_str(), 100 * r.h100.sector_efficiency,
          r.h100.conflict_factor, occ_str(r.h100).c_str(), si(c.bytes, "B").c_str(), traffic_str(r.h100).c_str(),
          si(c.flops, "").c_str(), unit, us(r.h100.lower_bound_s).c_str(), us(r.h100.predicted_s).c_str(),
          r.h100.pct_of_roofline, us(r.h200.lower_bound_s).c_str(), us(r.h200.predicted_s).c_str(),
          r.h200.pct_of_roofline, r.h100.bound);
    } else {
      std::printf(
          "%-22s %-16s %-44s %-5s %5.1f%% %6.2f %5s %10s %7s %10s %-4s | %9s %9s %5.0f | %9s %9s %5.0f  %-11s | %9s "
          "%9s\n",
          r.op.c_str(), r.variant.c_str(), name.c_str(), r.dtype.c_str(), 100 * r.h100.sector_efficiency,
          r.h100.conflict_factor, occ_str(r.h100).c_str(), si(c.bytes, "B").c_str(), traffic_str(r.h100).c_str(),
          si(c.flops, "").c_str(), unit, us(r.h100.lower_bound_s).c_str(), us(r.h100.predicted_s).c_str(),
          r.h100.pct_of_roofline, us(r.h200.lower_bound_s).c_str(), us(r.h200.predicted_s).c_str(),
          r.h200.pct_of_roofline, r.h100.bound, r.time.predicted_s > 0 ? us(r.time.predicted_s).c_str() : "-",
          r.timed.measured_s > 0 ? us(r.timed.measured_s).c_str() : "-");
    }
  }
}

void print_kernels(const std::vector<Row>& rows) {
  std::printf("\n%-22s %-16s %-5s %8s %7s %7s %6s %6s %5s %5s  %s\n", "op", "variant", "dtype", "launches", "ld eff",
              "st eff", "confl", "occ", "regs", "spill", "kernel");
  for (const Row& r : rows)
    for (size_t i = 0; i < r.kernels.size(); ++i) {
      const model::KernelStats& k = r.kernels[i];
      const model::KernelResources* res = r.resources[i];
      std::printf("%-22s %-16s %-5s %8d %6.1f%% %6.1f%% %6.2f %6s %5s %5s  %s\n", r.op.c_str(), r.variant.c_str(),
                  r.dtype.c_str(), k.launches, 100 * k.global_load_efficiency(), 100 * k.global_store_efficiency(),
                  k.shared_conflict_factor(),
                  r.occupancy[i] < 0 ? "?" : str(std::round(100 * r.occupancy[i]), "%").c_str(),
                  res ? std::to_string(res->registers).c_str() : "?",
                  res ? std::to_string(res->spill_stores + res->spill_loads).c_str() : "?", k.kernel.c_str());
    }
}

// --measured (and --fit): the time model against the measured rows.
int report_measured(const Options& opt, std::vector<Row>& rows, int failures) {
  model::TimeParams p;
  bool fitted = true;
  try {
    p = model::load_time_params(opt.params);
  } catch (const std::exception& e) {
    if (opt.fit.empty()) throw;
    std::fprintf(stderr, "kernel_model: %s; the fit starts from the defaults\n", e.what());
    fitted = false;
  }
  std::vector<model::TimedCall> calls = fit_calls(rows, p);
  if (!opt.fit.empty()) {
    const model::GpuSpec& gpu = model::h200();
    model::TimeParams q = model::fit_time_params(gpu, p, calls);
    model::FitReport f = model::fit_report(gpu, q, calls, kErrorTolerance, true);
    q.header = {
        "# The time model's parameters for an H200 (Note [launch time model] in bench/model/time_model.h),",
        "# written by kernel_model --measured bench/results --fit (bench_ops --model takes the same",
        "# arguments). launch_us, wave_us and step_us are fitted to the ember rows of bench/results/*.tsv;",
        "# hbm_fraction, tensor_fraction and simt_fraction are measured, and edited by hand (docs/perf.md,",
        "# \"GPU: the first H200 run\": copy bandwidth 3781 GB/s of 4800; cuBLAS bf16 GEMM 765 TFLOP/s of",
        "# 989; cuBLAS f32 4096^3 in 2713 us, 50.7 TFLOP/s of 67). A stale row was measured before its",
        "# kernel changed (docs/perf.md, \"The time model\", says which change): printed, not fitted.",
        str("# Fit: ", calls.size(), " calls; ", f.within, " within +-35%, ", f.small_within, " of ", f.small,
            " small-shape calls; leave-one-out: ", f.loo_small_within, " of ", f.small, "."),
    };
    model::save_time_params(opt.fit, q);
    std::printf("kernel_model: fitted the time model%s to %zu measured calls; wrote %s\n",
                fitted ? "" : " (from the defaults)", calls.size(), opt.fit.c_str());
    p = q;
  }
  for (Row& r : rows) r.time = model::predict_time(model::h200(), p, r.timed.in);
  std::printf("kernel_model: the time model's PREDICTED us beside the MEASURED us of %s (H200)\n\n",
              opt.measured.c_str());
  Ranking ranking;
  model::FitReport f = print_measured(rows, p, opt.kernels, ranking);
  for (const BenchResult& m : opt.results) {  // a case or variant renamed or gone since the run
    bool ran = std::any_of(rows.begin(), rows.end(), [&](const Row& r) {
      return r.op == m.op && r.case_name == m.case_name && r.variant == m.variant;
    });
    if (!ran && wanted(opt.ops, m.op) && wanted(opt.variants, m.variant) && wanted_case(opt, m.case_name))
      std::printf("  not modelled (no such benchmark case or variant now, or it refused the call): %s %s %s (%s)\n",
                  m.op.c_str(), m.variant.c_str(), m.case_name.c_str(), m.where.c_str());
  }
  if (failures > 0) std::fprintf(stderr, "kernel_model: %d case(s) failed to run\n", failures);
  if (opt.require > 0 && (f.within < opt.require * f.calls || f.small_within < opt.require * f.small)) {
    std::fprintf(stderr,
                 "kernel_model: the time model predicts %zu of %zu measured calls (%zu of %zu small-shape ones) "
                 "within +-%.0f%%, fewer than --require %.2f asks. A kernel changed since its row was measured: "
                 "list the row as stale in %s (docs/perf.md, \"The time model\"), or refit after a GPU run.\n",
                 f.within, f.calls, f.small_within, f.small, 100 * kErrorTolerance, opt.require, opt.params.c_str());
    return 1;
  }
  if (opt.require > 0 && ranking.right < opt.require * ranking.cases) {
    std::fprintf(stderr,
                 "kernel_model: the time model ranks the variants of %zu of %zu cases in the measured order, fewer "
                 "than --require %.2f asks (docs/perf.md, \"The time model\": refit, or mark the rows stale).\n",
                 ranking.right, ranking.cases, opt.require);
    return 1;
  }
  return failures > 0 ? 1 : 0;
}

int usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: kernel_model [--quick] [--op a,b] [--variant v] [--case TEXT] [--kernels] [--markdown]\n"
               "                    [--resources FILE] [--gate FILE] [--measured DIR [--fit FILE] [--require F]] "
               "[--params FILE]\n");
  return code;
}

int run(const Options& opt) {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "kernel_model: %s\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  std::vector<model::Expectation> expectations;
  if (!opt.gate.empty()) expectations = model::load_expectations(opt.gate);  // malformed: fail before the long run
  bool gate_needs_table = false;
  for (const model::Expectation& e : expectations)
    gate_needs_table = gate_needs_table || model::needs_resources(e.counter);
  std::vector<model::KernelResources> table;
  try {
    table = model::load_kernel_resources(opt.resources);
  } catch (const std::exception& e) {
    if (gate_needs_table) throw;  // the gate's occupancy, spill or register bars come from it
    std::fprintf(stderr, "kernel_model: %s; occupancy is unknown ('?') and the prediction assumes full issue rate\n",
                 e.what());
  }
  const model::GpuSpec& h100 = model::h100();
  const model::GpuSpec& h200 = model::h200();
  manual_seed(1234);
  autograd::NoGradGuard ng;
  Device dev = kCUDA;
  std::vector<Row> rows;
  std::vector<model::GateSubject> subjects;
  int failures = 0;
  for (const OpInfo& info : all_ops()) {
    if (!wanted(opt.ops, info.name)) continue;
    bool any_variant = false;
    for (const Variant& v : info.variants)
      any_variant =
          any_variant || (v.device == DeviceType::cuda && !(v.flags & kVendor) && wanted(opt.variants, v.name));
    if (!any_variant) continue;
    std::vector<Case> cases;
    try {
      cases = op_cases(info, opt, dev);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kernel_model: %s: building the cases failed: %s\n", info.name, e.what());
      ++failures;
      continue;
    }
    for (Case& c : cases) {
      std::optional<FullShapeProbe> full = full_shape_probe(info, c, dev);
      for (const Variant& v : info.variants) {
        if (v.device != DeviceType::cuda || (v.flags & kVendor) || !wanted(opt.variants, v.name)) continue;
        const BenchResult* measured = measured_row(opt, info.name, c.name, v.name);
        if (!opt.measured.empty() && measured == nullptr) continue;
        Row r;
        r.op = info.name;
        r.variant = v.name;
        r.case_name = c.name;
        r.run_shape = c.run_shape;
        r.dtype = std::string(dtype_name(main_dtype(c.in)));
        try {
          std::vector<Tensor> out = alloc_outputs(info, c.in, c.attrs, dev);
          KernelCall call{info.id, c.in, out, c.attrs};
          if (!v.accepts(call) || (full && !v.accepts(KernelCall{info.id, full->in, full->out, c.attrs}))) continue;
          r.run = info.cost ? info.cost(call) : Cost{};
          r.target = c.has_target ? c.target : r.run;
          sim::take_counters();  // drop the launches that made the inputs
          sim::set_counters_enabled(true);
          v.fn(call);
          std::vector<sim::LaunchCounters> launches = sim::take_counters();
          sim::set_counters_enabled(false);
          r.kernels = model::group_by_kernel(launches);
        } catch (const std::exception& e) {
          sim::set_counters_enabled(false);
          std::fprintf(stderr, "kernel_model: %s/%s/%s: %s\n", info.name, v.name.c_str(), c.name.c_str(), e.what());
          ++failures;
          continue;
        }
        for (const model::KernelStats& k : r.kernels) {
          const model::KernelResources* res = table.empty() ? nullptr : model::match_resources(table, k.kernel);
          double occ = -1;
          int resident = 0;
          if (res) {
            model::Occupancy o = model::theoretical_occupancy(*res, k.threads_per_block, k.dynamic_shared, h100);
            occ = o.fraction;
            resident = o.blocks_per_sm;
          }
          r.resources.push_back(res);
          r.resident.push_back(resident);
          r.occupancy.push_back(occ);
          subjects.push_back({k, str(r.op, "/", r.variant, "/", r.case_name, " ", r.dtype), res, occ});
        }
        model::PredictionInput pin{r.target.bytes,
                                   r.target.flops,
                                   r.run.bytes,
                                   r.run.flops,
                                   r.kernels,
                                   r.occupancy,
                                   model::math_unit_for(r.variant, r.dtype)};
        r.h100 = model::predict(h100, pin);
        r.h200 = model::predict(h200, pin);
        r.timed = timed_call(r, measured);
        rows.push_back(std::move(r));
      }
    }
  }
  if (!opt.measured.empty()) return report_measured(opt, rows, failures);
  try {
    model::TimeParams p = model::load_time_params(opt.params);
    for (Row& r : rows) r.time = model::predict_time(h200, p, r.timed.in);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_model: %s; no 'H200 time' column\n", e.what());
  }
  std::printf("kernel_model: PREDICTED times (simulator counters + roofline model; nothing ran on a GPU)%s\n",
              opt.quick ? ", counters from the quick shapes" : "");
  std::printf(
      "H100: %.2f TB/s, fp32 %.1f / tf32 %.0f / f16 %.0f / bf16 %.0f TFLOP/s; "
      "H200: %.2f TB/s, fp32 %.1f / tf32 %.0f / f16 %.0f / bf16 %.0f TFLOP/s\n",
      h100.hbm_bytes_per_s / 1e12, h100.fp32_flops / 1e12, h100.tf32_flops / 1e12, h100.f16_flops / 1e12,
      h100.bf16_flops / 1e12, h200.hbm_bytes_per_s / 1e12, h200.fp32_flops / 1e12, h200.tf32_flops / 1e12,
      h200.f16_flops / 1e12, h200.bf16_flops / 1e12);
  std::printf(
      "lb = roofline lower bound, predicted = with the counted inefficiencies and %.1f us per launch, "
      "%% = lb / predicted; occupancy '*': some kernel of the call is not in the resource table;\n"
      "H200 time = the fitted time model (Note [launch time model]), measured = the last GPU run's median "
      "(bench/results/), both for the case's full shape\n\n",
      model::kLaunchOverheadSeconds * 1e6);
  print_rows(rows, opt.markdown, opt.quick);
  if (opt.kernels) print_kernels(rows);
  if (failures > 0) std::fprintf(stderr, "kernel_model: %d case(s) failed to run\n", failures);
  if (!opt.gate.empty()) {
    std::vector<std::string> problems = model::check_expectations(expectations, subjects);
    if (!problems.empty()) {
      std::fprintf(stderr, "\nkernel efficiency gate: %zu violation(s) of %s\n", problems.size(), opt.gate.c_str());
      for (const std::string& p : problems) std::fprintf(stderr, "  %s\n", p.c_str());
      return 1;
    }
    // kernels no line speaks for (the naive reference kernels, new kernels): named, so that a new
    // kernel's author sees it is not gated yet
    std::vector<std::string> ungated;
    for (const model::GateSubject& s : subjects) {
      bool covered = std::any_of(expectations.begin(), expectations.end(), [&](const model::Expectation& e) {
        return model::glob_match(e.glob, s.stats.kernel) && model::glob_match(e.call_glob, s.context);
      });
      if (!covered && std::find(ungated.begin(), ungated.end(), s.stats.kernel) == ungated.end())
        ungated.push_back(s.stats.kernel);
    }
    std::printf(
        "\nkernel efficiency gate: %zu expectation(s) of %s hold for %zu kernel launch group(s); %zu kernel(s) "
        "have no expectation:\n",
        expectations.size(), opt.gate.c_str(), subjects.size(), ungated.size());
    for (const std::string& k : ungated) std::printf("  %s\n", k.c_str());
  }
  return failures > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  register_lab_variants();  // the CUDA oracles' kernels are modelled too (Note [lab variants])
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kernel_model: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick") opt.quick = true;
    else if (a == "--kernels") opt.kernels = true;
    else if (a == "--markdown") opt.markdown = true;
    else if (a == "--op") opt.ops = split_names(value());
    else if (a == "--variant") opt.variants = split_names(value());
    else if (a == "--gate") opt.gate = value();
    else if (a == "--resources") opt.resources = value();
    else if (a == "--measured") opt.measured = value();
    else if (a == "--fit") opt.fit = value();
    else if (a == "--params") opt.params = value();
    else if (a == "--require") {
      std::string v = value();
      char* end = nullptr;
      opt.require = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(opt.require >= 0 && opt.require <= 1)) {
        std::fprintf(stderr, "kernel_model: --require needs a fraction in [0, 1], got '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--case") opt.cases.push_back(value());
    else if (a == "--help" || a == "-h") return usage(0);
    else {
      std::fprintf(stderr, "kernel_model: unknown argument '%s'\n", a.c_str());
      return usage(2);
    }
  }
  for (const std::string& name : opt.ops)
    if (find_op(name) == nullptr) {
      std::fprintf(stderr, "kernel_model: unknown op '%s'\n", name.c_str());
      return 2;
    }
  if (!opt.fit.empty() && opt.measured.empty()) {
    std::fprintf(stderr, "kernel_model: --fit needs --measured DIR (the rows to fit to)\n");
    return 2;
  }
  try {
    try {
      for (BenchResult& r : read_bench_results_dir(opt.measured.empty() ? opt.results_dir : opt.measured))
        if (r.kind == "ember") opt.results.push_back(std::move(r));
    } catch (const std::exception& e) {
      if (!opt.measured.empty()) throw;
      std::fprintf(stderr, "kernel_model: %s; no measured column\n", e.what());
    }
    if (!opt.measured.empty() && opt.results.empty())
      throw std::runtime_error(opt.measured + ": no ember rows in its results files");
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_model: %s\n", e.what());
    return 1;
  }
}
