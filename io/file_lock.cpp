#include "io/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/hash.h"
#include "io/atomic_file.h"

namespace ember::io {

FileLock::FileLock(const std::string& lock_path, const std::string& what, const std::string& holder)
    : path_(lock_path) {
  // The file is removed on release, so a waiter may have opened the file just before the holder removed it and then
  // lock that orphan: a lock only counts when the path still names the file that was locked (else: open again).
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EMBER_CHECK(fd >= 0, "cannot open the lock file '", path_, "' of ", what, ": ", std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      char buf[32] = {};
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      ::close(fd);
      EMBER_CHECK(e == EWOULDBLOCK, "cannot lock '", path_, "' of ", what, ": ", std::strerror(e));
      // The holder writes its PID just after locking: a reader in between sees none.
      std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      EMBER_FAIL(what, " is in use by another ", holder, " (pid ", pid.empty() ? "unknown" : pid, ", lock file ", path_,
                 ")");
    }
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        const int e = errno;
        ::close(fd);
        EMBER_FAIL("cannot write the lock file '", path_, "': ", std::strerror(e));
      }
      fd_ = fd;
      return;
    }
    ::close(fd);
  }
  EMBER_FAIL("cannot lock '", path_, "' of ", what, ": it keeps being replaced");
}

FileLock::~FileLock() {
  // Removed while still held, so nobody can lock the old file and think it is the current one (the check above).
  ::unlink(path_.c_str());
  ::close(fd_);
}

IdentityLock::IdentityLock(const std::string& path, const std::string& what, const std::string& holder) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  EMBER_CHECK(fd_ >= 0, "cannot open '", path, "' of ", what, " to lock it: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int e = errno;
  const long pid = flock_holder(fd_);
  ::close(fd_);
  EMBER_CHECK(e == EWOULDBLOCK, "cannot lock '", path, "' of ", what, ": ", std::strerror(e));
  EMBER_FAIL(what, " is in use by another ", holder, " (pid ", pid > 0 ? std::to_string(pid) : "unknown",
             ", under another name of the same file)");
}

IdentityLock::~IdentityLock() { ::close(fd_); }

std::string output_lock_path(const std::string& output) {
  std::string target = resolve_output_path(output);
  while (target.size() > 1 && target.back() == '/') target.pop_back();  // "tb/" is the directory tb
  const size_t slash = target.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : target.substr(0, slash + 1);
  std::string name = target.substr(slash + 1);
  if (name.size() > 200) {  // ".NAME.lock" must fit NAME_MAX (255) where NAME itself does
    char hash[20];
    std::snprintf(hash, sizeof hash, "-%016llx", static_cast<unsigned long long>(fnv1a(name)));
    name = name.substr(0, 200) + hash;
  }
  return dir + "." + name + ".lock";
}

}  // namespace ember::io
