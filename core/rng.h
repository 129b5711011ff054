// Counter-based random numbers (Philox4x32-10) that are the same on the CPU and on CUDA.
//
// Note [Philox streams]: a random op asks the generator for a block of counters (reserve()),
// which returns (seed, first counter) and advances the generator's offset. Element i of the op's
// output is a pure function of (seed, first counter, i), computed by the same EMBER_HD code on
// both devices, so rand/randn/bernoulli/dropout give the same numbers on CPU and CUDA for the
// same seed and offset, independent of how the work is split across threads or blocks.
//   uniform: element i uses counter base + i/4, lane i%4            (n/4 counters)
//   normal:  element i uses counter base + i/2, lanes 2(i%2), 2(i%2)+1 (Box-Muller; n/2 counters)
#pragma once

#include <cmath>
#include <cstdint>
#include <mutex>

#include "core/error.h"

namespace ember {

struct Philox4x32 {
  uint32_t v[4];
};

EMBER_HD inline void mulhilo32(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Philox4x32 with 10 rounds, counter = (counter64, 0, 0), key = seed64.
EMBER_HD inline Philox4x32 philox(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(0xD2511F53u, c0, hi0, lo0);
    mulhilo32(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// uniform in [0, 1) with 24 random bits (exactly representable in float and double alike).
EMBER_HD inline float uint_to_unit(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
// uniform in (0, 1]: safe for log().
EMBER_HD inline double uint_to_unit_open(uint32_t x) {
  return (static_cast<double>(x >> 8) + 1.0) * (1.0 / 16777216.0);
}

EMBER_HD inline float philox_uniform(uint64_t seed, uint64_t base, int64_t i) {
  Philox4x32 r = philox(seed, base + static_cast<uint64_t>(i) / 4);
  return uint_to_unit(r.v[i % 4]);
}

// Standard normal by Box-Muller, computed in double so CPU and CUDA round to the same float.
EMBER_HD inline double philox_normal(uint64_t seed, uint64_t base, int64_t i) {
  Philox4x32 r = philox(seed, base + static_cast<uint64_t>(i) / 2);
  int lane = static_cast<int>(i % 2) * 2;
  double u1 = uint_to_unit_open(r.v[lane]);
  double u2 = uint_to_unit(r.v[lane + 1]);
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

// Note [Philox in CUDA graphs]: a captured kernel's arguments are frozen into the graph, so a
// (seed, counter) passed by value would repeat on every replay (the same dropout mask each step).
// While a thread captures (cuda::Graph), the CUDA reservations it makes are relative instead:
// base counts from 0 within the graph and `state` points to two device words {seed, offset} that
// Graph::replay() fills, in stream order, from a fresh host reservation of the counters one replay
// uses. A kernel then draws with seed = state[0] and counter state[1] + base (philox_resolve), so
// every replay draws new numbers, the host generator stays the one source of truth (checkpoints
// save it), and a seeded run replays the same sequence.
struct PhiloxState {
  uint64_t seed, base;
};
EMBER_HD inline PhiloxState philox_resolve(uint64_t seed, uint64_t base, const uint64_t* graph_state) {
  if (graph_state != nullptr) return {graph_state[0], graph_state[1] + base};
  return {seed, base};
}

// The process-wide generator. Thread-safe.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves `counters` Philox counters; returns {seed, first counter}. For a CUDA op (`cuda`)
  // on a thread that is capturing a graph, the reservation is relative to the graph's device state
  // (Note [Philox in CUDA graphs]).
  struct Reservation {
    uint64_t seed;
    uint64_t base;
    const uint64_t* state = nullptr;  // device {seed, offset}, during graph capture only
  };
  Reservation reserve(uint64_t counters, bool cuda = false);
  // Graph capture on this thread (core/cuda/graph.cpp): reservations for CUDA ops until
  // end_graph_capture() are relative to `device_state`; end returns the counters one replay uses.
  void begin_graph_capture(const uint64_t* device_state);
  uint64_t end_graph_capture();

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
// Seeds the default generator (and resets its offset).
void manual_seed(uint64_t seed);

}  // namespace ember
