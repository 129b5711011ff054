// Locks that make a file one process's for a while: a study for the ember_tune that runs it, an
// output for the mnist_train that writes it (two writers of one file would overwrite each other's
// results and both exit 0).
//
// An exclusive flock() on a lock file, held for the object's life, with the holder's PID written
// into the file so that a second process can say who has it. flock() and not a PID check or
// fcntl(): the kernel drops it when the holder dies however it dies (a stale file with a dead PID
// locks nothing), and unlike an fcntl() lock it is not dropped when the process closes some other
// descriptor of the file. The descriptor is close-on-exec, so children (and anything they leave
// running) never hold it. The file is removed on release (see the constructor for why that is
// safe).
#pragma once

#include <string>

namespace ember::io {

class FileLock {
 public:
  // Takes the lock or throws ember::Error: "<what> is in use by another <holder> (pid N, lock file
  // PATH)". `holder` names the kind of process that takes such locks ("ember_tune").
  FileLock(const std::string& lock_path, const std::string& what, const std::string& holder);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// An exclusive flock() on the file at `path` itself (which must exist), held for the object's life:
// it locks the file's identity (device and inode), which every name of it shares, hard links
// included. Throws "<what> is in use by another <holder> (pid N)"; the PID comes from /proc/locks.
class IdentityLock {
 public:
  IdentityLock(const std::string& path, const std::string& what, const std::string& holder);
  ~IdentityLock();
  IdentityLock(const IdentityLock&) = delete;
  IdentityLock& operator=(const IdentityLock&) = delete;

 private:
  int fd_ = -1;
};

// The lock file of an output (a file or a directory), "<dir>/.<name>.lock" beside its target after
// following symlinks: every name of one output finds one lock file (hard links aside).
std::string output_lock_path(const std::string& output);

}  // namespace ember::io
