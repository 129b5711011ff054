#include "data/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/input_file.h"

namespace ember::data {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// Never blocks on a FIFO or other non-regular file (io/input_file.h).
File open_regular(const std::string& path) {
  const int fd = io::open_regular_file(path);
  std::FILE* f = ::fdopen(fd, "rb");
  if (f == nullptr) ::close(fd);
  EMBER_CHECK(f != nullptr, "cannot open '", path, "': ", std::strerror(errno));
  return File(f);
}

}  // namespace

uint64_t file_size(const std::string& path) {
  struct stat st {};
  EMBER_CHECK(::stat(path.c_str(), &st) == 0, "cannot open '", path, "': ", std::strerror(errno));
  EMBER_CHECK(S_ISREG(st.st_mode), "'", path, "' is ", io::file_kind_name(st.st_mode), ", not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

void read_file_into(const std::string& path, std::span<uint8_t> dst) {
  File f = open_regular(path);
  size_t got = dst.empty() ? 0 : std::fread(dst.data(), 1, dst.size(), f.get());
  EMBER_CHECK(!std::ferror(f.get()), "error reading '", path, "': ", std::strerror(errno));
  EMBER_CHECK(got == dst.size(), "'", path, "' is shorter than expected: expected ", dst.size(), " bytes, got ", got,
              " (was it changed while being read?)");
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> bytes(static_cast<size_t>(file_size(path)));
  read_file_into(path, bytes);
  return bytes;
}

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  // temp file + fsync + rename, never replacing a link, device or directory (io/atomic_file.h)
  io::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace ember::data
