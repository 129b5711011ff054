// Autotuning (see autotune.h).
#include "kernels/autotune.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <mutex>

#if EMBER_WITH_CUDA
#include <cublasLt.h>
#endif
#if EMBER_WITH_CUDNN
#include <cudnn.h>
#endif

#include "core/autograd/engine.h"
#include "core/cuda/runtime.h"
#include "core/parallel.h"
#include "core/runtime.h"
#include "kernels/functional.h"

#ifndef EMBER_COMMIT
#define EMBER_COMMIT "unknown"  // set by CMakeLists.txt
#endif

namespace ember {

namespace autotune {

namespace {

constexpr const char* kHeader = "# ember autotune cache v1";

struct State {
  std::mutex mu;
  std::map<std::string, Entry> cache;
  std::set<std::string> served_from_file;  // keys of the file's entries used (Stats::keys_from_file)
  std::string file;
  bool file_ok = false;  // entries may be appended
  Stats stats;
  int warmup = 2, timed = 5;
  std::string last_warning;
  // simulator-only variants that disagreed with the default on a device (Note [simulator-only
  // candidates]): never a candidate there again in this process
  std::set<std::pair<const Variant*, int>> disagreed;
};

State& state() {
  static State* s = new State();  // never destroyed: usable from other static destructors
  return *s;
}

void warn(State& s, const std::string& msg) {
  s.last_warning = msg;
  std::fprintf(stderr, "ember autotune: warning: %s\n", msg.c_str());
}

// A line of the file as it can be shown in a warning: at most n characters, non-printable bytes escaped.
std::string excerpt(const std::string& line, size_t n) {
  std::string out;
  for (size_t i = 0; i < line.size() && i < n; ++i) {
    unsigned char ch = static_cast<unsigned char>(line[i]);
    if (ch >= 32 && ch < 127) out += static_cast<char>(ch);
    else out += str("\\x", "0123456789abcdef"[ch >> 4], "0123456789abcdef"[ch & 15]);
  }
  return line.size() > n ? out + "..." : out;
}

// Appended to the key: "f32[8,16]{16,1}", "-" when undefined. Built with appends, not a stream:
// with measured CPU defaults every CPU call of an op with a choice builds its key.
void describe_tensor(std::string& k, const Tensor& t) {
  if (!t.defined()) {
    k += '-';
    return;
  }
  k += dtype_name(t.dtype());
  for (int d = 0; d < t.dim(); ++d) k.append(d ? "," : "[").append(std::to_string(t.shape()[d]));
  k += t.dim() ? "]{" : "[]{";
  for (int d = 0; d < t.dim(); ++d) k.append(d ? "," : "").append(std::to_string(t.strides()[d]));
  k += '}';
}

// The CPU as its choices depend on it (Note [CPU defaults] in registry.h): the model, the widest
// vector ISA the kernels use, the threads they run on.
std::string cpu_name() {
  static const std::string model = [] {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
        std::string m = line.substr(line.find(':') + 2);
        for (char& ch : m)
          if (ch == '\t' || ch == '|') ch = ' ';
        return m;
      }
    return std::string("unknown model");
  }();
  const char* isa = __builtin_cpu_supports("avx512bf16") ? "avx512bf16"
                    : __builtin_cpu_supports("avx512f")  ? "avx512"
                    : __builtin_cpu_supports("avx2")     ? "avx2"
                                                         : "baseline";
  return str("cpu:", model, " ", isa, " ", num_threads(), " threads ember ", EMBER_COMMIT);
}

// The vendor libraries the CUDA candidates call, as loaded (not as compiled against): another
// cuBLASLt or cuDNN can change which candidate wins.
std::string vendor_library_versions() {
  std::string v;
#if EMBER_WITH_CUDA
  v += " cublasLt " + std::to_string(cublasLtGetVersion());
#endif
#if EMBER_WITH_CUDNN
  v += " cudnn " + std::to_string(cudnnGetVersion());
#endif
  return v;
}

// A GPU as its choices depend on it: the model and compute capability, the driver, the CUDA
// runtime, cuBLASLt and cuDNN, and the commit ember's kernels were built from.
std::string device_name(Device d) {
  if (!d.is_cuda() && !d.is_cpu()) return str(d);
  // made once per GPU and per CPU thread count: the name is part of every key
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::string> names;
  const std::pair<int, int> id{d.is_cpu() ? -1 : static_cast<int>(d.index), d.is_cpu() ? num_threads() : 0};
  std::lock_guard<std::mutex> lock(mu);
  auto it = names.find(id);
  if (it == names.end()) {
    std::string n = d.is_cpu() ? cpu_name() : "";
    if (d.is_cuda()) {
      const cuda::DeviceProperties p = cuda::properties(d.index);
      n = str(d, ":", p.name, " sm_", p.major, p.minor, " ", cuda::software_versions(), vendor_library_versions(),
              " ember ", EMBER_COMMIT);
    }
    for (char& ch : n)
      if (ch == '\t' || ch == '|' || ch == '\n') ch = ' ';
    it = names.emplace(id, n).first;
  }
  return it->second;
}

Device call_device(const KernelCall& c) {
  for (const Tensor& t : c.in)
    if (t.defined()) return t.device();
  for (const Tensor& t : c.out)
    if (t.defined()) return t.device();
  return kCPU;
}

double (*g_fake_timer)(const Variant&) = nullptr;

// Milliseconds of one run of v on c (median of the timed runs); throws what the kernel throws.
double time_variant(const Variant& v, const KernelCall& c, Device dev, int warmup, int timed) {
  if (g_fake_timer != nullptr) return g_fake_timer(v);
  for (int i = 0; i < warmup; ++i) v.fn(c);
  std::vector<double> ms;
  if (dev.is_cuda()) {
    cuda::Stream s = cuda::current_stream(dev.index);
    std::vector<cuda::Event> ev;
    ev.reserve(static_cast<size_t>(2 * timed));
    for (int i = 0; i < timed; ++i) {
      ev.emplace_back(true);
      ev.emplace_back(true);
      ev[ev.size() - 2].record(s);
      v.fn(c);
      ev.back().record(s);
    }
    ev.back().synchronize();  // the one host sync of a new key (Note [autotune sync])
    for (int i = 0; i < timed; ++i)
      ms.push_back(ev[static_cast<size_t>(2 * i)].elapsed_ms(ev[static_cast<size_t>(2 * i + 1)]));
  } else {
    for (int i = 0; i < timed; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      v.fn(c);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

const Variant* find_candidate(std::span<const Variant* const> cands, const std::string& name) {
  for (const Variant* v : cands)
    if (v->name == name) return v;
  return nullptr;
}

// One line in one write() with O_APPEND: the lines of processes appending at once never interleave.
void append_entry(State& s, const std::string& key, const std::string& variant) {
  if (s.file.empty() || !s.file_ok) return;
  const std::string line = key + '\t' + variant + '\n';
  const int fd = ::open(s.file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  const bool ok = fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if ((fd >= 0 && ::close(fd) != 0) || !ok) {
    warn(s, str("cannot append to the cache file ", s.file, "; new entries stay in memory only"));
    s.file_ok = false;
  }
}

}  // namespace

std::string key(const OpInfo& info, const KernelCall& c) {
  std::string k;
  k.reserve(256);
  k.append(info.name).append("|").append(device_name(call_device(c))).append(deterministic() ? "|det1|in" : "|det0|in");
  for (const Tensor& t : c.in) describe_tensor(k += ' ', t);
  k += "|out";
  for (const Tensor& t : c.out) describe_tensor(k += ' ', t);
  k += "|attrs ";
  static const char* hex = "0123456789abcdef";
  for (unsigned char ch : c.attrs.bytes()) k.append(1, hex[ch >> 4]).append(1, hex[ch & 15]);
  return k;
}

namespace {

// The cached choice for key k among the candidates, or null.
const Variant* cached_choice(State& s, const std::string& k, std::span<const Variant* const> candidates) {
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.cache.find(k);
  if (it == s.cache.end()) return nullptr;
  if (const Variant* v = find_candidate(candidates, it->second.variant)) {
    ++s.stats.hits;
    if (it->second.from_file && s.served_from_file.insert(k).second) ++s.stats.keys_from_file;
    return v;
  }
  s.cache.erase(it);  // stale (variant gone or not applicable): tune again
  return nullptr;
}

// Note [autotune scratch]: the candidates run on copies of every tensor of the call, never on
// the caller's. Outputs get scratch tensors with the call's layouts; every defined input is
// cloned too (same layout), because ops also write inputs that are not outputs: batch_norm's
// running statistics, the AMP scale/growth tracker, in-place random fills. An output that
// aliases an input (in-place ops, optimizer steps) becomes that input's clone. Cloning read-only
// inputs as well costs one copy per new key and keeps this right for any op, declared or not.
struct Scratch {
  std::vector<Tensor> in, out;
};

Scratch scratch_tensors(const KernelCall& c) {
  auto scratch_like = [](const Tensor& t) {
    return empty_strided(t.shape(), t.strides(), TensorOptions().dtype(t.dtype()).device(t.device()));
  };
  Scratch sc;
  std::vector<Tensor>& in = sc.in;
  in.reserve(c.in.size());
  for (const Tensor& t : c.in) {
    if (!t.defined()) {
      in.push_back(t);
      continue;
    }
    // the same tensor given twice stays one tensor (one clone)
    size_t j = 0;
    while (j < in.size() && !(c.in[j].defined() && c.in[j].is_same(t))) ++j;
    if (j < in.size()) {
      in.push_back(in[j]);
      continue;
    }
    bool broadcast = false;  // a stride-0 (expanded) input: its clone is dense, same values
    for (int d = 0; d < t.dim(); ++d) broadcast = broadcast || (t.strides()[d] == 0 && t.shape()[d] > 1);
    if (broadcast) {
      in.push_back(t.contiguous().clone());
      continue;
    }
    Tensor copy = scratch_like(t);
    copy_(copy, t);
    in.push_back(copy);
  }
  for (const Tensor& o : c.out) {
    size_t j = 0;
    while (j < c.in.size() && !(o.defined() && c.in[j].defined() && c.in[j].is_same(o))) ++j;
    if (j < c.in.size()) sc.out.push_back(in[j]);
    else if (o.defined()) sc.out.push_back(scratch_like(o));
    else sc.out.push_back(o);
  }
  return sc;
}

// The fastest candidate on call c and its time (best_ms); null when every candidate threw. failures: how many did.
const Variant* fastest(std::span<const Variant* const> candidates, const KernelCall& c, Device dev, int warmup,
                       int timed, double& best_ms, uint64_t& failures) {
  const Variant* best = nullptr;
  for (const Variant* v : candidates) {
    double ms;
    try {
      ms = time_variant(*v, c, dev, warmup, timed);
    } catch (const std::exception&) {
      ++failures;  // e.g. a vendor library that rejects this configuration: not a candidate
      continue;
    }
    if (best == nullptr || ms < best_ms) {
      best = v;
      best_ms = ms;
    }
  }
  return best;
}

// Note [simulator-only candidates]: a variant flagged kSimOnly has run only in the CUDA simulator
// (sim/), whose reading of the ISA (wgmma's fragment layouts, TMA's swizzles, the mbarriers'
// phases) no GPU has confirmed yet. It is never a default, but the autotuner may pick it where it
// is fastest: before timing it for a new key, the tuner runs it and the op's default variant on
// copies of the call's inputs, and times it only if every output agrees with the default's within
// a few units in the last place of the output's dtype (at most 2^-16 for f32 and f64, which
// leaves room for another summation order), relative to the element and to the output's largest
// magnitude. A misread layout moves outputs by their own size, far beyond that. A variant that
// disagrees is left out on that device for the rest of the process, with one warning naming the
// op, the variant, the element and both values; a call the check cannot decide (no default, a
// default that throws, a non-finite value in its output) leaves it out of that key only. Each
// check costs the new key one more host sync. When a GPU run has checked the kernel and
// bench/results/ records it, the flag goes (Note [library rule] in bench/lab/library_rule.h).

// The unit of disagreement for outputs of dtype t: a few of its ulps, 0 for integers (exact).
double agreement_eps(DType t) {
  switch (t) {
    case DType::f16: return std::ldexp(1.0, -10);
    case DType::bf16: return std::ldexp(1.0, -7);
    case DType::f32:
    case DType::f64: return std::ldexp(1.0, -16);
    default: return 0;
  }
}

enum class Agreement { agrees, differs, undecided };

// Whether a candidate's output `got` agrees with the default's `want`; `what` says where it differs.
// Computed on the outputs' device and read back in one copy (the check's one host sync).
Agreement compare_output(const Tensor& got, const Tensor& want, std::string& what) {
  if (want.numel() == 0) return Agreement::agrees;
  const DType wide = want.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor w = cast(want, wide).reshape({-1}), g = cast(got, wide).reshape({-1});
  const double eps = agreement_eps(want.dtype());
  const Tensor top = max(abs(w));
  Tensor diff = abs(g - w);
  diff = where(eq(diff, diff), diff, INFINITY);  // a NaN in got differs
  const Tensor excess = diff - (abs(w) * (4 * eps) + top * (4 * eps));
  const Tensor at = argmax(excess).reshape({1});
  // top, the largest excess, its index, got and want there; f64 holds any index exactly
  const Tensor read =
      cat({cast(top.reshape({1}), DType::f64), cast(index_select(excess, 0, at), DType::f64), cast(at, DType::f64),
           cast(index_select(g, 0, at), DType::f64), cast(index_select(w, 0, at), DType::f64)})
          .cpu();
  const double* r = read.data<double>();
  if (!std::isfinite(r[0])) return Agreement::undecided;
  if (r[1] <= 0) return Agreement::agrees;
  what += str("element ", static_cast<int64_t>(r[2]), " is ", r[3], ", the default's ", r[4]);
  return Agreement::differs;
}

// Runs `v` on copies of the call's tensors (Note [autotune scratch]) and returns the outputs.
std::vector<Tensor> run_on_copies(const Variant& v, const KernelCall& c) {
  Scratch sc = scratch_tensors(c);
  v.fn(KernelCall{c.op, sc.in, sc.out, c.attrs});
  return sc.out;
}

// Keeps the kSimOnly candidates that agree with the default on call c (Note [simulator-only
// candidates]) and every other candidate.
void check_sim_only(State& s, const OpInfo& info, const KernelCall& c, Device dev, std::vector<const Variant*>& cands) {
  const int where = dev.is_cpu() ? -1 : static_cast<int>(dev.index);
  std::vector<Tensor> want;
  const Variant* def = nullptr;
  bool have_want = false, want_ok = false;
  std::vector<const Variant*> kept;
  for (const Variant* v : cands) {
    if (!(v->flags & kSimOnly)) {
      kept.push_back(v);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.disagreed.count({v, where})) continue;
      ++s.stats.sim_only_checks;
    }
    if (!have_want) {
      have_want = true;
      def = info.default_variant(c, dev.type);
      try {
        if (def != nullptr) want = run_on_copies(*def, c);
        want_ok = def != nullptr;
      } catch (const std::exception&) {
        want_ok = false;
      }
    }
    if (!want_ok) continue;
    std::vector<Tensor> got;
    try {
      got = run_on_copies(*v, c);
    } catch (const std::exception&) {
      continue;  // it refuses the call: timing it would fail too
    }
    Agreement a = Agreement::agrees;
    std::string what;
    for (size_t k = 0; k < want.size() && a == Agreement::agrees; ++k)
      if (want[k].defined()) a = compare_output(got[k], want[k], what = str("output ", k, ": "));
    if (a == Agreement::agrees) kept.push_back(v);
    if (a != Agreement::differs) continue;
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.sim_only_rejected;
    s.disagreed.insert({v, where});
    warn(s, str(info.name, "/", v->name, " has run only in the simulator, and on ", device_name(dev),
                " it disagrees with ", def->name, " (", what,
                "): it is left out of tuning on this device (Note [simulator-only candidates])"));
  }
  cands = std::move(kept);
}

}  // namespace

const Variant* choose(const OpInfo& info, const KernelCall& c, std::span<const Variant* const> candidates_in) {
  State& s = state();
  // the registry already filters these; filtering again keeps choose() safe to call directly
  std::vector<const Variant*> candidates;
  for (const Variant* v : candidates_in)
    if (!(deterministic() && (v->flags & kNondeterministic))) candidates.push_back(v);
  if (candidates.empty()) return nullptr;
  if (candidates.size() == 1) return candidates[0];
  const std::string k = key(info, c);
  if (const Variant* v = cached_choice(s, k, candidates)) return v;
  // Inside a parallel_for body (a kernel that runs another op per chunk) nothing is timed: the
  // other chunks run beside it, so the times would mean little, and every thread would tune the
  // same key at once. One thread tunes at a time (recursively: a candidate may call other ops).
  if (in_parallel_region()) return nullptr;
  static std::recursive_mutex tuning;
  std::lock_guard<std::recursive_mutex> one_at_a_time(tuning);
  if (const Variant* v = cached_choice(s, k, candidates)) return v;  // tuned while this thread waited
  const Device dev = call_device(c);
  if (dev.is_cuda() && cuda::current_stream(dev.index).is_capturing()) {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.capture_skips;
    return nullptr;
  }
  int warmup, timed;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    warmup = s.warmup;
    timed = s.timed;
  }
  autograd::NoGradGuard no_grad;
  check_sim_only(s, info, c, dev, candidates);  // Note [simulator-only candidates]
  if (candidates.empty()) return nullptr;
  Scratch sc = scratch_tensors(c);  // Note [autotune scratch]
  KernelCall tc{c.op, sc.in, sc.out, c.attrs};
  double best_ms = 0;
  uint64_t failures = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const Variant* best = fastest(candidates, tc, dev, warmup, timed, best_ms, failures);
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.tuning_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.stats.failures += failures;
  if (best == nullptr) return nullptr;
  ++s.stats.tunings;
  s.cache[k] = Entry{k, best->name, best_ms};
  append_entry(s, k, best->name);
  return best;
}

void install() { set_autotune_hook(&choose); }

void set_timer_for_testing(double (*ms_of)(const Variant& v)) { g_fake_timer = ms_of; }

namespace {

// The entries of an open cache file into `loaded`; what is wrong with it ("line 3 is ..."), or
// empty when it is a cache file (an empty file is one too: `has_header` says whether it has begun).
std::string parse_file(std::ifstream& f, std::vector<std::pair<std::string, std::string>>& loaded, bool& has_header) {
  std::string line;
  int64_t lineno = 0;
  has_header = false;
  while (std::getline(f, line)) {
    ++lineno;
    if (lineno == 1) {
      if (line != kHeader) return str("line 1 is '", excerpt(line, 60), "', expected '", kHeader, "'");
      has_header = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == line.size() || line.find('|') == std::string::npos)
      return str("line ", lineno, " is not 'key<TAB>variant': '", excerpt(line, 80), "'");
    loaded.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return {};
}

// The file replaced by one holding the header alone, atomically (a temporary file renamed over
// it): another process reading it sees the old file or the new one, and one appending to it at
// that moment loses its line, never the file. False when it cannot be written.
bool start_file(const std::string& path) {
  const std::string tmp = str(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const std::string header = std::string(kHeader) + "\n";
  const bool written = ::write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size());
  if (::close(fd) != 0 || !written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

void set_cache_file(const std::string& path) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.file = path;
  s.file_ok = false;
  if (path.empty()) return;
  std::vector<std::pair<std::string, std::string>> loaded;
  bool has_header = false;
  std::string problem;
  if (std::ifstream f(path); f) problem = parse_file(f, loaded, has_header);
  if (!problem.empty()) {  // a damaged or foreign file: its entries cannot be trusted, none is used
    warn(s, str("the cache file ", path, " is not one: ", problem, "; it is started again"));
    loaded.clear();
  }
  if (!has_header || !problem.empty()) {
    if (!start_file(path)) {
      warn(s, str("cannot create the cache file ", path, " (", std::strerror(errno), "); entries stay in memory only"));
      return;
    }
  }
  for (auto& [k, v] : loaded) s.cache[k] = Entry{k, v, 0, true};
  s.file_ok = true;
}

std::string cache_file() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.file;
}

void clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.cache.clear();
  s.served_from_file.clear();
  s.disagreed.clear();
  s.last_warning.clear();
}

std::vector<Entry> entries() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<Entry> out;
  for (const auto& [k, e] : s.cache) out.push_back(e);
  return out;
}

Stats stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

void reset_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats = Stats{};
  s.served_from_file.clear();
}

void set_runs(int warmup, int timed) {
  EMBER_CHECK(warmup >= 0 && timed >= 1, "autotune::set_runs: need warmup >= 0 and timed >= 1, got ", warmup, " and ",
              timed);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.warmup = warmup;
  s.timed = timed;
}

std::string last_warning() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.last_warning;
}

}  // namespace autotune

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string variant_names(const OpInfo& info) {
  std::vector<std::string> names;
  for (const Variant& v : info.variants)
    if (std::find(names.begin(), names.end(), v.name) == names.end()) names.push_back(v.name);
  std::string out;
  for (const std::string& n : names) out.append(out.empty() ? "" : ", ").append(n);
  return out;
}

void check_backend(const OpInfo& info, const std::string& backend) {
  if (backend.empty() || backend == "default" || backend == "auto" || backend == "vendor") return;
  for (const Variant& v : info.variants)
    if (v.name == backend) return;
  EMBER_FAIL("set_backends: op ", info.name, " has no backend '", backend,
             "' (expected default, auto, vendor or one of its variants: ", variant_names(info), ")",
             EMBER_WITH_CUDA ? "" : "; this ember was built without CUDA, so CUDA variants do not exist");
}

}  // namespace

void set_backends(const std::string& spec) {
  std::vector<std::pair<const OpInfo*, std::string>> plan;  // nullptr op: every op
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    // a bare default, auto or vendor means every op: "vendor" is "*=vendor"
    if (eq == std::string::npos && (item == "default" || item == "auto" || item == "vendor")) {
      item = "*=" + item;
      eq = 1;
    }
    EMBER_CHECK(eq != std::string::npos, "set_backends: '", item, "' is not op=backend (in '", spec,
                "'); for every op write *=backend, or default, auto or vendor alone");
    std::string op = trim(item.substr(0, eq)), be = trim(item.substr(eq + 1));
    EMBER_CHECK(!be.empty(), "set_backends: no backend given for '", op, "' (in '", spec, "')");
    if (op == "*") {
      if (be != "default" && be != "auto" && be != "vendor") {
        // a variant name for every op: it must at least exist for one
        bool any = false;
        for (const OpInfo& o : all_ops())
          for (const Variant& v : o.variants) any = any || v.name == be;
        EMBER_CHECK(any, "set_backends: no op has a backend '", be,
                    "' (for '*' use default, auto, vendor or a variant name)");
      }
      plan.emplace_back(nullptr, be);
      continue;
    }
    const OpInfo* info = find_op(op);
    if (info == nullptr) {
      std::string known;
      for (const OpInfo& o : all_ops())
        if (o.view == nullptr) known.append(known.empty() ? "" : ", ").append(o.name);
      EMBER_FAIL("set_backends: unknown op '", op, "' (in '", spec, "'); ops with kernels: ", known);
    }
    EMBER_CHECK(info->view == nullptr, "set_backends: ", op, " is a view and has no kernel to choose");
    check_backend(*info, be);
    plan.emplace_back(info, be);
  }
  for (const auto& [info, be] : plan) {
    if (info == nullptr) set_backend_all(be);
    else set_backend(info->id, be);
  }
}

std::string backends() {
  std::string out;
  for (const OpInfo& o : all_ops()) {
    std::string b = backend(o.id);
    if (b.empty()) continue;
    if (!out.empty()) out += ',';
    out.append(o.name).append("=").append(b);
  }
  return out;
}

}  // namespace ember
