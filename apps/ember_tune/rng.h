// The samplers' random numbers: splitmix64 with our own uniform and normal transforms, so a seeded study draws the
// same points with every standard library (std::normal_distribution and friends are implementation-defined).
#pragma once

#include <cmath>
#include <cstdint>

namespace ember::tune {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // Independent streams for (seed, trial): the point of trial n does not depend on how many draws earlier trials
  // made, so a resumed study picks what the uninterrupted one would have.
  Rng(uint64_t seed, uint64_t stream) : state_(seed) {
    state_ = next() ^ (stream * 0xD1B54A32D192ED03ull);
    next();
  }

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // Box-Muller; one of the pair is enough here
    double u1 = uniform();
    while (u1 <= 0) u1 = uniform();
    return std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * uniform());
  }
  uint64_t below(uint64_t n) { return next() % n; }  // the bias is < n / 2^64

 private:
  uint64_t state_;
};

}  // namespace ember::tune
