// Whole-file reads and writes with errors that name the file and the reason.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ember::data {

// Size of a regular file in bytes; throws "cannot open <path>: <reason>" otherwise.
uint64_t file_size(const std::string& path);
// The whole file in one read.
std::vector<uint8_t> read_file(const std::string& path);
// Reads exactly dst.size() bytes of the file into dst (after checking its size) in one read.
void read_file_into(const std::string& path, std::span<uint8_t> dst);
// Writes bytes to path through a temporary file renamed into place, so readers never see a
// half-written file.
void write_file(const std::string& path, std::span<const uint8_t> bytes);

// True when the bytes start with the gzip magic (1f 8b).
inline bool looks_gzip(std::span<const uint8_t> b) { return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b; }
inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace ember::data
