// The random generator of the data pipeline: samplers shuffle with it and the loader makes one
// per sample for its augmentations.
//
// It is Philox4x32-10 (core/rng.h) used as a counter-based stream: a (seed, stream) pair names an
// independent sequence, so a generator per (loader seed, epoch, sample) costs nothing to create
// and gives the same numbers on every machine, whatever the thread timing. Not thread-safe: one
// per thread.
#pragma once

#include <cstdint>

namespace ember::data {

// Mixes a seed with tags into a new 64-bit seed (splitmix64 finaliser): seeds that differ in any
// tag give unrelated streams.
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0);

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0);

  uint32_t next_u32();
  uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n), without modulo bias. n must be positive.
  int64_t randint(int64_t n);
  // Uniform integer in [lo, hi] (both included).
  int64_t randint(int64_t lo, int64_t hi) { return lo + randint(hi - lo + 1); }
  bool bernoulli(double p) { return uniform() < p; }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
  uint32_t buf_[4] = {};
  int used_ = 4;  // lanes of buf_ already handed out
};

}  // namespace ember::data
