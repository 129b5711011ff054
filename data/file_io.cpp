#include "data/file_io.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace ember::data {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

File open_or_throw(const std::string& path, const char* mode) {
  std::FILE* f = std::fopen(path.c_str(), mode);
  EMBER_CHECK(f != nullptr, "cannot open '", path, "': ", std::strerror(errno));
  return File(f);
}

}  // namespace

uint64_t file_size(const std::string& path) {
  struct stat st {};
  EMBER_CHECK(::stat(path.c_str(), &st) == 0, "cannot open '", path, "': ", std::strerror(errno));
  EMBER_CHECK(S_ISREG(st.st_mode), "'", path, "' is not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

void read_file_into(const std::string& path, std::span<uint8_t> dst) {
  File f = open_or_throw(path, "rb");
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
  std::string tmp = path + ".tmp";
  {
    File f = open_or_throw(tmp, "wb");
    size_t put = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f.get());
    bool ok = put == bytes.size() && std::fflush(f.get()) == 0;
    if (!ok) {
      std::string reason = std::strerror(errno);
      f.reset();
      std::remove(tmp.c_str());
      EMBER_FAIL("cannot write '", tmp, "': ", reason, " (wrote ", put, " of ", bytes.size(), " bytes)");
    }
    EMBER_CHECK(std::fclose(f.release()) == 0, "cannot write '", tmp, "': ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    EMBER_FAIL("cannot rename '", tmp, "' to '", path, "': ", reason);
  }
}

}  // namespace ember::data
