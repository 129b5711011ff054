// bench_ops: times every kernel variant of every op on its benchmark shapes (op_benches(id),
// bench/op_shapes/) after checking the variant against a reference, and prints time, GB/s,
// TFLOP/s, % of the rooflines measured in the same run, and the ratio to the vendor variant.
//
//   bench_ops --list                 ops and variants (no GPU needed)
//   bench_ops --cases [--op a,b] [--case REGEX]   the benchmark cases (of those ops, those cases)
//   bench_ops --model [--quick] ...  the PREDICTED H100/H200 table from the simulator's efficiency
//                                    counters: runs bench/model/kernel_model.cpp's tool (simulator
//                                    build only) with the other arguments
//   bench_ops [--op add,matmul] [--variant cuda] [--case REGEX] [--device cuda|cpu] [--json out.json]
//             [--plot out.svg] [--min-time 0.2] [--quick] [Google Benchmark flags ...]
//
// --case keeps the cases whose name the regular expression (ECMAScript) matches somewhere, e.g.
// 'n128 ' or 'f32$': the GPU runner sizes its steps with it (docs/gpu-validation.md).
//
// Method: inputs are random (never zeros), the L2 cache is flushed before every timed run, CUDA
// events bracket the kernel, medians are reported, and every variant is checked first: against the CPU reference
// variant for cases of up to 2e10 FLOPs, else against the vendor (or default) variant on the device, by relative L2
// error. The rooflines: a large device-to-device copy (bytes read + written per second) and, when a cuBLAS matmul
// variant is registered, an 8192^3 bf16 GEMM.
//
// Note [latency floor]: a small case is far from both rooflines whatever the kernel does, so each
// case also gets a floor, the least time any kernel could take: the launch overhead measured in
// the same run (a one-element fill timed like the cases) + the op's bytes at the copy bandwidth +
// its FLOPs at the GEMM peak of its dtype (bf16/f16: the bf16 GEMM above; other dtypes: an f32
// GEMM of the vendor's, 8192^3 on a GPU, 1024^3 on the CPU). %floor = floor / time: 100% is the
// best possible. On the CPU the same: a one-element op call, a 256 MiB copy, the fastest CPU
// matmul variant. --plot draws every case's floor, ember's best variant and the vendor's best
// side by side on a log time axis (an SVG file), and again on the roofline: achieved TFLOP/s
// against FLOPs per byte, under the copy bandwidth's slope and the GEMM peaks, where the floor is
// the highest point a case's kernel could reach (a case without FLOPs has no place there).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/lab/lab.h"
#include "bench/name_filter.h"
#include "bench/op_shapes/op_shapes.h"
#include "core/autograd/node.h"
#include "core/cuda/runtime.h"
#include "core/rng.h"
#include "ember.h"
#include "io/atomic_file.h"
#include "kernels/registry.h"
#include "logging/svg_plot.h"

#include <unistd.h>  // execv

using namespace ember;

namespace {

struct Options {
  bool list = false, cases = false, quick = false;
  std::vector<std::string> ops, variants;
  std::string device = "auto", json, plot;
  std::optional<std::regex> case_filter;
  double min_time = 0.2;
};

struct Result {
  std::string op, variant, case_name, dtype, device, checked;
  double median_us = 0, gbps = 0, tflops = 0, pct_bw = 0, pct_peak = 0, vs_vendor = 0;
  double floor_us = 0, pct_floor = 0;  // Note [latency floor]
  bool ok = true;
  bool vendor = false;  // a kVendor variant (scripts/bench_table.py's vendor column and --results)
  std::string error;
};

Options g_opt;
std::vector<Result> g_results;
double g_copy_gbps = 0, g_peak_tflops = 0;
double g_launch_us = 0, g_peak_f32_tflops = 0;  // Note [latency floor]

using bench::split_names;
using bench::wanted;

const char* flags_str(uint32_t f) {
  static std::string s;
  s.clear();
  if (f & kReference) s += " reference";
  if (f & kVendor) s += " vendor";
  if (f & kNondeterministic) s += " nondeterministic";
  if (f & kTf32) s += " tf32";
  if (f & kSimOnly) s += " sim-only";
  return s.c_str();
}

void print_list() {
  std::printf("ember ops and kernel variants (%s build%s)\n\n", cuda::compiled_with_cuda() ? "CUDA" : "CPU-only",
              cuda::device_count() > 0 ? "" : ", no CUDA device here");
  int nops = 0, nvars = 0;
  for (const OpInfo& info : all_ops()) {
    ++nops;
    std::printf("%-24s %s%s\n", info.name, info.doc.c_str(), info.view ? " [view: no kernel]" : "");
    for (const Variant& v : info.variants) {
      ++nvars;
      std::printf("    %-5s %-14s %s%s\n", v.device == DeviceType::cpu ? "cpu" : "cuda", v.name.c_str(), v.note.c_str(),
                  flags_str(v.flags));
    }
  }
  std::printf("\n%d ops, %d variants\n", nops, nvars);
}

std::string spec_str(const std::vector<TensorSpec>& in) {
  std::string s;
  for (const TensorSpec& t : in) s += (s.empty() ? "" : " ") + str(t.dtype, t.shape);
  return s;
}

bool case_wanted(const BenchCase& c) { return !g_opt.case_filter || std::regex_search(c.name, *g_opt.case_filter); }

// The cases --op and --case select; false when there are none (a filter that selects nothing is a
// mistake in the command line, which the GPU runner's dry run must catch).
bool print_cases() {
  int n = 0;
  for (const OpInfo& info : all_ops()) {
    if (!wanted(g_opt.ops, info.name)) continue;
    for (const BenchCase& c : op_benches(info.id)()) {
      if (!case_wanted(c)) continue;
      std::printf("%-24s %-40s %s\n", info.name, c.name.c_str(),
                  c.make ? "(custom inputs)" : spec_str(c.inputs).c_str());
      ++n;
    }
  }
  return n > 0;
}

// ---- timing ----

struct Timer {
  Device device;
  cuda::Event start{true}, stop{true};
  std::chrono::steady_clock::time_point t0;
  void begin() {
    if (device.is_cuda()) start.record();
    else t0 = std::chrono::steady_clock::now();
  }
  double end_us() {
    if (device.is_cuda()) {
      stop.record();
      runtime::AllowSyncScope allow;
      stop.synchronize();
      return 1000.0 * start.elapsed_ms(stop);
    }
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
};

// Writes a buffer twice the L2 size so the next kernel starts with a cold cache.
void flush_l2(Device d) {
  if (!d.is_cuda()) return;
  static Tensor scratch;
  if (!scratch.defined()) {
    size_t l2 = cuda::properties(d.index).l2_cache_bytes;
    scratch = empty({static_cast<int64_t>(std::max<size_t>(2 * l2, 1 << 24))}, TensorOptions(DType::u8).device(d));
  }
  scratch.fill_(1);
}

std::vector<Tensor> make_inputs(const BenchCase& c, Device d) {
  if (c.make) return c.make(d);
  std::vector<Tensor> in;
  for (const TensorSpec& s : c.inputs) {
    Tensor t = empty(s.shape, TensorOptions(s.dtype).device(d));
    if (is_floating(s.dtype)) uniform_(t, -1, 1);
    else if (s.dtype == DType::boolean) t.copy_(gt(uniform(s.shape, 0, 1, TensorOptions().device(d)), 0.5));
    else t.fill_(1);
    in.push_back(t);
  }
  return in;
}

double rel_error(const Tensor& got, const Tensor& want) {
  Tensor g = got.to(kCPU).to(DType::f64), w = want.to(kCPU).to(DType::f64);
  if (g.shape() != w.shape()) return INFINITY;
  std::vector<double> a = g.to_vector<double>(), b = w.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(a[i])) continue;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

double check_tol(DType t) {
  switch (t) {
    case DType::f64: return 1e-10;
    case DType::f32: return 1e-4;
    case DType::f16: return 5e-3;
    case DType::bf16: return 3e-2;
    default: return 0;
  }
}

DType case_dtype(const std::vector<Tensor>& in) {
  for (const Tensor& t : in)
    if (t.defined() && is_floating(t.dtype())) return t.dtype();
  return in.empty() ? DType::f32 : in[0].dtype();
}

// Checks `v` on the case before it is timed. Returns "" and fills `how` when it passes.
std::string validate(const OpInfo& info, const Variant& v, const BenchCase& bc, const std::vector<Tensor>& in,
                     const Cost& cost, std::string* how) {
  std::vector<Tensor> got = call_variant(v, info.id, in, bc.attrs);
  const Variant* ref = nullptr;
  std::vector<Tensor> ref_in;
  Device ref_dev = kCPU;
  if (cost.flops <= 2e10 || v.device == DeviceType::cpu) {
    for (const Variant& r : info.variants)
      if (r.device == DeviceType::cpu) {
        ref = &r;
        break;
      }
    for (const Tensor& t : in) ref_in.push_back(t.defined() ? t.to(kCPU) : t);
    *how = "cpu";
  } else {
    // the vendor variant when it takes this case (cuBLASLt has no exact GELU), else the default
    const KernelCall probe{info.id, in, got, bc.attrs};
    for (const Variant& r : info.variants)
      if (r.device == v.device && (r.flags & kVendor) && &r != &v && r.accepts(probe)) ref = &r;
    if (ref == nullptr)
      for (const Variant& r : info.variants)
        if (r.device == v.device && &r != &v && !(r.flags & (kReference | kSimOnly)) && r.accepts(probe)) {
          ref = &r;
          break;
        }
    ref_in = in;
    ref_dev = in.empty() ? kCPU : in[0].device();
    *how = ref ? ref->name : "none";
  }
  if (ref == nullptr || ref == &v) {
    *how = "self (no other variant)";
    return "";
  }
  (void)ref_dev;
  std::vector<Tensor> want = call_variant(*ref, info.id, ref_in, bc.attrs);
  for (size_t k = 0; k < got.size(); ++k) {
    // a TF32 variant's f32 output carries f16's operand rounding (10 mantissa bits)
    double tol = check_tol((v.flags & kTf32) && want[k].dtype() == DType::f32 ? DType::f16 : want[k].dtype());
    double err = rel_error(got[k], want[k]);
    if (!(err <= tol)) return str("output ", k, " relative error ", err, " > ", tol, " against ", *how);
  }
  return "";
}

// The least time a kernel could take for `cost` in dtype `dt` (Note [latency floor]); 0 when the
// rooflines were not measured.
double floor_us(const Cost& cost, DType dt) {
  if (g_launch_us <= 0 || g_copy_gbps <= 0) return 0;
  const double peak = (dt == DType::bf16 || dt == DType::f16) && g_peak_tflops > 0 ? g_peak_tflops : g_peak_f32_tflops;
  double us = g_launch_us + cost.bytes / (g_copy_gbps * 1e9) * 1e6;
  if (cost.flops > 0 && peak > 0) us += cost.flops / (peak * 1e12) * 1e6;
  return us;
}

void run_case(benchmark::State& state, const OpInfo* info, const Variant* v, const BenchCase* bc, Device dev) {
  Result r;
  r.op = info->name;
  r.variant = v->name;
  r.vendor = (v->flags & kVendor) != 0;
  r.case_name = bc->name;
  r.device = dev.str();
  try {
    autograd::NoGradGuard ng;
    std::vector<Tensor> in = make_inputs(*bc, dev);
    r.dtype = std::string(dtype_name(case_dtype(in)));
    // outputs and cost for this call
    std::vector<TensorSpec> specs = info->infer(in, bc->attrs);
    std::vector<Tensor> out;
    for (const TensorSpec& s : specs)
      out.push_back(s.alias >= 0 ? in[static_cast<size_t>(s.alias)]
                                 : empty(s.shape, TensorOptions(s.dtype).device(dev)));
    KernelCall call{info->id, in, out, bc->attrs};
    if (!v->accepts(call)) {
      state.SkipWithError("variant does not accept this case");
      return;
    }
    Cost cost = info->cost ? info->cost(call) : Cost{};
    std::string err = validate(*info, *v, *bc, in, cost, &r.checked);
    if (!err.empty()) {
      r.ok = false;
      r.error = err;
      g_results.push_back(r);
      state.SkipWithError(err.c_str());
      return;
    }
    Timer timer{dev};
    for (int i = 0; i < 3; ++i) v->fn(call);  // warm-up
    std::vector<double> times;
    for (auto _ : state) {
      flush_l2(dev);
      timer.begin();
      v->fn(call);
      double us = timer.end_us();
      state.SetIterationTime(us * 1e-6);
      times.push_back(us);
    }
    std::sort(times.begin(), times.end());
    r.median_us = times[times.size() / 2];
    double s = r.median_us * 1e-6;
    r.gbps = cost.bytes / s / 1e9;
    r.tflops = cost.flops / s / 1e12;
    if (dev.is_cuda() && g_copy_gbps > 0) r.pct_bw = 100.0 * r.gbps / g_copy_gbps;
    if (dev.is_cuda() && g_peak_tflops > 0) r.pct_peak = 100.0 * r.tflops / g_peak_tflops;
    r.floor_us = floor_us(cost, case_dtype(in));
    if (r.floor_us > 0) r.pct_floor = 100.0 * r.floor_us / r.median_us;
    state.counters["GB/s"] = r.gbps;
    state.counters["TFLOP/s"] = r.tflops;
    if (r.pct_bw > 0) state.counters["%copyBW"] = r.pct_bw;
    if (r.pct_peak > 0) state.counters["%bf16peak"] = r.pct_peak;
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = e.what();
    state.SkipWithError(e.what());
  }
  g_results.push_back(r);
}

// Median microseconds of `runs` timed calls of f after `warm` untimed ones.
template <class F>
double median_us(Device d, int warm, int runs, const F& f) {
  Timer t{d};
  for (int i = 0; i < warm; ++i) f();
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    t.begin();
    f();
    us.push_back(t.end_us());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// TFLOP/s of the fastest matmul variant on `d` (vendor ones on a GPU) for n^3 in dtype dt; 0 if none.
double gemm_peak(Device d, DType dt, int64_t n) {
  double best = 0;
  const OpInfo& mm = op_info(OpId::matmul);
  Tensor x = uniform({n, n}, -1, 1, TensorOptions(dt).device(d)),
         y = uniform({n, n}, -1, 1, TensorOptions(dt).device(d));
  std::vector<Tensor> in{x, y};
  std::vector<Tensor> out{empty({n, n}, TensorOptions(dt).device(d))};
  const KernelCall c{OpId::matmul, in, out, Attrs()};
  for (const Variant& v : mm.variants) {
    if (v.device != d.type || (v.flags & kReference) || (d.is_cuda() && !(v.flags & kVendor)) || !v.accepts(c))
      continue;
    const double us = median_us(d, 2, d.is_cuda() ? 10 : 3, [&] { v.fn(c); });
    best = std::max(
        best, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (us * 1e-6) / 1e12);
  }
  return best;
}

void measure_rooflines(Device d) {
  autograd::NoGradGuard ng;
  // a GPU: 1 GiB each way; the CPU: 256 MiB (beyond its caches, and quick)
  const int64_t n = d.is_cuda() ? int64_t{1} << 30 : int64_t{1} << 28;
  {
    Tensor a = empty({n}, TensorOptions(DType::u8).device(d)).fill_(3);
    Tensor b = empty({n}, TensorOptions(DType::u8).device(d));
    g_copy_gbps =
        2.0 * static_cast<double>(n) / (median_us(d, 2, d.is_cuda() ? 10 : 5, [&] { b.copy_(a); }) * 1e-6) / 1e9;
  }
  Tensor one = empty({1}, TensorOptions(DType::f32).device(d));
  g_launch_us = median_us(d, 5, 51, [&] { one.fill_(0.0); });
  if (d.is_cuda()) {
    g_peak_tflops = gemm_peak(d, DType::bf16, 8192);  // 0 without a vendor matmul
    g_peak_f32_tflops = gemm_peak(d, DType::f32, 8192);
  } else {
    g_peak_f32_tflops = gemm_peak(d, DType::f32, 1024);  // bf16 cases use it too (the CPU computes them in f32)
  }
}

void fill_vendor_ratios() {
  for (Result& r : g_results) {
    if (!r.ok || r.median_us <= 0) continue;
    const OpInfo* info = find_op(r.op);
    double vendor = 0;
    for (const Result& o : g_results) {
      if (o.op != r.op || o.case_name != r.case_name || !o.ok || o.device != r.device) continue;
      for (const Variant& v : info->variants)
        if (v.name == o.variant && (v.flags & kVendor))
          vendor = vendor == 0 ? o.median_us : std::min(vendor, o.median_us);
    }
    if (vendor > 0) r.vs_vendor = vendor / r.median_us;
  }
}

void print_table(Device d) {
  const char* copy = d.is_cuda() ? "device-to-device copy" : "host memory copy";
  const char* gemm = d.is_cuda() ? "cuBLAS 8192^3" : "the fastest CPU matmul, 1024^3";
  std::printf("\nrooflines measured in this run (GEMMs: %s): %s %.0f GB/s, bf16 GEMM %s, f32 GEMM %s; launch %.2f us\n",
              gemm, copy, g_copy_gbps, g_peak_tflops > 0 ? str(g_peak_tflops, " TFLOP/s").c_str() : "n/a",
              g_peak_f32_tflops > 0 ? str(g_peak_f32_tflops, " TFLOP/s").c_str() : "n/a", g_launch_us);
  std::printf("%-22s %-14s %-30s %-5s %10s %9s %9s %7s %7s %9s %7s %8s  %s\n", "op", "variant", "case", "dtype",
              "time_us", "GB/s", "TFLOP/s", "%copy", "%peak", "floor_us", "%floor", "x_vendor", "checked vs");
  for (const Result& r : g_results) {
    if (!r.ok) {
      std::printf("%-22s %-14s %-30s %-5s FAILED: %s\n", r.op.c_str(), r.variant.c_str(), r.case_name.c_str(),
                  r.dtype.c_str(), r.error.c_str());
      continue;
    }
    auto opt = [](double v, const char* fmt) {  // (one buffer per call in the printf below)
      static char buf[8][32];
      static int k = 0;
      k = (k + 1) % 8;
      if (v <= 0) std::snprintf(buf[k], 32, "%s", "-");
      else std::snprintf(buf[k], 32, fmt, v);
      return buf[k];
    };
    std::printf("%-22s %-14s %-30s %-5s %10.2f %9.1f %9s %7s %7s %9s %7s %8s  %s\n", r.op.c_str(), r.variant.c_str(),
                r.case_name.c_str(), r.dtype.c_str(), r.median_us, r.gbps, opt(r.tflops, "%.2f"), opt(r.pct_bw, "%.1f"),
                opt(r.pct_peak, "%.1f"), opt(r.floor_us, "%.2f"), opt(r.pct_floor, "%.1f"), opt(r.vs_vendor, "%.2f"),
                r.checked.c_str());
  }
}

void write_json(const std::string& path) {
  std::ofstream f(path);
  f << "{\n  \"copy_gbps\": " << g_copy_gbps << ",\n  \"bf16_peak_tflops\": " << g_peak_tflops
    << ",\n  \"f32_peak_tflops\": " << g_peak_f32_tflops << ",\n  \"launch_us\": " << g_launch_us
    << ",\n  \"results\": [\n";
  for (size_t i = 0; i < g_results.size(); ++i) {
    const Result& r = g_results[i];
    f << "    {\"op\": \"" << r.op << "\", \"variant\": \"" << r.variant
      << "\", \"vendor\": " << (r.vendor ? "true" : "false") << ", \"case\": \"" << r.case_name << "\", \"dtype\": \""
      << r.dtype << "\", \"device\": \"" << r.device << "\", \"ok\": " << (r.ok ? "true" : "false")
      << ", \"median_us\": " << r.median_us << ", \"gbps\": " << r.gbps << ", \"tflops\": " << r.tflops
      << ", \"pct_copy_bw\": " << r.pct_bw << ", \"pct_bf16_peak\": " << r.pct_peak << ", \"floor_us\": " << r.floor_us
      << ", \"pct_floor\": " << r.pct_floor << ", \"x_vendor\": " << r.vs_vendor << ", \"checked\": \"" << r.checked
      << "\"}" << (i + 1 < g_results.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

// --plot: one row per case (op, case, dtype): its floor, the fastest of ember's variants and the
// fastest vendor variant on a log time axis, then on the roofline (Note [latency floor]).
struct PlotRow {
  std::string label;
  double floor = 0, ember = 0, vendor = 0;  // us
  double flops = 0, intensity = 0;          // the case's FLOPs, and FLOPs per byte (0: no FLOPs)
};

std::vector<PlotRow> plot_rows() {
  std::vector<PlotRow> rows;
  std::map<std::string, size_t> index;
  for (const Result& r : g_results) {
    if (!r.ok || r.median_us <= 0) continue;
    const std::string label =
        r.op + " " + r.case_name + (r.case_name.find(r.dtype) == std::string::npos ? " " + r.dtype : "");
    auto [it, fresh] = index.emplace(label, rows.size());
    if (fresh) rows.push_back({label});
    PlotRow& row = rows[it->second];
    row.floor = r.floor_us;
    if (r.tflops > 0 && r.gbps > 0) {  // every variant of a case moves the same bytes and FLOPs
      row.flops = r.tflops * 1e6 * r.median_us;
      row.intensity = r.tflops * 1e3 / r.gbps;
    }
    double& slot = r.vendor ? row.vendor : row.ember;
    slot = slot == 0 ? r.median_us : std::min(slot, r.median_us);
  }
  return rows;
}

// The roofline panel of --plot, `top` pixels down, `width` wide: each case with FLOPs at its
// intensity, its floor, ember's best and the vendor's best as TFLOP/s, under the roofs (copy
// bandwidth up to each GEMM peak). Returns its height (0 when no case has FLOPs).
int roofline_panel(std::ostringstream& o, const std::vector<PlotRow>& rows, int top, int width) {
  std::vector<std::pair<double, const char*>> peaks;  // TFLOP/s, name
  if (g_peak_tflops > 0) peaks.push_back({g_peak_tflops, "bf16/f16 GEMM peak"});
  if (g_peak_f32_tflops > 0) peaks.push_back({g_peak_f32_tflops, "f32 GEMM peak"});
  const auto tflops = [](const PlotRow& r, double us) { return us > 0 ? r.flops / us * 1e-6 : 0.0; };
  double ilo = INFINITY, ihi = 0, tlo = INFINITY, thi = 0;
  int without = 0;
  for (const PlotRow& r : rows) {
    if (r.intensity <= 0) {
      ++without;
      continue;
    }
    ilo = std::min(ilo, r.intensity);
    ihi = std::max(ihi, r.intensity);
    for (double us : {r.floor, r.ember, r.vendor})
      if (us > 0) {
        tlo = std::min(tlo, tflops(r, us));
        thi = std::max(thi, tflops(r, us));
      }
  }
  if (ihi <= 0 || thi <= 0 || g_copy_gbps <= 0) return 0;
  for (const auto& [p, name] : peaks) {
    ihi = std::max(ihi, p * 1e3 / g_copy_gbps);  // the ridge: where the bandwidth reaches the peak
    thi = std::max(thi, p);
  }
  const double x0 = std::floor(std::log10(ilo)), x1 = std::max(x0 + 1, std::ceil(std::log10(ihi)));
  const double y0 = std::floor(std::log10(tlo)), y1 = std::max(y0 + 1, std::ceil(std::log10(thi)));
  const int left = 70, plot_w = width - left - 30, plot_h = 320, head = 62, h = head + plot_h + 40;
  const double bottom = top + head + plot_h;
  auto x = [&](double i) { return left + (std::log10(i) - x0) / (x1 - x0) * plot_w; };
  auto y = [&](double t) { return bottom - (std::log10(t) - y0) / (y1 - y0) * plot_h; };
  o << "<text x=\"10\" y=\"" << top + 18 << "\" font-size=\"13\">the same cases on the roofline: achieved TFLOP/s "
    << "against FLOPs per byte (log-log); " << without << " case(s) without FLOPs are in the time panel only</text>\n";
  o << "<text x=\"10\" y=\"" << top + 36 << "\"><tspan fill=\"black\">- floor</tspan>  <tspan fill=\"#1f77b4\">o ember"
    << "</tspan>  <tspan fill=\"#d62728\">^ vendor</tspan>  <tspan fill=\"#888\">roofs: copy " << str(g_copy_gbps)
    << " GB/s up to each GEMM peak</tspan></text>\n";
  for (double e = x0; e <= x1; ++e)
    o << "<line x1=\"" << x(std::pow(10, e)) << "\" y1=\"" << top + head << "\" x2=\"" << x(std::pow(10, e))
      << "\" y2=\"" << bottom << "\" stroke=\"#ddd\"/>\n<text x=\"" << x(std::pow(10, e)) - 8 << "\" y=\""
      << bottom + 14 << "\">" << std::pow(10, e) << "</text>\n";
  for (double e = y0; e <= y1; ++e)
    o << "<line x1=\"" << left << "\" y1=\"" << y(std::pow(10, e)) << "\" x2=\"" << left + plot_w << "\" y2=\""
      << y(std::pow(10, e)) << "\" stroke=\"#ddd\"/>\n<text x=\"10\" y=\"" << y(std::pow(10, e)) + 4 << "\">"
      << std::pow(10, e) << "</text>\n";
  o << "<text x=\"" << left + plot_w / 2 - 40 << "\" y=\"" << bottom + 30
    << "\">FLOPs per byte</text>\n<text x=\"10\" y=\"" << top + head - 8 << "\">TFLOP/s</text>\n";
  const double ilo_axis = std::pow(10, x0), ihi_axis = std::pow(10, x1), tlo_axis = std::pow(10, y0);
  for (const auto& [p, name] : peaks) {
    // the bandwidth's slope from where it enters the panel to the ridge, then the peak
    const double ridge = p * 1e3 / g_copy_gbps, start = std::max(ilo_axis, tlo_axis * 1e3 / g_copy_gbps);
    o << "<polyline class=\"roof\" fill=\"none\" stroke=\"#888\" stroke-width=\"1.5\" points=\"" << x(start) << ","
      << y(std::max(tlo_axis, g_copy_gbps * start * 1e-3)) << " " << x(ridge) << "," << y(p) << " " << x(ihi_axis)
      << "," << y(p) << "\"><title>" << name << " " << p << " TFLOP/s</title></polyline>\n";
    o << "<text x=\"" << left + plot_w << "\" y=\"" << y(p) - 4 << "\" fill=\"#888\" text-anchor=\"end\">" << name
      << " " << str(p) << " TFLOP/s</text>\n";
  }
  for (const PlotRow& r : rows) {
    if (r.intensity <= 0) continue;
    const double cx = x(r.intensity);
    const std::string what = logging::xml_escape(r.label);
    if (r.floor > 0)
      o << "<line class=\"roof-floor\" x1=\"" << cx - 6 << "\" y1=\"" << y(tflops(r, r.floor)) << "\" x2=\"" << cx + 6
        << "\" y2=\"" << y(tflops(r, r.floor)) << "\" stroke=\"black\" stroke-width=\"2\"><title>" << what << ": floor "
        << tflops(r, r.floor) << " TFLOP/s</title></line>\n";
    if (r.ember > 0)
      o << "<circle class=\"roof-ember\" cx=\"" << cx << "\" cy=\"" << y(tflops(r, r.ember))
        << "\" r=\"4\" fill=\"#1f77b4\"><title>" << what << ": ember " << tflops(r, r.ember)
        << " TFLOP/s</title></circle>\n";
    if (r.vendor > 0)
      o << "<path class=\"roof-vendor\" d=\"M " << cx << " " << y(tflops(r, r.vendor)) - 5
        << " l 5 9 l -10 0 z\" fill=\"#d62728\"><title>" << what << ": vendor " << tflops(r, r.vendor)
        << " TFLOP/s</title></path>\n";
  }
  return h;
}

void write_plot(const std::string& path, Device d) {
  const std::vector<PlotRow> rows = plot_rows();
  double lo = INFINITY, hi = 0;
  for (const PlotRow& r : rows)
    for (double v : {r.floor, r.ember, r.vendor})
      if (v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  if (rows.empty() || hi <= 0) throw Error(str("--plot ", path, ": no case was timed, nothing to draw"));
  const double x0 = std::floor(std::log10(lo)), x1 = std::max(x0 + 1, std::ceil(std::log10(hi)));
  const int label_w = 420, plot_w = 520, row_h = 18, top = 54, h = top + row_h * static_cast<int>(rows.size()) + 30;
  auto x = [&](double us) { return label_w + (std::log10(us) - x0) / (x1 - x0) * plot_w; };
  std::ostringstream roof;
  const int roof_h = roofline_panel(roof, rows, h, label_w + plot_w + 20);
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << label_w + plot_w + 20 << "\" height=\"" << h + roof_h
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<text x=\"10\" y=\"18\" font-size=\"13\">bench_ops on " << logging::xml_escape(d.str())
    << ": time per case (log scale, microseconds)</text>\n";
  o << "<text x=\"10\" y=\"36\"><tspan fill=\"black\">| floor (launch " << str(g_launch_us)
    << " us + bytes at the copy bandwidth + FLOPs at the GEMM peak)</tspan>  <tspan fill=\"#1f77b4\">o ember</tspan>  "
       "<tspan fill=\"#d62728\">^ vendor</tspan></text>\n";
  for (double e = x0; e <= x1; ++e) {
    o << "<line x1=\"" << x(std::pow(10, e)) << "\" y1=\"" << top - 8 << "\" x2=\"" << x(std::pow(10, e)) << "\" y2=\""
      << h - 24 << "\" stroke=\"#ddd\"/>\n";
    o << "<text x=\"" << x(std::pow(10, e)) - 8 << "\" y=\"" << h - 10 << "\">" << std::pow(10, e) << "</text>\n";
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const PlotRow& r = rows[i];
    const double y = top + row_h * static_cast<double>(i) + row_h / 2.0;
    o << "<text x=\"10\" y=\"" << y + 4 << "\">" << logging::xml_escape(r.label) << "</text>\n";
    if (r.floor > 0)
      o << "<line class=\"floor\" x1=\"" << x(r.floor) << "\" y1=\"" << y - 6 << "\" x2=\"" << x(r.floor) << "\" y2=\""
        << y + 6 << "\" stroke=\"black\" stroke-width=\"2\"><title>floor " << r.floor << " us</title></line>\n";
    if (r.ember > 0)
      o << "<circle class=\"ember\" cx=\"" << x(r.ember) << "\" cy=\"" << y
        << "\" r=\"4\" fill=\"#1f77b4\"><title>ember " << r.ember << " us</title></circle>\n";
    if (r.vendor > 0)
      o << "<path class=\"vendor\" d=\"M " << x(r.vendor) << " " << y - 5
        << " l 5 9 l -10 0 z\" fill=\"#d62728\"><title>vendor " << r.vendor << " us</title></path>\n";
  }
  o << roof.str() << "</svg>\n";
  io::write_file_atomic(path, o.str());  // never a half-written file
}

}  // namespace

// --model: the prediction lives in kernel_model (it needs the simulator's counters, and CI's
// simulator stage builds it without the benchmarks); bench_ops hands over to it, beside it in bin/.
int run_model(int argc, char** argv) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::filesystem::path tool = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "kernel_model";
  if (!std::filesystem::exists(tool)) {
    std::fprintf(stderr,
                 "bench_ops: --model needs %s, which only the simulator build (-DEMBER_CUDA_SIM=ON) makes: the "
                 "prediction comes from the simulator's efficiency counters\n",
                 tool.c_str());
    return 2;
  }
  std::string path = tool.string();
  std::vector<char*> args{path.data()};
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--model") != 0) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::fprintf(stderr, "bench_ops: cannot run %s: %s\n", path.c_str(), std::strerror(errno));
  return 1;
}

namespace {

int run(int argc, char** argv) {
  register_lab_variants();  // the CUDA oracles are timed too (Note [lab variants])
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_ops: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--list") g_opt.list = true;
    else if (a == "--cases") g_opt.cases = true;
    else if (a == "--quick") g_opt.quick = true;
    else if (a == "--op") g_opt.ops = split_names(value("--op"));
    else if (a == "--variant") g_opt.variants = split_names(value("--variant"));
    else if (a == "--case") {
      const std::string re = value("--case");
      try {
        g_opt.case_filter.emplace(re, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        std::fprintf(stderr, "bench_ops: error: --case '%s' is not a regular expression: %s\n", re.c_str(), e.what());
        return 2;
      }
    } else if (a == "--device") g_opt.device = value("--device");
    else if (a == "--json") g_opt.json = value("--json");
    else if (a == "--plot") g_opt.plot = value("--plot");
    else if (a == "--min-time") g_opt.min_time = std::atof(value("--min-time").c_str());
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: bench_ops [--list] [--cases] [--op a,b] [--variant v] [--case REGEX] [--device auto|cpu|cuda]\n"
          "                 [--json FILE] [--plot FILE.svg] [--min-time SECONDS] [--quick] [Google Benchmark flags]\n"
          "       bench_ops --model [kernel_model arguments: --quick, --op, --variant, --kernels, --markdown, ...]\n");
      return 0;
    } else rest.push_back(argv[i]);
  }
  for (const std::string& name : g_opt.ops)
    if (find_op(name) == nullptr) {
      std::fprintf(stderr, "bench_ops: unknown op '%s' (see --list)\n", name.c_str());
      return 2;
    }
  if (g_opt.list) {
    print_list();
    return 0;
  }
  if (g_opt.cases) {
    if (print_cases()) return 0;
    std::fprintf(stderr, "bench_ops: error: --op and --case select no benchmark case (see --cases)\n");
    return 1;
  }
  Device dev = kCPU;
  if (g_opt.device == "cuda" || (g_opt.device == "auto" && cuda::device_count() > 0)) {
    if (cuda::device_count() == 0) {
      std::fprintf(stderr, "bench_ops: --device cuda but %s\n", cuda::unavailable_reason().c_str());
      return 1;
    }
    dev = kCUDA;
  } else if (g_opt.device != "cpu" && g_opt.device != "auto") {
    std::fprintf(stderr, "bench_ops: bad --device '%s' (auto, cpu or cuda)\n", g_opt.device.c_str());
    return 2;
  }
  manual_seed(1234);
  if (dev.is_cuda()) {
    auto p = cuda::properties(dev.index);
    std::printf("device: %s (sm_%d%d, %d SMs, %.0f GiB)\n", p.name.c_str(), p.major, p.minor, p.sm_count,
                static_cast<double>(p.total_memory) / (1 << 30));
  } else {
    std::printf("device: cpu (%d threads)\n", num_threads());
  }
  measure_rooflines(dev);
  static std::vector<BenchCase> storage;  // keeps cases alive for the registered benchmarks
  storage.reserve(4096);
  for (const OpInfo& info : all_ops()) {
    if (!wanted(g_opt.ops, info.name)) continue;
    for (const BenchCase& c : op_benches(info.id)()) {
      if (!case_wanted(c)) continue;
      storage.push_back(c);
      const BenchCase* bc = &storage.back();
      for (const Variant& v : info.variants) {
        if (v.device != dev.type || !wanted(g_opt.variants, v.name)) continue;
        // the CPU reference loops are too slow for the big cases: skip them on the CPU in --quick
        std::string name = str(info.name, "/", v.name, "/", c.name);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), run_case, &info, &v, bc, dev);
        b->UseManualTime()->Unit(benchmark::kMicrosecond);
        if (g_opt.quick) b->Iterations(3);
        else b->MinTime(g_opt.min_time);
      }
    }
  }
  int bargc = static_cast<int>(rest.size());
  benchmark::Initialize(&bargc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  fill_vendor_ratios();
  print_table(dev);
  if (!g_opt.json.empty()) write_json(g_opt.json);
  if (!g_opt.plot.empty()) write_plot(g_opt.plot, dev);
  bool any_failed = std::any_of(g_results.begin(), g_results.end(), [](const Result& r) { return !r.ok; });
  return any_failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  install_terminate_handler("bench_ops");  // Note [no abort] in core/error.h
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--model") == 0) return run_model(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // outside a timed case: the rooflines, the JSON file
    std::fflush(stdout);
    std::fprintf(stderr, "bench_ops: error: %s\n", user_message(e.what()).c_str());
    return 1;
  }
}
