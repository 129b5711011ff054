// The CUDA runtime layer of a build without CUDA (EMBER_CUDA=OFF): no devices; anything that
// needs one says so.
#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/storage.h"

namespace ember::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  EMBER_FAIL(what, ": ember was built without CUDA (configure with -DEMBER_CUDA=ON on a machine with nvcc)");
}
}  // namespace

bool compiled_with_cuda() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "ember was built without CUDA"; }
std::string software_versions() { return ""; }
DeviceProperties properties(int) { no_cuda("cuda::properties"); }
int current_device() { return 0; }
void set_device(int) { no_cuda("cuda::set_device"); }
void device_synchronize(int) { no_cuda("cuda::device_synchronize"); }
std::pair<size_t, size_t> mem_get_info(int) { no_cuda("cuda::mem_get_info"); }

Stream Stream::create(int, bool) { no_cuda("Stream::create"); }
Stream Stream::compute(int) { no_cuda("Stream::compute"); }
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
bool Stream::query() const { no_cuda("Stream::query"); }
bool Stream::is_capturing() const { return false; }
void Stream::wait_stream(const Stream&) const { no_cuda("Stream::wait_stream"); }
Stream current_stream(int) { no_cuda("cuda::current_stream"); }
void set_current_stream(Stream) { no_cuda("cuda::set_current_stream"); }
StreamGuard::StreamGuard(Stream) { no_cuda("StreamGuard"); }
StreamGuard::~StreamGuard() = default;

Event::~Event() = default;
Event::Event(Event&& o) noexcept : handle_(o.handle_), device_(o.device_), timing_(o.timing_), recorded_(o.recorded_) {}
Event& Event::operator=(Event&&) noexcept { return *this; }
void Event::record(const Stream&) { no_cuda("Event::record"); }
void Event::block(const Stream&) const { no_cuda("Event::block"); }
bool Event::query() const { return true; }
void Event::synchronize() const {}
float Event::elapsed_ms(const Event&) const { no_cuda("Event::elapsed_ms"); }

int* device_error_word(int) { no_cuda("cuda::device_error_word"); }
unsigned* stream_tickets(int, void*) { no_cuda("cuda::stream_tickets"); }
void check_device_errors() {}
void set_device_error_describer(std::string (*)(int)) {}

AllocatorStats allocator_stats(int) { no_cuda("cuda::allocator_stats"); }
void reset_peak_stats(int) { no_cuda("cuda::reset_peak_stats"); }
void empty_cache() {}
bool allocator_passthrough() { return false; }
size_t allocator_round_size(size_t n) { return n; }
void record_stream(void*, Stream) { no_cuda("cuda::record_stream"); }
void allocator_capture_begin(int) { no_cuda("cuda::allocator_capture_begin"); }
void allocator_capture_end(int) { no_cuda("cuda::allocator_capture_end"); }
int captures_underway(int) { return 0; }
MemPool::MemPool(int device) : device_(device), id_(0) { no_cuda("MemPool"); }
MemPool::~MemPool() = default;
PoolScope::PoolScope(MemPool&) : prev_(0), device_(0) { no_cuda("PoolScope"); }
PoolScope::~PoolScope() = default;

Graph::Graph() = default;
Graph::~Graph() = default;
void Graph::capture_begin(Stream, CaptureMode) { no_cuda("Graph::capture_begin"); }
void Graph::capture_end() { no_cuda("Graph::capture_end"); }
void Graph::replay() { no_cuda("Graph::replay"); }
size_t Graph::num_nodes() const { return 0; }

PinnedStats pinned_stats() { return {}; }
void record_pinned_use(const void*, Stream) { no_cuda("cuda::record_pinned_use"); }
bool is_pinned_pointer(const void*) { return false; }
void pinned_empty_cache() {}

}  // namespace ember::cuda

namespace ember {
Allocator* cuda_allocator(int) { EMBER_FAIL("CUDA tensors need a CUDA build: ember was built without CUDA"); }
Allocator* pinned_allocator() { return cpu_allocator(); }
}  // namespace ember
