#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ember::io {

const char* file_kind_name(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

int open_regular_file(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: the open of a FIFO returns at once instead of waiting for a writer
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    struct stat st {};  // a socket cannot be opened at all (ENXIO): say what it is
    EMBER_CHECK(::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode), "'", path, "' is ", file_kind_name(st.st_mode),
                ", not a regular file");
    EMBER_FAIL("cannot open '", path, "': ", std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    EMBER_FAIL("cannot stat '", path, "': ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    EMBER_FAIL("'", path, "' is ", file_kind_name(st.st_mode), ", not a regular file");
  }
  // reads of a regular file never block for input; clear the flag all the same (it is the file's)
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace ember::io
