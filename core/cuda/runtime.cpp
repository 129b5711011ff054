// CUDA runtime layer: device queries, streams, events (built only with EMBER_CUDA).
#include "core/cuda/runtime.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/device_guard.h"
#include "core/cuda/unavailable_reason.h"
#include "core/runtime.h"

namespace ember::cuda {

namespace detail {
void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  cudaGetLastError();  // clear the (non-sticky) error so later calls are not blamed for it
  const char* short_file = file;
  if (const char* p = std::strstr(file, "/core/")) short_file = p + 1;
  else if (const char* q = std::strstr(file, "/kernels/")) short_file = q + 1;
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + " in `" + expr +
                      "` (" + short_file + ":" + std::to_string(line) + ")",
                  static_cast<int>(err));
}
}  // namespace detail

namespace {

constexpr int kMaxDevices = 16;

// Whether the NVIDIA driver library is installed (only asked when the runtime found no device).
bool nvidia_driver_present() {
#if defined(EMBER_CUDA_SIM)
  return true;  // the simulator is its own driver
#else
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
#endif
}

struct DeviceInfo {
  int count = 0;
  std::string reason;
};

const DeviceInfo& device_info() {
  static DeviceInfo info = [] {
    DeviceInfo d;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
      cudaGetLastError();
      // the wording of the CPU fallback note: core/cuda/unavailable_reason.h
      d.reason = describe_no_cuda(static_cast<int>(err), n, err == cudaSuccess || nvidia_driver_present(),
                                  cudaGetErrorString(err));
      return d;
    }
    d.count = std::min(n, kMaxDevices);
    return d;
  }();
  return info;
}

void check_device(int device) {
  EMBER_CHECK(device >= 0 && device < device_count(), "CUDA device ", device, " is not available (",
              device_count() == 0 ? unavailable_reason() : std::to_string(device_count()) + " device(s)", ")");
}

thread_local std::array<void*, kMaxDevices> t_current{};

}  // namespace

// ---- device error words (Note [device errors]) ----

namespace {
struct ErrorWord {
  int* host = nullptr;
  int* dev = nullptr;
};
std::array<ErrorWord, kMaxDevices> g_error_words{};
std::array<std::once_flag, kMaxDevices> g_error_once;
std::atomic<std::string (*)(int)> g_describer{nullptr};
}  // namespace

int* device_error_word(int device) {
  check_device(device);
  std::call_once(g_error_once[device], [&] {
    DeviceGuard g(device);
    void* h = nullptr;
    EMBER_CUDA_CHECK(cudaHostAlloc(&h, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<volatile int*>(h) = 0;
    void* d = nullptr;
    EMBER_CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
    g_error_words[device] = {static_cast<int*>(h), static_cast<int*>(d)};
  });
  return g_error_words[device].dev;
}

unsigned* stream_tickets(int device, void* stream) {
  check_device(device);
  static std::mutex mu;
  static auto* made = new std::map<std::pair<int, void*>, unsigned*>();  // never freed: streams live on
  std::lock_guard<std::mutex> lock(mu);
  auto it = made->find({device, stream});
  if (it != made->end()) return it->second;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  if (status != cudaStreamCaptureStatusNone || captures_underway() > 0) return nullptr;  // no cudaMalloc now
  DeviceGuard g(device);
  void* p = nullptr;
  EMBER_CUDA_CHECK(cudaMalloc(&p, kStreamTickets * sizeof(unsigned)));
  EMBER_CUDA_CHECK(cudaMemsetAsync(p, 0, kStreamTickets * sizeof(unsigned), static_cast<cudaStream_t>(stream)));
  return made->emplace(std::make_pair(device, stream), static_cast<unsigned*>(p)).first->second;
}

void set_device_error_describer(std::string (*describe)(int)) { g_describer = describe; }

void check_device_errors() {
  for (int d = 0; d < kMaxDevices; ++d) {
    int* h = g_error_words[d].host;
    if (h == nullptr) continue;
    int code = *static_cast<volatile int*>(h);
    if (code == 0) continue;
    *static_cast<volatile int*>(h) = 0;
    auto describe = g_describer.load();
    throw Error(describe != nullptr ? describe(code)
                                    : "a CUDA kernel reported bad input (error code " + std::to_string(code) + ")");
  }
}

bool compiled_with_cuda() { return true; }
int device_count() { return device_info().count; }
std::string unavailable_reason() { return device_info().count > 0 ? "" : device_info().reason; }

std::string software_versions() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return "driver " + std::to_string(driver) + " runtime " + std::to_string(runtime);
}

DeviceProperties properties(int device) {
  check_device(device);
  cudaDeviceProp p{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceProperties out;
  out.name = p.name;
  out.major = p.major;
  out.minor = p.minor;
  out.sm_count = p.multiProcessorCount;
  out.total_memory = p.totalGlobalMem;
  out.l2_cache_bytes = static_cast<size_t>(p.l2CacheSize);
  out.max_shared_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
  return out;
}

int current_device() {
  if (device_count() == 0) return 0;
  int d = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  check_device(device);
  EMBER_CUDA_CHECK(cudaSetDevice(device));
}

void device_synchronize(int device) {
  check_device(device);
  runtime::note_host_sync("cudaDeviceSynchronize");
  DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  check_device_errors();
}

std::pair<size_t, size_t> mem_get_info(int device) {
  check_device(device);
  DeviceGuard g(device);
  size_t free_b = 0, total = 0;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  return {free_b, total};
}

// ---- streams ----

Stream Stream::create(int device, bool high_priority) {
  check_device(device);
  DeviceGuard g(device);
  int lo = 0, hi = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t s = nullptr;
  EMBER_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? hi : lo));
  // Streams live as long as the process: handles stay valid in every Stream value and cached
  // allocator block that refers to them.
  return Stream(s, device);
}

Stream Stream::compute(int device) {
  check_device(device);
  static std::array<void*, kMaxDevices> streams{};
  static std::array<std::once_flag, kMaxDevices> once;
  std::call_once(once[device], [&] { streams[device] = Stream::create(device).handle(); });
  return Stream(streams[device], device);
}

void Stream::synchronize() const {
  runtime::note_host_sync("stream synchronize");
  EMBER_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
  check_device_errors();
}

bool Stream::is_capturing() const {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(handle_), &st));
  return st != cudaStreamCaptureStatusNone;
}

void Stream::wait_stream(const Stream& other) const {
  if (other == *this) return;
  Event e;
  e.record(other);
  e.block(*this);
}

bool Stream::query() const {
  cudaError_t err = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

Stream current_stream(int device) {
  if (device < 0) device = current_device();
  check_device(device);
  void* h = t_current[device];
  return h == nullptr ? Stream::compute(device) : Stream::wrap(h, device);
}

void set_current_stream(Stream s) {
  EMBER_CHECK(s.valid(), "set_current_stream: invalid stream");
  t_current[s.device()] = s.handle();
}

StreamGuard::StreamGuard(Stream s) : prev_(current_stream(s.device())) { set_current_stream(s); }
// (set_current_stream's check cannot fail for the stream current_stream gave: restored directly, so
// that nothing in this destructor throws; Note [no abort] in core/error.h)
StreamGuard::~StreamGuard() { t_current[prev_.device()] = prev_.handle(); }

// ---- events ----

namespace {
// Destroys an event for a destructor: a failure (after an earlier error: a sticky fault, a runtime
// that unloads at exit) is not reported, the event is left to the runtime, and the error is
// cleared from the thread's last error, which the next launch check would otherwise report as its
// own (Note [no abort] in core/error.h).
void destroy_event(void* handle) noexcept {
  if (handle != nullptr && cudaEventDestroy(static_cast<cudaEvent_t>(handle)) != cudaSuccess) cudaGetLastError();
}
}  // namespace

Event::~Event() { destroy_event(handle_); }

Event::Event(Event&& o) noexcept : handle_(o.handle_), device_(o.device_), timing_(o.timing_), recorded_(o.recorded_) {
  o.handle_ = nullptr;
  o.recorded_ = false;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    destroy_event(handle_);
    handle_ = o.handle_;
    device_ = o.device_;
    timing_ = o.timing_;
    recorded_ = o.recorded_;
    o.handle_ = nullptr;
    o.recorded_ = false;
  }
  return *this;
}

void Event::record(const Stream& s) {
  EMBER_CHECK(s.valid(), "Event::record on an invalid stream");
  // Several GPUs in one process: the event is created, and recorded, with the stream's own device
  // current (an event belongs to the device current at its creation and can only be recorded on a
  // stream of that device), whichever device the calling thread has current.
  DeviceGuard g(s.device());
  if (handle_ == nullptr) {
    cudaEvent_t e = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    handle_ = e;
    device_ = s.device();
  }
  EMBER_CHECK(device_ == s.device(), "Event created on cuda:", device_, " recorded on a stream of cuda:", s.device());
  EMBER_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(s.handle())));
  recorded_ = true;
}

void Event::block(const Stream& s) const {
  if (!recorded()) return;
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle()), static_cast<cudaEvent_t>(handle_), 0));
}

bool Event::query() const {
  if (!recorded()) return true;
  RelaxedCapture
      relaxed;  // asking never waits, and the event is not part of a capture (that is cudaErrorCapturedEvent)
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

void Event::synchronize() const {
  if (!recorded()) return;
  runtime::note_host_sync("event synchronize");
  EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
  check_device_errors();
}

float Event::elapsed_ms(const Event& end) const {
  EMBER_CHECK(timing_ && end.timing_, "elapsed_ms needs two events created with enable_timing=true");
  EMBER_CHECK(recorded() && end.recorded(), "elapsed_ms: both events must have been recorded");
  float ms = 0;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_), static_cast<cudaEvent_t>(end.handle_)));
  return ms;
}

}  // namespace ember::cuda
