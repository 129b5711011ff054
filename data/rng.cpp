#include "data/rng.h"

#include "core/error.h"
#include "core/rng.h"

namespace ember::data {

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  auto mix = [](uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  return mix(mix(mix(seed) ^ a) ^ b);
}

Rng::Rng(uint64_t seed, uint64_t stream) : key_(mix_seed(seed, stream, 0x5eedull)) {}

uint32_t Rng::next_u32() {
  if (used_ == 4) {
    Philox4x32 r = philox(key_, counter_++);
    for (int i = 0; i < 4; ++i) buf_[i] = r.v[i];
    used_ = 0;
  }
  return buf_[used_++];
}

uint64_t Rng::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

int64_t Rng::randint(int64_t n) {
  EMBER_CHECK(n > 0, "Rng::randint: the range must be positive, got ", n);
  // Lemire's multiply-shift with rejection: exact for every n.
  const auto range = static_cast<uint64_t>(n);
  for (;;) {
    uint64_t x = next_u64();
    __uint128_t m = static_cast<__uint128_t>(x) * range;
    auto low = static_cast<uint64_t>(m);
    if (low >= range || low >= (-range) % range) return static_cast<int64_t>(m >> 64);
  }
}

}  // namespace ember::data
