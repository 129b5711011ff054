#include "io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace ember::io {

namespace {

std::atomic<int> g_fault{0};
std::atomic<uint64_t> g_fault_after{0};

std::string errno_text() { return std::strerror(errno); }

void (*g_before_rename)(const AtomicFile&) = nullptr;

// Whether `path` still names the file open at `fd` (another process may have removed it).
bool names_file(const char* path, int fd) {
  struct stat held {
  }, named{};
  return ::fstat(fd, &held) == 0 && ::stat(path, &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

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

// The injected fault, if any: how much of `chunk` may be written after `written` bytes (throws or
// exits when the limit is reached).
size_t fault_chunk(uint64_t written, size_t chunk, const std::string& what) {
  int fault = g_fault.load();
  if (fault == 0) return chunk;
  uint64_t limit = g_fault_after.load();
  if (written >= limit) {
    if (fault == static_cast<int>(WriteFault::kExit)) ::_exit(99);
    g_fault = 0;
    EMBER_FAIL("writing '", what, "': injected write fault after ", written, " bytes");
  }
  return static_cast<size_t>(std::min<uint64_t>(chunk, limit - written));
}

// Opens a device or FIFO for writing through. A FIFO without a reader would block forever in
// open(): O_NONBLOCK makes that ENXIO, then the descriptor goes back to blocking writes.
int open_through(const std::string& path, int extra_flags) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | extra_flags);
  if (fd < 0 && errno == ENXIO) EMBER_FAIL("cannot write '", path, "': it is a FIFO with no reader");
  EMBER_CHECK(fd >= 0, "cannot open '", path, "' for writing: ", errno_text());
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

void check_kind(const std::string& path, const std::string& target, TargetKind kind) {
  std::string via = path == target ? std::string() : " (the target of the link '" + path + "')";
  EMBER_CHECK(kind != TargetKind::kDirectory, "cannot write '", target, "'", via,
              ": it is a directory, expected a file name");
  EMBER_CHECK(kind != TargetKind::kOther, "cannot write '", target, "'", via,
              ": it is neither a regular file nor a device or FIFO (a socket?)");
}

// Removes ".<name>.tmp.XXXXXX" files next to `target` whose writer is gone (no lock held).
void remove_stale_temps(const std::string& target) {
  const std::string dir = dir_of(target);
  std::string prefix = ".";
  prefix.append(base_of(target)).append(".tmp.");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    stale.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const std::string& p : stale) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        names_file(p.c_str(), fd))
      ::unlink(p.c_str());
    ::close(fd);
  }
}

}  // namespace

std::string resolve_output_path(const std::string& path) {
  std::string p = path;
  for (int links = 0;; ++links) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    EMBER_CHECK(links < 40, "cannot write '", path, "': too many levels of symbolic links");
    std::vector<char> buf(static_cast<size_t>(std::max<off_t>(st.st_size, 255)) + 1);
    ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size() - 1);
    EMBER_CHECK(n >= 0, "cannot read the symbolic link '", p, "': ", errno_text());
    std::string to(buf.data(), static_cast<size_t>(n));
    p = !to.empty() && to[0] == '/' ? to : dir_of(p) + "/" + to;
  }
}

TargetKind target_kind(const std::string& resolved) {
  struct stat st {};
  if (::stat(resolved.c_str(), &st) != 0) return TargetKind::kNone;
  if (S_ISREG(st.st_mode)) return TargetKind::kRegular;
  if (S_ISDIR(st.st_mode)) return TargetKind::kDirectory;
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode)) return TargetKind::kWriteThrough;
  return TargetKind::kOther;
}

void set_before_rename_for_testing(void (*hook)(const AtomicFile&)) { g_before_rename = hook; }

void set_write_fault_for_testing(WriteFault fault, uint64_t after_bytes) {
  g_fault_after = after_bytes;
  g_fault = static_cast<int>(fault);
}

void check_output_name(const std::string& path, bool temp_file) {
  EMBER_CHECK(path.size() < PATH_MAX, "cannot write '", path.substr(0, 60), "...': name too long (the path has ",
              path.size(), " bytes, the limit is ", PATH_MAX - 1, ")");
  const std::string target = resolve_output_path(path);
  const std::string dir = dir_of(target);
  long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max <= 0) name_max = NAME_MAX;  // the directory does not exist (yet): the usual limit
  for (size_t b = 0; b < target.size();) {
    size_t e = target.find('/', b);
    if (e == std::string::npos) e = target.size();
    EMBER_CHECK(static_cast<long>(e - b) <= name_max, "cannot write '", path, "': name too long (the component '",
                target.substr(b, 20), "...' has ", e - b, " bytes, the limit is ", name_max, ")");
    b = e + 1;
  }
  const size_t temp = base_of(target).size() + std::string_view("..tmp.XXXXXX").size();
  EMBER_CHECK(!temp_file || target_kind(target) == TargetKind::kWriteThrough || static_cast<long>(temp) <= name_max,
              "cannot write '", path, "': name too long for its temporary file (.NAME.tmp.XXXXXX would have ", temp,
              " bytes, the limit is ", name_max, "; the name may have at most ", name_max - 12, ")");
}

TargetKind check_output_file(const std::string& what, const std::string& given, bool temp_file) {
  namespace fs = std::filesystem;
  try {
    check_output_name(given, temp_file);
  } catch (const Error& e) {
    EMBER_FAIL(what, ": ", e.what());
  }
  const std::string path = resolve_output_path(given);
  const TargetKind kind = target_kind(path);
  EMBER_CHECK(kind != TargetKind::kDirectory, what, " ", given, " is a directory, expected a file name");
  EMBER_CHECK(kind != TargetKind::kOther, what, " ", given, ": not a regular file, device or FIFO (a socket?)");
  if (kind == TargetKind::kWriteThrough) return kind;  // written through: the directory is not written
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  EMBER_CHECK(fs::exists(dir, ec), what, " ", path, ": the directory ", dir.string(), " does not exist");
  EMBER_CHECK(fs::is_directory(dir, ec), what, " ", path, ": ", dir.string(), " is not a directory");
  EMBER_CHECK(::access(dir.c_str(), W_OK) == 0, what, " ", path, ": the directory ", dir.string(), " is not writable");
  EMBER_CHECK(!fs::is_directory(p, ec), what, " ", path, " is a directory, expected a file name");
  return kind;
}

long flock_holder(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -1;
  char id[64];
  std::snprintf(id, sizeof id, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  std::FILE* f = std::fopen("/proc/locks", "re");
  if (f == nullptr) return -1;
  char line[512];
  long pid = -1;
  while (pid < 0 && std::fgets(line, sizeof line, f) != nullptr) {
    // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"
    char kind[16], mode[16], rw[16], dev[64];
    long p = 0;
    if (std::sscanf(line, "%*s %15s %15s %15s %ld %63s", kind, mode, rw, &p, dev) == 5 &&
        std::strcmp(kind, "FLOCK") == 0 && std::strcmp(dev, id) == 0 && p != ::getpid())
      pid = p;
  }
  std::fclose(f);
  return pid;
}

// ---- AtomicFile ----

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  EMBER_CHECK(!path_.empty() && path_.back() != '/', "cannot write to '", path_, "': not a file name");
  check_output_name(path_, true);
  target_ = resolve_output_path(path_);
  TargetKind kind = target_kind(target_);
  check_kind(path_, target_, kind);
  if (kind == TargetKind::kWriteThrough) {
    fd_ = open_through(target_, 0);
    through_ = true;
    return;
  }
  const std::string pattern = dir_of(target_) + "/." + base_of(target_) + ".tmp.XXXXXX";
  // The lock marks the file as live from its creation to the rename (remove_stale_temps). Another
  // writer's cleanup may take the new file for a stale one in the instant before it is locked: it
  // is made again then, so a locked file is always the one under the name.
  for (int attempt = 0; fd_ < 0; ++attempt) {
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    const int fd = ::mkostemp(buf.data(), O_CLOEXEC);
    EMBER_CHECK(fd >= 0, "cannot create a temporary file next to '", path_, "' (", pattern, "): ", errno_text());
    ::flock(fd, LOCK_EX | LOCK_NB);
    if (names_file(buf.data(), fd)) {
      fd_ = fd;
      tmp_ = buf.data();
    } else {
      ::close(fd);
      EMBER_CHECK(attempt < 100, "cannot keep a temporary file next to '", path_, "': it keeps being removed");
    }
  }
  ::fchmod(fd_, 0644);  // mkstemp creates 0600; a checkpoint is an ordinary file
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  EMBER_CHECK(fd_ >= 0 && !committed_, "AtomicFile: write after commit to '", path_, "'");
  const std::string& what = through_ ? target_ : tmp_;
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = fault_chunk(written_, n, what);
    ssize_t w = ::write(fd_, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (through_) EMBER_CHECK(w > 0, "writing '", target_, "' failed after ", written_, " bytes: ", errno_text());
    else
      EMBER_CHECK(w > 0, "writing '", tmp_, "' (for '", path_, "') failed after ", written_, " bytes: ", errno_text());
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void AtomicFile::commit() {
  EMBER_CHECK(fd_ >= 0 && !committed_, "AtomicFile: commit twice for '", path_, "'");
  if (through_) {
    int rc = ::close(fd_);
    fd_ = -1;
    committed_ = true;
    EMBER_CHECK(rc == 0, "closing '", target_, "' failed: ", errno_text());
    return;
  }
  EMBER_CHECK(::fsync(fd_) == 0, "fsync of '", tmp_, "' failed: ", errno_text());
  // The target may have changed since the constructor looked (a directory made in the meantime):
  // rename() would fail with a less clear message, or replace a device node.
  const TargetKind now = target_kind(target_);
  EMBER_CHECK(now == TargetKind::kNone || now == TargetKind::kRegular, "cannot replace '", target_,
              "': it is no longer a regular file (changed while it was being written)");
  if (g_before_rename) g_before_rename(*this);
  // Renamed while still open and locked: closed first, the file would look stale to another
  // writer's cleanup until the rename, and could be removed from under it.
  EMBER_CHECK(::rename(tmp_.c_str(), target_.c_str()) == 0, "renaming '", tmp_, "' to '", target_,
              "' failed: ", errno_text());
  committed_ = true;
  int rc = ::close(fd_);
  fd_ = -1;
  EMBER_CHECK(rc == 0, "closing '", target_, "' failed: ", errno_text());
  remove_stale_temps(target_);
  // Make the rename durable: fsync the directory that holds the new name.
  std::string dir = dir_of(target_);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EMBER_CHECK(dfd >= 0, "opening directory '", dir, "' to fsync it failed: ", errno_text());
  rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  errno = err;
  EMBER_CHECK(rc == 0, "fsync of directory '", dir, "' failed: ", errno_text());
}

void write_file_atomic(const std::string& path, std::string_view data) {
  AtomicFile f(path);
  f.write(data.data(), data.size());
  f.commit();
}

// ---- AppendFile ----

AppendFile::~AppendFile() {
  try {
    close();
  } catch (...) {
  }
}

void AppendFile::open() {
  if (fd_ >= 0) return;
  EMBER_CHECK(!path_.empty() && path_.back() != '/', "cannot write to '", path_, "': not a file name");
  const std::string target = resolve_output_path(path_);
  TargetKind kind = target_kind(target);
  check_kind(path_, target, kind);
  if (kind == TargetKind::kWriteThrough) {
    fd_ = open_through(target, O_APPEND);
    return;
  }
  fd_ = ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ >= 0) {
    created_ = true;
  } else {
    EMBER_CHECK(errno == EEXIST, "cannot create '", path_, "': ", errno_text());
    fd_ = ::open(target.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | (truncate_ ? O_TRUNC : 0));
    EMBER_CHECK(fd_ >= 0, "cannot open '", path_, "' for writing: ", errno_text());
  }
  regular_ = true;
  if (exclusive_ && ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const long holder = flock_holder(fd_);
    ::close(fd_);  // a file this call created stays: the other writer may have opened it already
    fd_ = -1;
    created_ = false;
    regular_ = false;
    EMBER_CHECK(err != EWOULDBLOCK, "'", path_, "' is being written by another process",
                holder > 0 ? " (PID " + std::to_string(holder) + ")" : std::string(),
                "; two runs appending to one file would interleave their records");
    EMBER_FAIL("cannot lock '", path_, "': ", std::strerror(err));
  }
}

void AppendFile::append(std::string_view record) {
  open();
  off_t start = regular_ ? ::lseek(fd_, 0, SEEK_END) : 0;
  size_t chunk = fault_chunk(written_, record.size(), path_);
  ssize_t w;
  do {
    w = ::write(fd_, record.data(), chunk);
  } while (w < 0 && errno == EINTR);
  if (w == static_cast<ssize_t>(record.size())) {
    written_ += record.size();
    return;
  }
  const std::string why = w < 0                   ? errno_text()
                          : chunk < record.size() ? std::string("injected write fault")
                                                  : "short write (" + std::to_string(w) + " of " +
                                                        std::to_string(record.size()) + " bytes; disk full?)";
  if (regular_ && start >= 0 && w > 0) (void)!::ftruncate(fd_, start);  // the record whole or not at all
  EMBER_FAIL("writing '", path_, "' failed after ", written_, " bytes: ", why);
}

void AppendFile::close() {
  if (fd_ < 0) return;
  int rc = ::close(fd_);
  int err = errno;
  fd_ = -1;
  if (created_ && written_ == 0) ::unlink(resolve_output_path(path_).c_str());
  created_ = false;
  errno = err;
  EMBER_CHECK(rc == 0, "closing '", path_, "' failed: ", errno_text());
}

}  // namespace ember::io
