// TensorBoard event files, written without TensorFlow: TFRecord framing (u64 length, masked
// CRC-32C of the length, payload, masked CRC-32C of the payload) around hand-encoded Event
// protocol buffers (wall_time, step, file_version or a Summary with scalar values).
//
// Event:    1: wall_time (double)  2: step (int64)  3: file_version (string)  5: summary (Summary)
// Summary:  1: value (repeated Value)
// Value:    1: tag (string)  2: simple_value (float)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/atomic_file.h"

namespace ember::logging {

// CRC-32C (Castagnoli), and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and opens events.out.tfevents.<unix time>.<host>.<pid> in it. Every
  // record goes out whole in one write or not at all (io::AppendFile); a failed write throws
  // ember::Error naming the file, and the writer should not be used after that.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::string path_;
  std::unique_ptr<io::AppendFile> out_;
};

// Reads a TFRecord file back, checking both CRCs of every record (throws ember::Error naming the
// record and offset on a mismatch or truncation). Returns the payloads.
std::vector<std::string> read_tfrecords(const std::string& path);

// The scalars of an event payload (tag, value, step); empty for non-summary events.
struct ScalarEvent {
  std::string tag;
  float value = 0;
  int64_t step = 0;
};
std::vector<ScalarEvent> decode_scalars(const std::string& event_payload);

}  // namespace ember::logging
