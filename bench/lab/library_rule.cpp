// The check of Note [library rule] (bench/lab/library_rule.h), the results files' reader and the
// registry's calls.
#include "bench/lab/library_rule.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "bench/op_shapes/op_shapes.h"
#include "tests/op_samples/op_samples.h"

namespace ember {

namespace {

constexpr const char* kHeader = "op\tcase\tdtype\tvariant\tkind\tmedian_us\twinner";

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> f;
  size_t start = 0;
  while (true) {
    size_t tab = line.find('\t', start);
    f.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return f;
    start = tab + 1;
  }
}

// The results of one (op, case, dtype) name one winner, the fastest.
void check_winners(const std::vector<BenchResult>& rs, const std::string& path) {
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<const BenchResult*>> cases;
  for (const BenchResult& r : rs) cases[{r.op, r.case_name, r.dtype}].push_back(&r);
  for (const auto& [key, lines] : cases) {
    const BenchResult* winner = nullptr;
    const BenchResult* fastest = lines[0];
    for (const BenchResult* r : lines) {
      if (r->winner) {
        EMBER_CHECK(winner == nullptr, r->where, ": a second winner of ", r->op, " '", r->case_name, "' ", r->dtype,
                    " (the first at ", winner->where, ")");
        winner = r;
      }
      if (r->median_us < fastest->median_us) fastest = r;
    }
    EMBER_CHECK(winner != nullptr, path, ": ", fastest->op, " '", fastest->case_name, "' ", fastest->dtype,
                " has no winner (one line of each case says yes: the fastest)");
    EMBER_CHECK(winner->median_us <= fastest->median_us, winner->where, ": the winner ", winner->variant, " (",
                winner->median_us, " us) is slower than ", fastest->variant, " (", fastest->median_us, " us, ",
                fastest->where, ")");
  }
}

// A tensor with t's shape, strides and offset and the given dtype, on `device`, over storage that is
// never allocated nor read: what the rule asks the registry about.
Tensor meta_tensor(const Shape& shape, const Strides& strides, int64_t offset, DType dtype, Device device) {
  static char* const kNowhere = reinterpret_cast<char*>(uintptr_t{1} << 44);  // 4 KiB aligned, never read
  const int64_t span = offset + storage_span(shape, strides);
  Tensor base = from_blob(kNowhere, Shape{std::max<int64_t>(span, 1)}, dtype, device);
  return make_view(base, shape, strides, offset);
}

Tensor meta_like(const Tensor& t, DType dtype, Device device) {
  if (!t.defined()) return t;
  return meta_tensor(t.shape(), t.strides(), t.offset(), dtype, device);
}

// The call `c` as the runner would see it on `device` (run_kernel in kernels/registry.cpp): the
// inputs made contiguous unless the op takes strides, the outputs as infer() describes them.
// False when infer() rejects the inputs (a sample of bad input).
bool device_call(const OpInfo& info, const RuleCall& call, Device device, std::vector<Tensor>* in,
                 std::vector<Tensor>* out) {
  in->clear();
  out->clear();
  for (const Tensor& t : call.inputs) {
    if (t.defined() && info.contiguous_inputs && !t.is_contiguous())
      in->push_back(meta_tensor(t.shape(), contiguous_strides(t.shape()), 0, t.dtype(), device));
    else in->push_back(meta_like(t, t.defined() ? t.dtype() : DType::f32, device));
  }
  std::vector<TensorSpec> specs;
  try {
    specs = info.infer(*in, call.attrs);
  } catch (const std::exception&) {
    return false;
  }
  for (const TensorSpec& s : specs) {
    if (s.alias >= 0) out->push_back(in->at(static_cast<size_t>(s.alias)));
    else
      out->push_back(
          meta_tensor(s.shape, s.strides.empty() ? contiguous_strides(s.shape) : s.strides, 0, s.dtype, device));
  }
  return true;
}

Device device_of(DeviceType d) { return d == DeviceType::cpu ? kCPU : kCUDA; }
const char* device_str(DeviceType d) { return d == DeviceType::cpu ? "cpu" : "cuda"; }

// Restores the deterministic mode the check found (it asks for the default in both modes).
struct DeterministicScope {
  bool saved = deterministic();
  ~DeterministicScope() { set_deterministic(saved); }
};

}  // namespace

std::vector<BenchResult> read_bench_results(const std::string& path) {
  std::ifstream f(path);
  EMBER_CHECK(f.good(), "cannot read the results file ", path);
  std::vector<BenchResult> out;
  std::string line;
  int n = 0;
  bool header = false;
  while (std::getline(f, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(n);
    if (!header) {
      EMBER_CHECK(line == kHeader, where, ": expected the column line '", kHeader,
                  "' (tab-separated) before the results");
      header = true;
      continue;
    }
    std::vector<std::string> f7 = split_tabs(line);
    EMBER_CHECK(f7.size() == 7, where, ": expected 7 tab-separated fields (", kHeader, "), got ", f7.size());
    BenchResult r{.op = f7[0], .case_name = f7[1], .dtype = f7[2], .variant = f7[3], .kind = f7[4], .where = where};
    for (int i = 0; i < 4; ++i) EMBER_CHECK(!f7[static_cast<size_t>(i)].empty(), where, ": field ", i + 1, " is empty");
    EMBER_CHECK(r.kind == "ember" || r.kind == "vendor", where, ": kind must be ember or vendor, got '", r.kind, "'");
    char* end = nullptr;
    r.median_us = std::strtod(f7[5].c_str(), &end);
    EMBER_CHECK(!f7[5].empty() && end != nullptr && *end == '\0' && r.median_us > 0, where,
                ": median_us must be a positive number of microseconds, got '", f7[5], "'");
    EMBER_CHECK(f7[6] == "yes" || f7[6] == "no", where, ": winner must be yes or no, got '", f7[6], "'");
    r.winner = f7[6] == "yes";
    out.push_back(std::move(r));
  }
  EMBER_CHECK(header, path, ": no column line '", kHeader, "' (bench/results/README.md has the format)");
  check_winners(out, path);
  return out;
}

std::vector<BenchResult> read_bench_results_dir(const std::string& dir) {
  EMBER_CHECK(std::filesystem::is_directory(dir), "no results folder ", dir,
              " (bench/results/ of the repository; EMBER_BENCH_RESULTS names another)");
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".tsv") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<BenchResult> out;
  for (const std::string& f : files) {
    std::vector<BenchResult> rs = read_bench_results(f);
    out.insert(out.end(), rs.begin(), rs.end());
  }
  return out;
}

std::vector<const RuleVerdict*> RuleReport::failures() const {
  std::vector<const RuleVerdict*> out;
  for (const RuleVerdict& v : verdicts)
    if (v.earned_by.empty()) out.push_back(&v);
  return out;
}

std::string RuleReport::message() const {
  std::ostringstream os;
  std::vector<const RuleVerdict*> bad = failures();
  if (!bad.empty()) {
    os << bad.size() << " library variant(s) neither the default choice for a test sample or benchmark case of "
       << "their op nor a recorded winner (Note [library rule] in bench/lab/library_rule.h):\n";
    for (const RuleVerdict* v : bad) {
      os << "  " << v->op->name << "/" << v->variant->name << " (" << device_str(v->variant->device) << "): ";
      if (v->ran_on_gpu.empty())
        os << "move it to bench/lab/, or record the GPU measurement where it wins in bench/results/\n";
      else
        os << "flagged kSimOnly, but it has run on a GPU (" << v->ran_on_gpu
           << "): drop the flag, then it stays where it is the default or the recorded winner, or moves to "
              "bench/lab/\n";
    }
    os << "(the lab: add_lab_variant, Note [lab variants] in kernels/lab_variants.h; a measurement: "
       << "bench/results/README.md)\n";
  }
  if (!stale.empty()) {
    os << stale.size() << " results line(s) name what the registry does not have (renamed or removed: update the "
       << "file, bench/results/README.md):\n";
    for (const std::string& s : stale) os << "  " << s << "\n";
  }
  return os.str();
}

namespace {

// Results lines that name an op, or an ember variant, the registry does not have.
std::vector<std::string> stale_results(std::span<const OpInfo> ops, const std::vector<BenchResult>& results) {
  std::vector<std::string> stale;
  for (const BenchResult& b : results) {
    auto op = std::find_if(ops.begin(), ops.end(), [&](const OpInfo& o) { return b.op == o.name; });
    if (op == ops.end()) {
      stale.push_back(str(b.where, ": op '", b.op, "' is not in the registry"));
      continue;
    }
    if (b.kind == "vendor") continue;  // a vendor library this build may lack
    bool have =
        std::any_of(op->variants.begin(), op->variants.end(), [&](const Variant& v) { return v.name == b.variant; });
    if (!have) stale.push_back(str(b.where, ": ", b.op, " has no variant '", b.variant, "'"));
  }
  return stale;
}

bool undecided(const std::vector<RuleVerdict>& verdicts, DeviceType d) {
  return std::any_of(verdicts.begin(), verdicts.end(),
                     [&](const RuleVerdict& v) { return v.earned_by.empty() && v.variant->device == d; });
}

// Credits the variant the runner picks for `call` on each device, with deterministic mode off and
// on, unless it is credited already.
void credit_defaults(const OpInfo& info, const RuleCall& call, std::vector<RuleVerdict>& verdicts) {
  std::vector<Tensor> in, out;
  for (DeviceType d : {DeviceType::cpu, DeviceType::cuda}) {
    if (!call.devices.empty() && std::find(call.devices.begin(), call.devices.end(), d) == call.devices.end()) continue;
    if (!undecided(verdicts, d) || !device_call(info, call, device_of(d), &in, &out)) continue;
    const KernelCall c{info.id, in, out, call.attrs};
    for (bool det : {false, true}) {
      set_deterministic(det);
      const Variant* chosen = nullptr;
      try {
        chosen = info.default_variant(c, d);
      } catch (const std::exception&) {
        // a `supports` that rejects the call by throwing: the runner would throw too
      }
      for (RuleVerdict& v : verdicts)
        if (v.variant == chosen && v.earned_by.empty())
          v.earned_by = str("the default for ", call.label, det ? " in deterministic mode" : "");
    }
  }
}

}  // namespace

RuleReport check_library_rule(std::span<const OpInfo> ops, const RuleCalls& calls,
                              const std::vector<BenchResult>& results) {
  RuleReport report;
  report.stale = stale_results(ops, results);
  DeterministicScope restore;
  for (const OpInfo& info : ops) {
    if (info.view != nullptr) continue;
    std::vector<RuleVerdict> verdicts;
    for (const Variant& v : info.variants)
      if (!(v.flags & (kVendor | kReference))) verdicts.push_back({&info, &v, ""});
    for (RuleVerdict& v : verdicts) {
      if (!(v.variant->flags & kSimOnly)) continue;
      auto ran = std::find_if(results.begin(), results.end(), [&](const BenchResult& b) {
        return b.kind == "ember" && b.op == info.name && b.variant == v.variant->name;
      });
      if (ran == results.end()) v.earned_by = "an autotune candidate run only in the simulator so far (kSimOnly)";
      else v.ran_on_gpu = ran->where;
    }
    for (const BenchResult& b : results)
      if (b.winner && b.kind == "ember" && b.op == info.name)
        for (RuleVerdict& v : verdicts)
          if (v.earned_by.empty() && v.ran_on_gpu.empty() && v.variant->name == b.variant)
            v.earned_by = str("the recorded winner of '", b.case_name, "' ", b.dtype, " (", b.where, ")");
    if (undecided(verdicts, DeviceType::cpu) || undecided(verdicts, DeviceType::cuda)) {
      calls(info, [&](const RuleCall& call) {
        ++report.calls;
        credit_defaults(info, call, verdicts);
        return undecided(verdicts, DeviceType::cpu) || undecided(verdicts, DeviceType::cuda);
      });
    }
    report.verdicts.insert(report.verdicts.end(), verdicts.begin(), verdicts.end());
  }
  return report;
}

RuleCalls registry_rule_calls() {
  return [](const OpInfo& info, const std::function<bool(const RuleCall&)>& visit) {
    // the samples, in the dtypes tests/op_driver.cpp runs them in
    for (const OpSample& s : op_samples(info.id)()) {
      if (!s.parity) continue;
      bool has_float = false;
      for (const Tensor& t : s.inputs) has_float = has_float || (t.defined() && is_floating(t.dtype()));
      for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
        RuleCall call;
        if (has_float) {
          if (dt == DType::f64 || s.dtypes.has(dt)) call.devices.push_back(DeviceType::cpu);
          if (s.dtypes.has(dt)) call.devices.push_back(DeviceType::cuda);
          if (call.devices.empty()) continue;
        } else if (dt != DType::f32) {
          continue;  // integer inputs only: one run, uncast
        }
        for (size_t i = 0; i < s.inputs.size(); ++i) {
          const Tensor& t = s.inputs[i];
          const bool keep =
              !t.defined() || !is_floating(t.dtype()) ||
              std::find(s.keep_dtype.begin(), s.keep_dtype.end(), static_cast<int>(i)) != s.keep_dtype.end();
          call.inputs.push_back(meta_like(t, keep && t.defined() ? t.dtype() : dt, kCPU));
        }
        call.attrs = s.attrs;
        call.label = str("sample '", s.name, "'", has_float ? str(" ", dt) : "");
        if (!visit(call)) return;
      }
    }
    // the benchmark cases: the described ones, then those with custom inputs (made on the CPU,
    // and only if a variant is still undecided: some are large)
    std::vector<BenchCase> benches = op_benches(info.id)();
    for (const BenchCase& bc : benches) {
      if (bc.make) continue;
      RuleCall call{str("benchmark '", bc.name, "'"), {}, bc.attrs, {}};
      for (const TensorSpec& s : bc.inputs)
        call.inputs.push_back(
            meta_tensor(s.shape, s.strides.empty() ? contiguous_strides(s.shape) : s.strides, 0, s.dtype, kCPU));
      if (!visit(call)) return;
    }
    for (const BenchCase& bc : benches) {
      if (!bc.make) continue;
      RuleCall call{str("benchmark '", bc.name, "'"), {}, bc.attrs, {}};
      for (const Tensor& t : bc.make(kCPU))
        call.inputs.push_back(meta_like(t, t.defined() ? t.dtype() : DType::f32, kCPU));
      if (!visit(call)) return;
    }
  };
}

}  // namespace ember
