// Crash-safe file replacement: write a temporary file in the target's directory, fsync it, rename
// it over the target, fsync the directory. A crash at any point leaves either the old file or the
// complete new one under the target name, never a torn file (rename is atomic on POSIX file
// systems; the directory fsync makes the rename itself durable).
//
// Note [output targets]: only a regular file (or a name not yet taken) is ever replaced.
//   - a symlink is followed (a chain of them, dangling or not): its target is written, the link
//     stays a link;
//   - a character or block device or a FIFO (/dev/null, /dev/stdout, a named pipe) is written
//     through: opened and written directly, never renamed over (a FIFO with no reader is an error);
//   - a directory, a socket or anything else is an error naming the path.
// Temporary files ".<name>.tmp.XXXXXX" that a killed writer left behind are removed by the next
// successful commit to the same target (each live writer holds a lock on its own temporary file,
// so a concurrent writer's file is never taken for a stale one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember::io {

// Follows symlinks in the last component of `path` (a chain, dangling or not; relative targets are
// relative to the link's directory). Throws after 40 links (a loop).
std::string resolve_output_path(const std::string& path);

// What `path` (after resolve_output_path) is as an output target: kNone (does not exist),
// kRegular, kWriteThrough (character/block device or FIFO), kDirectory, kOther (socket ...).
enum class TargetKind { kNone, kRegular, kWriteThrough, kDirectory, kOther };
TargetKind target_kind(const std::string& resolved_path);

// Throws "name too long" (naming the path, the length and the limit) when `path` cannot be
// written: the path over PATH_MAX, a component over the file system's NAME_MAX, or, with
// `temp_file`, a name that leaves no room for AtomicFile's ".<name>.tmp.XXXXXX" beside it. Programs
// call it at start-up so that such a name fails before any work, as what it is (open() would say
// ENAMETOOLONG only when the first save comes).
void check_output_name(const std::string& path, bool temp_file);

// Checks at start-up, before any work, that `given` can be written as an output: its name fits
// (check_output_name), it is no directory or socket, and a file to be replaced lies in an existing,
// writable directory. Errors name the output as `what` ("--save", "the output") and the path.
// Returns the target's kind: a caller that cannot write through a device refuses kWriteThrough.
TargetKind check_output_file(const std::string& what, const std::string& given, bool temp_file);

// The PID of the process holding a flock() lock on the file open at `fd`, from /proc/locks; -1 if
// unknown.
long flock_holder(int fd);

class AtomicFile {
 public:
  // Creates "<dir>/.<name>.tmp.XXXXXX" next to `path` (after following symlinks), or opens a
  // device/FIFO for writing through (Note [output targets]).
  explicit AtomicFile(std::string path);
  // Without commit(): closes and removes the temporary file (the target is untouched).
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  // fsync, close, rename over the target, fsync the directory, remove stale temporary files of the
  // same target. Writing through a device: close (a close error is an error).
  void commit();

  const std::string& path() const { return path_; }      // as given
  const std::string& target() const { return target_; }  // after following symlinks
  const std::string& temp_path() const { return tmp_; }  // empty when writing through
  bool writes_through() const { return through_; }
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_, target_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
  bool through_ = false;
};

// The whole of `data` into `path` through an AtomicFile.
void write_file_atomic(const std::string& path, std::string_view data);

// An append-only record file (JSONL logs, TFRecord event files): each record goes out in one
// write() and is either written whole or not at all (a short write on a regular file is truncated
// back to the record's start). Any failure throws ember::Error naming the path; the caller stops
// writing then. Opens lazily, on the first record, so a run that never logs leaves no empty file.
// Devices and FIFOs are written through; a directory is an error.
class AppendFile {
 public:
  // exclusive: open() takes an exclusive flock() on a regular file and fails, naming the holder's
  // PID, when another process holds one (two runs appending to one log would interleave records).
  explicit AppendFile(std::string path, bool truncate = false, bool exclusive = false)
      : path_(std::move(path)), truncate_(truncate), exclusive_(exclusive) {}
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  void open();  // done by the first append; callable earlier to fail early
  void append(std::string_view record);
  // Closes; when this object created the file and no record was ever written, removes it.
  void close();
  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_;
  bool truncate_ = false, exclusive_ = false;
  int fd_ = -1;
  bool created_ = false, regular_ = false;
  uint64_t written_ = 0;
};

// Fault injection for tests of the crash guarantees: after `after_bytes` bytes of the next atomic
// (or append) writes, either throw (kThrow, as an I/O error would) or terminate the process at once
// with _exit(99) (kExit, as a crash would: no destructor runs, the temporary file stays). kNone
// clears it. kThrow fires once, then clears itself.
enum class WriteFault { kNone, kThrow, kExit };
void set_write_fault_for_testing(WriteFault fault, uint64_t after_bytes = 0);
// Tests of concurrent writers: `hook` runs in AtomicFile::commit() just before the rename (nullptr:
// none), where another writer's commit may run.
void set_before_rename_for_testing(void (*hook)(const AtomicFile&));

}  // namespace ember::io
