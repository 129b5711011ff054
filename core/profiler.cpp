#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/runtime.h"

#if EMBER_WITH_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace ember::profiler {

namespace {
std::atomic<Listener*> g_listener{nullptr};
}

void set_listener(Listener* l) { g_listener.store(l); }
Listener* listener() { return g_listener.load(std::memory_order_acquire); }

Range::Range(const char* name, const char* detail, Device device)
    : name_(name), detail_(detail), device_(device), listener_(listener()) {
#if EMBER_WITH_CUDA
  nvtxRangePushA(name);
#endif
  if (listener_ != nullptr) listener_->on_begin(name_, detail_, device_);
}

namespace {
// A listener's on_end that throws, caught in Range's destructor: reported once per process.
void report_listener_failure(const char* range, const char* what) noexcept {
  static std::atomic<bool> reported{false};
  if (reported.exchange(true)) return;
  std::fprintf(stderr, "ember: warning: the profiler could not close the range '%s': %s\n", range, what);
}
}  // namespace

// A destructor: nothing thrown leaves it (Note [no abort] in core/error.h).
Range::~Range() {
  if (listener_ != nullptr) {
    try {
      listener_->on_end(name_, detail_, device_);
    } catch (const std::exception& e) {
      report_listener_failure(name_, e.what());
    } catch (...) {
      report_listener_failure(name_, "an exception that is not a std::exception");
    }
  }
#if EMBER_WITH_CUDA
  nvtxRangePop();
#endif
}

// ---- TraceProfiler ----

// Note [profiling captured work]: work queued on a stream that is capturing a CUDA graph does not
// run then; it runs at each replay. An event recorded during the capture becomes part of the graph
// and cannot be timed (cudaEventElapsedTime refuses it), so ranges opened or closed while their
// stream captures keep their CPU time only (what the capture cost the host), and the graph's GPU
// time is the "graph replay" range that cuda::Graph::replay opens around each launch.

struct TraceProfiler::Impl {
  struct Record {
    std::string name;
    std::string detail;
    int thread = 0;
    int depth = 0;
    double cpu_begin = 0, cpu_end = 0;  // us since start
    Device device;
    void* stream = nullptr;
    std::unique_ptr<cuda::Event> start, stop;
    double gpu_begin = -1, gpu_dur = -1;  // resolved later
  };
  std::mutex mu;
  std::vector<Record> records;
  std::unordered_map<std::thread::id, std::vector<size_t>> stacks;
  std::unordered_map<std::thread::id, int> thread_ids;
  std::chrono::steady_clock::time_point t0;
  std::map<int, std::unique_ptr<cuda::Event>> ref;  // per CUDA device: the GPU time reference
  std::map<int, double> ref_host_us;
  std::string failure;  // the first range whose GPU timing failed as it closed (guarded by mu)

  double now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  int thread_index() {
    auto id = std::this_thread::get_id();
    auto it = thread_ids.find(id);
    if (it != thread_ids.end()) return it->second;
    int n = static_cast<int>(thread_ids.size());
    thread_ids[id] = n;
    return n;
  }
};

TraceProfiler::TraceProfiler() : impl_(std::make_unique<Impl>()) { impl_->t0 = std::chrono::steady_clock::now(); }

TraceProfiler::~TraceProfiler() {
  if (active_) stop();
}

void TraceProfiler::start() {
  impl_->t0 = std::chrono::steady_clock::now();
  for (int d = 0; d < cuda::device_count(); ++d) {
    // the reference: an event recorded on an idle stream completes at once, at host time "now"
    runtime::AllowSyncScope allow;
    cuda::device_synchronize(d);
    auto e = std::make_unique<cuda::Event>(true);
    e->record(cuda::current_stream(d));
    impl_->ref_host_us[d] = impl_->now_us();
    impl_->ref[d] = std::move(e);
  }
  set_listener(this);
  active_ = true;
}

void TraceProfiler::stop() {
  if (listener() == this) set_listener(nullptr);
  active_ = false;
}

void TraceProfiler::clear() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->records.clear();
  impl_->stacks.clear();
  impl_->failure.clear();
}

void TraceProfiler::on_begin(const char* name, const char* detail, Device device) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl::Record r;
  r.name = name;
  r.detail = detail != nullptr ? detail : "";
  r.thread = impl_->thread_index();
  std::vector<size_t>& stack = impl_->stacks[std::this_thread::get_id()];
  r.depth = static_cast<int>(stack.size());
  r.device = device;
  if (device.is_cuda() && impl_->ref.count(device.index)) {
    cuda::Stream s = cuda::current_stream(device.index);
    if (!s.is_capturing()) {  // Note [profiling captured work]
      r.stream = s.handle();
      r.start = std::make_unique<cuda::Event>(true);
      r.start->record(s);
    }
  }
  r.cpu_begin = impl_->now_us();
  stack.push_back(impl_->records.size());
  impl_->records.push_back(std::move(r));
}

void TraceProfiler::on_end(const char*, const char*, Device device) {
  double t = impl_->now_us();
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<size_t>& stack = impl_->stacks[std::this_thread::get_id()];
  if (stack.empty()) return;  // started before the profiler
  Impl::Record& r = impl_->records[stack.back()];
  stack.pop_back();
  r.cpu_end = t;
  if (!r.start) return;
  // Called from Range's destructor (Listener::on_end): a failure is kept for write_chrome_trace,
  // and the range keeps its CPU time only.
  try {
    cuda::Stream s = cuda::current_stream(device.index);
    if (s.is_capturing()) {  // began before a capture, ends inside it: no GPU time to tell
      r.start.reset();
      return;
    }
    auto stop = std::make_unique<cuda::Event>(true);
    stop->record(s);
    r.stop = std::move(stop);
  } catch (const std::exception& e) {
    r.start.reset();
    if (impl_->failure.empty()) impl_->failure = str("timing '", r.name, "' on ", device, " failed: ", e.what());
  } catch (...) {
    r.start.reset();
    if (impl_->failure.empty()) impl_->failure = str("timing '", r.name, "' on ", device, " failed");
  }
}

namespace {
std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}
}  // namespace

namespace {
void resolve(TraceProfiler::Impl& impl) {
  runtime::AllowSyncScope allow;
  for (int d = 0; d < cuda::device_count(); ++d)
    if (impl.ref.count(d)) cuda::device_synchronize(d);
  for (auto& r : impl.records) {
    if (!r.start || !r.stop || r.gpu_dur >= 0) continue;
    const cuda::Event& ref = *impl.ref[r.device.index];
    r.gpu_begin = impl.ref_host_us[r.device.index] + 1000.0 * ref.elapsed_ms(*r.start);
    r.gpu_dur = 1000.0 * r.start->elapsed_ms(*r.stop);
  }
}
}  // namespace

size_t TraceProfiler::write_chrome_trace(const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  EMBER_CHECK(impl_->failure.empty(), "profiler: ", impl_->failure);
  resolve(*impl_);
  std::ofstream f(path);
  EMBER_CHECK(f.good(), "profiler: cannot write ", path);
  std::map<void*, int> stream_tid;
  size_t n = 0;
  f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  f << R"({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "CPU"}})";
  f << ",\n"
    << R"({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "GPU"}})";
  for (auto& [id, tid] : impl_->thread_ids)
    f << ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << tid
      << ", \"args\": {\"name\": \"thread " << tid << "\"}}";
  char buf[64];
  for (const auto& r : impl_->records) {
    if (r.cpu_end <= 0) continue;
    std::string label = r.detail.empty() ? r.name : r.name + " [" + r.detail + "]";
    std::snprintf(buf, sizeof buf, "%.3f", r.cpu_begin);
    f << ",\n{\"name\": \"" << json_escape(label)
      << "\", \"cat\": \"cpu\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << r.thread << ", \"ts\": " << buf;
    std::snprintf(buf, sizeof buf, "%.3f", r.cpu_end - r.cpu_begin);
    f << ", \"dur\": " << buf << "}";
    ++n;
    if (r.gpu_dur >= 0) {
      auto it = stream_tid.find(r.stream);
      if (it == stream_tid.end()) {
        int tid = static_cast<int>(stream_tid.size());
        it = stream_tid.emplace(r.stream, tid).first;
        f << ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": " << tid
          << ", \"args\": {\"name\": \"cuda:" << static_cast<int>(r.device.index) << " stream " << tid << "\"}}";
      }
      std::snprintf(buf, sizeof buf, "%.3f", r.gpu_begin);
      f << ",\n{\"name\": \"" << json_escape(label)
        << "\", \"cat\": \"gpu\", \"ph\": \"X\", \"pid\": 1, \"tid\": " << it->second << ", \"ts\": " << buf;
      std::snprintf(buf, sizeof buf, "%.3f", r.gpu_dur);
      f << ", \"dur\": " << buf << "}";
      ++n;
    }
  }
  f << "\n]}\n";
  EMBER_CHECK(f.good(), "profiler: writing ", path, " failed");
  return n;
}

std::vector<OpStats> TraceProfiler::op_stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  resolve(*impl_);
  std::map<std::string, OpStats> by;
  for (const auto& r : impl_->records) {
    if (r.depth != 0 || r.cpu_end <= 0) continue;  // top-level ranges only: nested work is inside them
    std::string key = r.detail == "backward" ? r.name + " (backward)" : r.name;
    OpStats& s = by[key];
    s.name = key;
    ++s.calls;
    s.cpu_us += r.cpu_end - r.cpu_begin;
    if (r.gpu_dur >= 0) s.gpu_us += r.gpu_dur;
  }
  std::vector<OpStats> out;
  bool any_gpu = false;
  for (auto& [k, s] : by) {
    any_gpu = any_gpu || s.gpu_us > 0;
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [&](const OpStats& a, const OpStats& b) { return any_gpu ? a.gpu_us > b.gpu_us : a.cpu_us > b.cpu_us; });
  return out;
}

std::string TraceProfiler::top_ops_table(size_t n) {
  std::vector<OpStats> stats = op_stats();
  double total_cpu = 0, total_gpu = 0;
  for (const auto& s : stats) {
    total_cpu += s.cpu_us;
    total_gpu += s.gpu_us;
  }
  // the name column as wide as the longest name shown ("cross_entropy_with_grad (backward)"), so
  // the numbers stay in their columns
  int w = 32;
  for (size_t i = 0; i < stats.size() && i < n; ++i) w = std::max(w, static_cast<int>(stats[i].name.size()));
  w = std::min(w, 200);
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %8s %12s %7s %12s %7s\n", w, "op", "calls", "gpu us", "gpu %", "cpu us",
                "cpu %");
  os << line;
  for (size_t i = 0; i < stats.size() && i < n; ++i) {
    const OpStats& s = stats[i];
    std::snprintf(line, sizeof line, "%-*.*s %8lld %12.1f %6.1f%% %12.1f %6.1f%%\n", w, w, s.name.c_str(),
                  static_cast<long long>(s.calls), s.gpu_us, total_gpu > 0 ? 100.0 * s.gpu_us / total_gpu : 0.0,
                  s.cpu_us, total_cpu > 0 ? 100.0 * s.cpu_us / total_cpu : 0.0);
    os << line;
  }
  std::snprintf(line, sizeof line, "%-*s %8s %12.1f %7s %12.1f\n", w, "total (top-level ops)", "", total_gpu, "",
                total_cpu);
  os << line;
  return os.str();
}

}  // namespace ember::profiler
