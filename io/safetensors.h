// safetensors files: the format of Hugging Face's safetensors (https://github.com/huggingface/safetensors),
// which PyTorch users load with safetensors.torch.load_file.
//
// Layout:
//   8 bytes    N, the header length, unsigned little-endian
//   N bytes    a JSON object, UTF-8, padded with spaces to a multiple of 8 (so the data is aligned):
//                {"__metadata__": {"format": "pt", ...string -> string...},
//                 "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   the rest   the byte buffer: each tensor row-major, little-endian, at [begin, end) relative to
//              the start of the buffer; the tensors tile the buffer exactly (no gaps, no overlaps,
//              nothing after the last one)
// dtypes: F32 F16 BF16 F64 I32 I64 U8 BOOL (ember's dtypes); the spec's others (I8, I16, U16, U32,
// U64, F8_*, ...) are rejected with a message saying ember lacks them.
//
// Writing (save_safetensors) is atomic (io/atomic_file.h): a crash mid-save leaves the previous
// file intact. The metadata always holds "format": "pt" and "ember.version" unless the caller
// overrides them.
//
// Reading validates the whole header before allocating any tensor and rejects, naming the file and
// the problem: fewer than 8 bytes; a header length beyond the file or over 100 MB; non-UTF-8 or
// malformed JSON; a header that is not an object; duplicate names; bad entries (missing or extra
// fields, unknown dtype, bad shape, rank over 8, bad offsets); shape x dtype size that overflows or
// does not match the offsets; offsets out of range, with gaps or overlaps; trailing bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/state_dict.h"

namespace ember::io {

inline constexpr uint64_t kMaxSafetensorsHeader = 100ull * 1000 * 1000;  // as the reference implementation

// "F32", "BF16", "BOOL", ...
const char* safetensors_dtype_name(DType t);

// The offset of the first byte of `s` that is not valid UTF-8 (overlong forms and surrogates
// included), or -1. A header, and so every metadata value, must be UTF-8: callers that put names
// they did not make into metadata (class folders) check them first.
int64_t first_invalid_utf8(std::span<const uint8_t> s);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the byte buffer
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the order of their offsets
  Metadata metadata;
  uint64_t header_size = 0;  // N
  uint64_t data_size = 0;    // bytes after the header
};

struct SafetensorsFile {
  TensorDict tensors;  // in the order of their offsets
  Metadata metadata;
};

// Serialises tensors (any device, any layout; copied to contiguous host memory one at a time).
std::vector<uint8_t> to_safetensors_bytes(const TensorDict& tensors, const Metadata& metadata = {});
// Writes a file atomically.
void save_safetensors(const std::string& path, const TensorDict& tensors, const Metadata& metadata = {});

// Validates a header (the N JSON bytes) against a byte buffer of `data_size` bytes. `where` names
// the file in messages.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> json, uint64_t data_size,
                                           const std::string& where = "safetensors data");
// Reads and validates only the header of a file.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Loads a file / parses an in-memory file. Tensors are created on `device` after validation.
SafetensorsFile load_safetensors(const std::string& path, Device device = kCPU);
SafetensorsFile from_safetensors_bytes(std::span<const uint8_t> bytes, Device device = kCPU,
                                       const std::string& where = "safetensors data");

}  // namespace ember::io
