#include "apps/mnist_train/profile_window.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "apps/mnist_train/outputs.h"
#include "core/error.h"
#include "core/runtime.h"
#include "io/atomic_file.h"

namespace mnist {

using namespace ember;

void ProfileWindow::before_step(int64_t step) {
  if (state_ != State::waiting || step < first_) return;
  prof_.start();
  state_ = State::recording;
  end_ = step + 10;
}

void ProfileWindow::after_step(int64_t step) {
  if (state_ != State::recording || step != end_) return;
  runtime::AllowSyncScope allow;
  prof_.stop();
  state_ = State::done;
}

// The profiler writes its trace with plain streams: it goes to a scratch file first, and from there
// into --profile through io::AtomicFile (never a half-written or empty trace under that name).
void ProfileWindow::write(const std::string& path) {
  try {
    runtime::AllowSyncScope allow;
    if (state_ != State::done) prof_.stop();
    state_ = State::done;
    std::string scratch = (std::filesystem::temp_directory_path() / "mnist_train.profile.XXXXXX").string();
    std::vector<char> buf(scratch.begin(), scratch.end());
    buf.push_back('\0');
    int fd = ::mkstemp(buf.data());
    EMBER_CHECK(fd >= 0, "cannot create a scratch file ", scratch, ": ", std::strerror(errno));
    ::close(fd);
    scratch = buf.data();
    size_t n = 0;
    std::string trace;
    try {
      n = prof_.write_chrome_trace(scratch);
      std::ifstream in(scratch, std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      trace = ss.str();
      EMBER_CHECK(in.good() || in.eof(), "cannot read back the trace from ", scratch);
      EMBER_CHECK(!trace.empty() && nlohmann::json::accept(trace), "the trace in ", scratch,
                  " is incomplete (disk full?)");
    } catch (...) {
      ::unlink(scratch.c_str());
      throw;
    }
    ::unlink(scratch.c_str());
    io::write_file_atomic(path, trace);
    std::printf("\nprofile: %zu events written to %s (open in Perfetto or chrome://tracing)\n%s", n, path.c_str(),
                prof_.top_ops_table(15).c_str());
  } catch (const std::exception& e) {
    output_failed("--profile", path, e.what());
  }
}

}  // namespace mnist
