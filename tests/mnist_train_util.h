// Running mnist_train as a child process on synthetic IDX sets: shared by the CPU tests
// (tests/test_mnist_train.cpp) and the GPU ones (tests/test_mnist_train_gpu.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/child_run.h"
#include "tests/data_test_util.h"

namespace ember::testing::app {

namespace fs = std::filesystem;

// mnist_train beside the running test binary (build/bin/, or a GPU bundle's bin/ where the build
// folder does not exist), else in the build folder this test was compiled for.
inline std::string binary_path() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(self.parent_path() / "mnist_train")) return (self.parent_path() / "mnist_train").string();
  return EMBER_BINARY_DIR "/bin/mnist_train";
}
inline const std::string kBinary = binary_path();

inline bool have_binary() {
  if (fs::exists(kBinary)) return true;
  WARN("SKIPPED: " << kBinary << " is not built (build the mnist_train target)");
  return false;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

struct RunResult : ExitStatus {
  std::string out, err;
  std::string cmd;
};

// Runs mnist_train with `args`, stdout and stderr captured into files in `dir`, in this process's
// environment plus `env` ("NAME=value" entries). A run that takes longer than `limit_s` is killed
// and reported as a failure.
inline RunResult run_app(const std::vector<std::string>& args, const std::string& dir, double limit_s = 120,
                         const std::vector<std::string>& env = {}) {
  static std::atomic<int> counter{0};
  const int id = counter++;
  const std::string out_path = dir + "/run" + std::to_string(id) + ".out";
  const std::string err_path = dir + "/run" + std::to_string(id) + ".err";
  RunResult r;
  r.cmd = "mnist_train";
  std::vector<std::string> argv = {kBinary};
  for (const std::string& a : args) {
    argv.push_back(a);
    r.cmd += " " + a;
  }
  const std::optional<ExitStatus> status = spawn_and_wait(argv, env, out_path, err_path, limit_s);
  if (!status) FAIL(r.cmd << ": still running after " << limit_s << " s (killed)");
  static_cast<ExitStatus&>(r) = *status;
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

#define EMBER_DESCRIBE_RUN(r)                                                                              \
  "command: " << (r).cmd << "\nexit " << (r).exit_code << " signal " << (r).signal << "\n--- stdout ---\n" \
              << (r).out << "--- stderr ---\n"                                                             \
              << (r).err

inline void require_success(const RunResult& r) {
  INFO(EMBER_DESCRIBE_RUN(r));
  REQUIRE(r.signal == 0);
  REQUIRE(r.exit_code == 0);
}

// A failed run: no crash, the expected exit code, and exactly one line on stderr that starts with
// the program's name and contains `needle`.
inline void check_error(const RunResult& r, int code, const std::string& needle) {
  INFO(EMBER_DESCRIBE_RUN(r));
  CHECK(r.signal == 0);
  CHECK(r.exit_code == code);
  CHECK(r.err.rfind("mnist_train: error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK((!r.err.empty() && r.err.back() == '\n'));
  CHECK(r.err.find(needle) != std::string::npos);
  // for users: no source locations (EMBER_ERROR_LOCATIONS=1 keeps them) and no C++ names
  CHECK(r.err.find(".cpp:") == std::string::npos);
  CHECK(r.err.find(".h:") == std::string::npos);
  CHECK(r.err.find("::") == std::string::npos);
}

// The test accuracy the program reports ("test accuracy 93.33%" in the summary and after
// --eval-only); -1 when there is none.
inline double reported_test_accuracy(const std::string& out) {
  std::smatch m;
  static const std::regex re(R"(test accuracy\s+([0-9]+\.[0-9]+)%)");
  if (!std::regex_search(out, m, re)) return -1;
  return std::stod(m[1].str());
}

// The summary's "peak host memory" in MiB (the first one: rank 0's in a job's output), or -1.
inline double reported_peak_host_mib(const std::string& out) {
  std::smatch m;
  static const std::regex re(R"(peak host memory\s+([0-9]+\.[0-9]+) MiB resident)");
  if (!std::regex_search(out, m, re)) return -1;
  return std::stod(m[1].str());
}

// ---- synthetic IDX sets ----

// A few hundred 28x28 images of `classes` separable classes: class c is a bright horizontal band
// at rows 3 + 8c .. 3 + 8c + 5 over low noise. Deterministic (a fixed LCG).
struct Synthetic {
  std::vector<uint8_t> images, labels;
  uint32_t n = 0;
};

inline Synthetic make_synthetic(uint32_t n, int classes, uint32_t seed) {
  Synthetic s;
  s.n = n;
  s.images.resize(static_cast<size_t>(n) * 28 * 28);
  s.labels.resize(n);
  uint32_t state = seed * 2654435761u + 1;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state >> 24;  // 0..255
  };
  for (uint32_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(next() % static_cast<uint32_t>(classes));
    s.labels[i] = static_cast<uint8_t>(c);
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) {
        uint32_t v = next() % 48;
        if (y >= 3 + 8 * c && y < 8 + 8 * c && x >= 2 && x < 26) v = 180 + next() % 70;
        s.images[static_cast<size_t>(i) * 784 + static_cast<size_t>(y) * 28 + static_cast<size_t>(x)] =
            static_cast<uint8_t>(v);
      }
  }
  return s;
}

inline std::vector<uint8_t> images_idx(const Synthetic& s, uint32_t rows = 28, uint32_t cols = 28) {
  return testing::idx_bytes(0x08, {s.n, rows, cols}, s.images);
}
inline std::vector<uint8_t> labels_idx(const Synthetic& s) { return testing::idx_bytes(0x08, {s.n}, s.labels); }

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gz) {
  testing::write_bytes(gz ? path + ".gz" : path, gz ? testing::gzip_bytes(bytes) : bytes);
}

// The four files under their MNIST names: 300 training and 90 test images of 3 classes.
inline void write_synthetic_set(const std::string& dir, bool gz, uint32_t n_train = 300, uint32_t n_test = 90) {
  fs::create_directories(dir);
  Synthetic train = make_synthetic(n_train, 3, 1), test = make_synthetic(n_test, 3, 2);
  write_file(dir + "/train-images-idx3-ubyte", images_idx(train), gz);
  write_file(dir + "/train-labels-idx1-ubyte", labels_idx(train), gz);
  write_file(dir + "/t10k-images-idx3-ubyte", images_idx(test), gz);
  write_file(dir + "/t10k-labels-idx1-ubyte", labels_idx(test), gz);
}

// The options every quick run shares.
inline std::vector<std::string> quick(const std::string& data, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--data", data, "--device", "cpu", "--workers", "0", "--quiet", "--batch-size", "16"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace ember::testing::app
