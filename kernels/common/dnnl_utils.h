// oneDNN plumbing shared by the CPU vendor variants (kernels/ops/conv2d_dnnl.cpp, pool_dnnl.cpp,
// matmul_dnnl.cpp, batch_norm_dnnl.cpp): one CPU engine, a stream per thread, memory descriptors
// that describe ember tensors exactly as they are (dims and element strides, so NCHW and
// channels-last need no copy), a primitive cache, and the translation of oneDNN's exceptions into
// ember errors. Only included from sources built with EMBER_WITH_DNNL (libdnnl-dev's headers are
// found by the top CMakeLists.txt).
//
// Threads: Debian's libdnnl runs its primitives on OpenMP (libgomp) threads, beside ember's own
// pool (core/parallel.h). libgomp's threads spin-wait between parallel regions unless
// OMP_WAIT_POLICY=passive is set before the process starts; on a busy machine the spinning made
// oneDNN many times slower (docs/perf.md, "CPU: oneDNN beside ember's kernels").
//
// Note [dnnl primitive cache]: building a oneDNN primitive descriptor searches the library's
// implementations for one that takes the shapes, dtypes and layouts (a few hundred microseconds to
// milliseconds, more than a whole MNIST-sized convolution), so each variant keeps what it built in
// a PrimitiveCache keyed by every byte that decides the primitive: the op, dtypes, dims, strides
// and attributes. A training step therefore builds nothing after its first iteration. A shape
// oneDNN has no implementation for is cached too (as "unsupported"), so `supports()` asks once.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ember::dnnl_utils {

// The process's CPU engine (created on first use).
const dnnl::engine& engine();
// The calling thread's stream on that engine (oneDNN streams are not shared between threads).
dnnl::stream& stream();

// f32, bf16, f16 map to oneDNN types; anything else (f64, integers) has none: nullopt.
std::optional<dnnl::memory::data_type> data_type(DType t);

// A descriptor of `t` as it is: its dims and element strides (any dense or strided layout).
dnnl::memory::desc desc_of(const Tensor& t);
// The same memory with other dims and strides (e.g. a [K, C/G, R, S] weight as [G, K/G, C/G, R, S]).
dnnl::memory::desc desc_of(DType t, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);

// A oneDNN memory object over an ember tensor's data (no copy; the tensor must outlive its use).
dnnl::memory memory_of(const dnnl::memory::desc& d, const Tensor& t);
// A scratch buffer for `d` from ember's CPU allocator, and the memory object over it.
dnnl::memory scratch(const dnnl::memory::desc& d, Tensor& keep_alive);

// Runs `f` and turns a dnnl::error into an ember error naming `what` and oneDNN's status.
template <class F>
auto checked(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    EMBER_FAIL(what, ": oneDNN failed (status ", static_cast<int>(e.status), "): ", e.what());
  }
}

// Appends the values that identify a tensor's descriptor (dtype, dims, strides) to a cache key.
void key_tensor(std::vector<int64_t>& key, const Tensor& t);

// See Note [dnnl primitive cache]. Thread-safe; entries live for the process (bounded by the number of
// distinct shapes a program runs, as with the cuDNN algorithm cache).
template <class Entry>
class PrimitiveCache {
 public:
  // The entry for `key`, built by `make` on first use; `make` returns nullptr when oneDNN has no
  // implementation (remembered: later calls return nullptr at once).
  template <class Make>
  std::shared_ptr<const Entry> get(const std::vector<int64_t>& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    std::shared_ptr<const Entry> e = make();  // outside the lock: building can take milliseconds
    std::lock_guard<std::mutex> lock(mu_);
    return map_.emplace(key, std::move(e)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<const Entry>> map_;
};

// The process's cache of one op file's primitives, one per Entry type (the type is the op file's
// own, so each file gets its cache). Never destroyed, so nothing depends on the order of static
// destruction at exit.
template <class Entry>
PrimitiveCache<Entry>& cache_of() {
  static auto* c = new PrimitiveCache<Entry>();
  return *c;
}

// Builds a primitive descriptor with `make`; returns nullopt when oneDNN has no implementation
// for it (dnnl_unimplemented) and rethrows every other failure as an ember error naming `what`.
template <class PD, class Make>
std::optional<PD> try_primitive_desc(const char* what, Make&& make) {
  try {
    return make();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return std::nullopt;
    EMBER_FAIL(what, ": oneDNN could not describe the primitive (status ", static_cast<int>(e.status), "): ", e.what());
  }
}

// A reorder from `from` to `to` when the two differ, else nothing (the memory is used as it is).
struct Reorder {
  std::optional<dnnl::reorder> prim;
  dnnl::memory::desc to;
  static Reorder between(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
};
// Gives `user` memory in the layout the primitive wants: `user` itself, or a reordered scratch copy.
dnnl::memory reorder_in(const Reorder& r, const dnnl::memory& user, Tensor& keep_alive);

}  // namespace ember::dnnl_utils
