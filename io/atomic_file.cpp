#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace ember::io {

namespace {

std::atomic<int> g_fault{0};
std::atomic<uint64_t> g_fault_after{0};

std::string errno_text() { return std::strerror(errno); }

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

void set_write_fault_for_testing(WriteFault fault, uint64_t after_bytes) {
  g_fault_after = after_bytes;
  g_fault = static_cast<int>(fault);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  EMBER_CHECK(!path_.empty() && path_.back() != '/', "cannot write to '", path_, "': not a file name");
  std::string pattern = dir_of(path_) + "/." + base_of(path_) + ".tmp.XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  fd_ = ::mkstemp(buf.data());
  EMBER_CHECK(fd_ >= 0, "cannot create a temporary file next to '", path_, "' (", pattern, "): ", errno_text());
  tmp_ = buf.data();
  ::fchmod(fd_, 0644);  // mkstemp creates 0600; a checkpoint is an ordinary file
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  EMBER_CHECK(fd_ >= 0 && !committed_, "AtomicFile: write after commit to '", path_, "'");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = n;
    int fault = g_fault.load();
    if (fault != 0) {
      uint64_t limit = g_fault_after.load();
      if (written_ >= limit) {
        if (fault == static_cast<int>(WriteFault::kExit)) ::_exit(99);
        g_fault = 0;
        EMBER_FAIL("writing '", tmp_, "': injected write fault after ", written_, " bytes");
      }
      chunk = static_cast<size_t>(std::min<uint64_t>(chunk, limit - written_));
    }
    ssize_t w = ::write(fd_, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    EMBER_CHECK(w > 0, "writing '", tmp_, "' (for '", path_, "') failed after ", written_, " bytes: ", errno_text());
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void AtomicFile::commit() {
  EMBER_CHECK(fd_ >= 0 && !committed_, "AtomicFile: commit twice for '", path_, "'");
  EMBER_CHECK(::fsync(fd_) == 0, "fsync of '", tmp_, "' failed: ", errno_text());
  int rc = ::close(fd_);
  fd_ = -1;
  EMBER_CHECK(rc == 0, "closing '", tmp_, "' failed: ", errno_text());
  EMBER_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "renaming '", tmp_, "' to '", path_, "' failed: ", errno_text());
  committed_ = true;
  // Make the rename durable: fsync the directory that holds the new name.
  std::string dir = dir_of(path_);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  EMBER_CHECK(dfd >= 0, "opening directory '", dir, "' to fsync it failed: ", errno_text());
  rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  errno = err;
  EMBER_CHECK(rc == 0, "fsync of directory '", dir, "' failed: ", errno_text());
}

}  // namespace ember::io
