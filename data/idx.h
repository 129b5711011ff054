// The IDX file format (MNIST, Fashion-MNIST, EMNIST, ...), raw or gzip'd.
//
//   bytes 0-1   zero
//   byte  2     element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
//   byte  3     number of dims n (>= 1)
//   4 .. 4n+3   dims, big-endian u32
//   then        prod(dims) elements, big-endian
// MNIST images are magic 0x00000803 (2051: u8, 3 dims [N, 28, 28]); labels 0x00000801 (2049: u8,
// 1 dim [N]).
//
// Note [validate before allocating]: the header is checked and the payload size it declares is
// computed with overflow checks and compared with what the file holds *before* anything of that
// size is allocated: a raw file's payload must be exactly its size minus the header; a gzip
// stream's must be possible for its compressed size (zlib expands at most ~1032:1) and the
// decompressed bytes are collected as they arrive, never reserved from the header. A truncated
// file says "expected N bytes, got M"; a gzip file given as raw (or the reverse) gets a hint.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::data {

enum class IdxType : uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // 2051
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // 2049

struct IdxArray {
  uint32_t magic = 0;
  IdxType type = IdxType::u8;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // prod(dims) elements in host byte order

  int64_t numel() const;
  // u8 stays u8; i8 and i16 widen to i32; i32, f32, f64 keep their type.
  Tensor to_tensor() const;
};

// Bytes per element of an IDX type; throws for an unknown code.
size_t idx_type_size(IdxType t);
const char* idx_type_name(IdxType t);

// Parses an uncompressed IDX file held in memory. `name` is used in error messages.
IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& name = "<memory>");

enum class IdxCompression {
  by_name,  // gzip when the file name ends in ".gz", raw otherwise (a mismatch is an error with a hint)
  raw,
  gzip,
};
// Reads an IDX file from disk (Note [validate before allocating]). With expected_magic (e.g.
// kIdxLabelsMagic), a file with another magic is an error that says what the file is ("this is an
// images file (IDX magic 0x00000803), expected labels (0x00000801)"), checked before its dims.
IdxArray read_idx(const std::string& path, IdxCompression compression = IdxCompression::by_name,
                  uint32_t expected_magic = 0);

}  // namespace ember::data
