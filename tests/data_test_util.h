// Helpers shared by the data tests: temporary directories, IDX/gzip writers, synthetic datasets
// with programmable failures and stalls, and a watchdog that turns a hang into a failure.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/runtime.h"
#include "data/data.h"
#include "kernels/functional.h"

namespace ember::testing {

// The message of the ember::Error that fn throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("ember_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// An IDX file: magic (type, ndims) then big-endian dims then payload.
inline std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims,
                                      const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

inline std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& raw) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<uint8_t> out(deflateBound(&z, static_cast<uLong>(raw.size())) + 64);
  z.next_in = const_cast<Bytef*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// n images of rows x cols where pixel (i, y, x) = (i * 7 + y * cols + x) % 256, labels i % 10.
inline void write_mnist_pair(const std::string& images, const std::string& labels, uint32_t n, uint32_t rows,
                             uint32_t cols, bool gz) {
  std::vector<uint8_t> px(static_cast<size_t>(n) * rows * cols), lb(n);
  for (uint32_t i = 0; i < n; ++i) {
    lb[i] = static_cast<uint8_t>(i % 10);
    for (uint32_t p = 0; p < rows * cols; ++p)
      px[static_cast<size_t>(i) * rows * cols + p] = static_cast<uint8_t>((i * 7 + p) % 256);
  }
  auto im = idx_bytes(0x08, {n, rows, cols}, px), la = idx_bytes(0x08, {n}, lb);
  write_bytes(images, gz ? gzip_bytes(im) : im);
  write_bytes(labels, gz ? gzip_bytes(la) : la);
}

// A dataset of n single-channel h x w images: every pixel of sample i is i % 251, its label is
// i % 10. It can throw at one index, stall at one index until released, and counts get() calls.
class ProbeDataset final : public data::Dataset {
 public:
  explicit ProbeDataset(int64_t n, int64_t h = 2, int64_t w = 3) : n_(n), h_(h), w_(w) {}
  int64_t size() const override { return n_; }
  data::Sample get(int64_t i) const override {
    check_index(i, "ProbeDataset");
    gets_.fetch_add(1);
    if (i == throw_at_.load()) throw Error(str("probe failure at ", i));
    if (i == stall_at_.load()) {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::seconds(30), [&] { return released_; });
    }
    data::Sample s;
    s.image = data::Image(1, h_, w_);
    std::fill(s.image.pixels.begin(), s.image.pixels.end(), static_cast<uint8_t>(i % 251));
    s.label = i % 10;
    return s;
  }
  void throw_at(int64_t i) { throw_at_ = i; }
  void stall_at(int64_t i) { stall_at_ = i; }
  void release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  int64_t gets() const { return gets_.load(); }

 private:
  int64_t n_, h_, w_;
  std::atomic<int64_t> throw_at_{-1}, stall_at_{-1};
  mutable std::atomic<int64_t> gets_{0};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool released_ = false;
};

// Runs fn; if it has not returned after `seconds`, reports the hang and aborts the process, so a
// deadlock fails the run at once instead of stalling it until ctest's TIMEOUT.
template <class F>
void within(double seconds, const char* what, F&& fn) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(m);
    if (!cv.wait_for(l, std::chrono::duration<double>(seconds), [&] { return done; })) {
      std::fprintf(stderr, "HANG: '%s' did not finish within %.0f s\n", what, seconds);
      std::fflush(stderr);
      std::abort();
    }
  });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> l(m);
      done = true;
    }
    cv.notify_all();
    watchdog.join();
  };
  try {
    fn();
  } catch (...) {
    finish();
    throw;
  }
  finish();
}

inline bool has_fashion_mnist() { return std::filesystem::exists("/usr/share/datasets/fashion-mnist"); }
inline const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

}  // namespace ember::testing
