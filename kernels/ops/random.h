// Random fills from the Philox generator (see Note [Philox streams] in core/rng.h):
//
//   uniform(self; low, high, seed, base)    low + (high - low) * U[0,1)
//   normal(self; mean, std, seed, base)     mean + std * N(0,1) (Box-Muller in double)
//   bernoulli(self; p, seed, base)          1 where U[0,1) < p, else 0
// self is contiguous; element i depends only on (seed, base, i), so CPU and CUDA agree.
#pragma once

#include <cstdint>

#include "core/rng.h"

namespace ember {

struct RandomAttrs {
  double a = 0, b = 1;  // (low, high), (mean, std) or (p, unused)
  uint64_t seed = 0, base = 0;
  const uint64_t* graph_state = nullptr;  // CUDA graph capture: Note [Philox in CUDA graphs] (core/rng.h)
};

// Counters a random op of n elements consumes (uniform/bernoulli: 4 per counter; normal: 2).
inline uint64_t uniform_counters(int64_t n) { return static_cast<uint64_t>((n + 3) / 4); }
inline uint64_t normal_counters(int64_t n) { return static_cast<uint64_t>((n + 1) / 2); }

}  // namespace ember
