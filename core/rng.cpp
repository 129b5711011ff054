#include "core/rng.h"

namespace ember {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offset_;
}

void Generator::set_state(uint64_t seed, uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = offset;
}

namespace {
// The graph this thread is capturing, per generator (Note [Philox in CUDA graphs]).
struct GraphCapture {
  const Generator* gen = nullptr;
  const uint64_t* state = nullptr;
  uint64_t used = 0;
};
thread_local GraphCapture t_capture;
}  // namespace

Generator::Reservation Generator::reserve(uint64_t counters, bool cuda) {
  if (cuda && t_capture.gen == this) {
    Reservation r{0, t_capture.used, t_capture.state};
    t_capture.used += counters;
    return r;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Reservation r{seed_, offset_};
  offset_ += counters;
  return r;
}

void Generator::begin_graph_capture(const uint64_t* device_state) {
  EMBER_CHECK(t_capture.gen == nullptr, "Generator: this thread is already capturing a CUDA graph");
  t_capture = GraphCapture{this, device_state, 0};
}

uint64_t Generator::end_graph_capture() {
  EMBER_CHECK(t_capture.gen == this, "Generator: end_graph_capture without begin_graph_capture");
  const uint64_t used = t_capture.used;
  t_capture = GraphCapture{};
  return used;
}

Generator& default_generator() {
  static Generator g;
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ember
