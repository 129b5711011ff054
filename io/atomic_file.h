// Crash-safe file replacement: write a temporary file in the target's directory, fsync it, rename
// it over the target, fsync the directory. A crash at any point leaves either the old file or the
// complete new one under the target name, never a torn file (rename is atomic on POSIX file
// systems; the directory fsync makes the rename itself durable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::io {

class AtomicFile {
 public:
  // Creates "<dir>/.<name>.tmp.XXXXXX" next to `path`.
  explicit AtomicFile(std::string path);
  // Without commit(): closes and removes the temporary file (the target is untouched).
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  // fsync, close, rename over the target, fsync the directory.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Fault injection for tests of the crash guarantees: after `after_bytes` bytes of the next atomic
// writes, either throw (kThrow, as an I/O error would) or terminate the process at once with
// _exit(99) (kExit, as a crash would: no destructor runs, the temporary file stays). kNone clears it.
enum class WriteFault { kNone, kThrow, kExit };
void set_write_fault_for_testing(WriteFault fault, uint64_t after_bytes = 0);

}  // namespace ember::io
