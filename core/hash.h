// FNV-1a (64-bit): a small hash that is the same in every process, run and machine, for
// identities that must agree between them: a dataset's labels in checkpoints, the ranks' run
// fingerprint, a collective's call, the port a job derives from its id. Not for hash tables under
// attack, and not a checksum against corruption (safetensors and packed files use CRC-32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ember {

inline constexpr uint64_t kFnv1aBasis = 14695981039346656037ULL;

// Hashes `n` bytes at `data`, continuing from `h` (chain calls to hash several pieces as one).
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnv1aBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aBasis) { return fnv1a(s.data(), s.size(), h); }

}  // namespace ember
