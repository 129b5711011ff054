// The caching host allocator (Note [host caching allocator] in core/storage.cpp): size classes,
// reuse of a freed block of the same class, the byte bound, the off switch (set_cpu_cache_limit(0)
// and EMBER_CPU_ALLOC_CACHE), empty_cpu_cache(), threads, alignment.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ember.h"
#include "tests/child_run.h"

using namespace ember;

#if defined(__SANITIZE_ADDRESS__) || defined(EMBER_LIBRARY_ASAN)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

// Each test starts from an empty cache with a known bound, and puts the process's bound back.
struct CacheScope {
  size_t saved = cpu_allocator_stats().cache_limit_bytes;
  explicit CacheScope(size_t limit) {
    empty_cpu_cache();
    set_cpu_cache_limit(limit);
  }
  ~CacheScope() {
    empty_cpu_cache();
    set_cpu_cache_limit(saved);
  }
};

}  // namespace

TEST_CASE("cpu allocator: size classes are four steps per power of two (< 25% waste)", "[cpu_alloc]") {
  CHECK(cpu_alloc_round_size(1) == 64);
  CHECK(cpu_alloc_round_size(100) == 128);
  CHECK(cpu_alloc_round_size(64 * KiB - 1) == 64 * KiB);  // below the threshold: 64-byte steps
  CHECK(cpu_alloc_round_size(64 * KiB) == 64 * KiB);
  CHECK(cpu_alloc_round_size(64 * KiB + 1) == 80 * KiB);
  CHECK(cpu_alloc_round_size(100 * KiB) == 112 * KiB);
  CHECK(cpu_alloc_round_size(MiB) == MiB);
  CHECK(cpu_alloc_round_size(MiB + 1) == MiB + 256 * KiB);
  CHECK(cpu_alloc_round_size(3 * MiB) == 3 * MiB);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    size_t n = 64 * KiB + rng() % (512 * MiB);
    size_t r = cpu_alloc_round_size(n);
    REQUIRE(r >= n);
    REQUIRE(static_cast<double>(r - n) < 0.25 * static_cast<double>(n));
    REQUIRE(r % (16 * KiB) == 0);
    REQUIRE(cpu_alloc_round_size(r) == r);  // a class is its own class
  }
}

TEST_CASE("cpu allocator: a freed block is reused for the same size class", "[cpu_alloc]") {
  CacheScope scope(64 * MiB);
  Allocator* a = cpu_allocator();
  HostAllocatorStats s0 = cpu_allocator_stats();
  void* p = a->allocate(200 * KiB);
  REQUIRE(p != nullptr);
  HostAllocatorStats s1 = cpu_allocator_stats();
  CHECK(s1.num_cache_misses == s0.num_cache_misses + 1);
  CHECK(s1.allocated_bytes - s0.allocated_bytes == cpu_alloc_round_size(200 * KiB));  // 224 KiB
  std::memset(p, 0x5a, 200 * KiB);
  a->deallocate(p);
  HostAllocatorStats s2 = cpu_allocator_stats();
  CHECK(s2.cached_bytes == 224 * KiB);
  CHECK(s2.allocated_bytes == s0.allocated_bytes);

  void* q = a->allocate(200 * KiB + 1000);  // another request of the same class (192-224 KiB)
  HostAllocatorStats s3 = cpu_allocator_stats();
  CHECK(q == p);
  CHECK(s3.num_cache_hits == s2.num_cache_hits + 1);
  CHECK(s3.num_cache_misses == s2.num_cache_misses);
  CHECK(s3.cached_bytes == 0);
  CHECK(s3.allocated_bytes - s0.allocated_bytes == 224 * KiB);
  a->deallocate(q);

  SECTION("through tensors") {
    Tensor t = empty({50000});  // 200000 bytes of f32
    void* first = t.data_ptr();
    t = Tensor();
    Tensor u = empty({54000});  // 216000 bytes: the same class (192-224 KiB)
    CHECK(u.data_ptr() == first);
    CHECK(cpu_allocator_stats().num_cache_hits >= s3.num_cache_hits + 1);
  }
}

TEST_CASE("cpu allocator: blocks of different size classes are not mixed", "[cpu_alloc]") {
  CacheScope scope(64 * MiB);
  Allocator* a = cpu_allocator();
  void* big = a->allocate(256 * KiB);
  a->deallocate(big);
  HostAllocatorStats s0 = cpu_allocator_stats();
  REQUIRE(s0.cached_bytes == 256 * KiB);

  void* smaller = a->allocate(128 * KiB);  // a smaller class: not served by the 256 KiB block
  void* larger = a->allocate(300 * KiB);   // a larger class (320 KiB)
  HostAllocatorStats s1 = cpu_allocator_stats();
  CHECK(smaller != big);
  CHECK(larger != big);
  CHECK(s1.num_cache_hits == s0.num_cache_hits);
  CHECK(s1.num_cache_misses == s0.num_cache_misses + 2);
  CHECK(s1.cached_bytes == 256 * KiB);  // still waiting for its own class
  void* again = a->allocate(255 * KiB);
  CHECK(again == big);
  a->deallocate(smaller);
  a->deallocate(larger);
  a->deallocate(again);
  CHECK(cpu_allocator_stats().cached_bytes == 128 * KiB + 320 * KiB + 256 * KiB);
}

TEST_CASE("cpu allocator: the cache never holds more than its bound", "[cpu_alloc]") {
  CacheScope scope(MiB);
  Allocator* a = cpu_allocator();
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(a->allocate(256 * KiB));
  for (void* p : blocks) {
    a->deallocate(p);
    CHECK(cpu_allocator_stats().cached_bytes <= MiB);
  }
  CHECK(cpu_allocator_stats().cached_bytes == MiB);  // four of them; the other six went back to malloc
  CHECK(cpu_allocator_stats().cache_limit_bytes == MiB);

  void* huge = a->allocate(2 * MiB);  // larger than the bound: never cached
  a->deallocate(huge);
  CHECK(cpu_allocator_stats().cached_bytes == MiB);

  set_cpu_cache_limit(512 * KiB);  // lowering the bound frees what is beyond it
  CHECK(cpu_allocator_stats().cached_bytes == 512 * KiB);
  CHECK(cpu_allocator_stats().cache_limit_bytes == 512 * KiB);
}

TEST_CASE("cpu allocator: a bound of 0 turns the cache off", "[cpu_alloc]") {
  CacheScope scope(0);
  Allocator* a = cpu_allocator();
  HostAllocatorStats s0 = cpu_allocator_stats();
  CHECK(s0.cache_limit_bytes == 0);
  for (int i = 0; i < 4; ++i) {
    void* p = a->allocate(300 * KiB);
    REQUIRE(p != nullptr);
    CHECK(aligned64(p));
    std::memset(p, 1, 300 * KiB);
    a->deallocate(p);
  }
  HostAllocatorStats s1 = cpu_allocator_stats();
  CHECK(s1.cached_bytes == 0);
  CHECK(s1.num_cache_hits == s0.num_cache_hits);
  CHECK(s1.num_cache_misses == s0.num_cache_misses);
  CHECK(s1.allocated_bytes == s0.allocated_bytes);

  // a block handed out while the cache was on and freed after it was turned off goes to malloc
  set_cpu_cache_limit(MiB);
  void* p = a->allocate(100 * KiB);
  set_cpu_cache_limit(0);
  a->deallocate(p);
  CHECK(cpu_allocator_stats().cached_bytes == 0);
  CHECK(cpu_allocator_stats().allocated_bytes == s0.allocated_bytes);
}

// Run by the next test in a child process with EMBER_CPU_ALLOC_CACHE set (hidden: [.]).
TEST_CASE("cpu allocator: (child) report the bound", "[.][cpu_alloc_child]") {
  const char* want = std::getenv("EMBER_TEST_EXPECT_LIMIT");
  REQUIRE(want != nullptr);
  CHECK(cpu_allocator_stats().cache_limit_bytes == std::strtoull(want, nullptr, 10));
  void* p = cpu_allocator()->allocate(MiB);
  cpu_allocator()->deallocate(p);
  CHECK(cpu_allocator_stats().cached_bytes == (std::strtoull(want, nullptr, 10) >= MiB ? MiB : 0));
}

TEST_CASE("cpu allocator: EMBER_CPU_ALLOC_CACHE sets the bound or turns the cache off", "[cpu_alloc]") {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  self[n] = '\0';
  size_t fallback = cpu_allocator_stats().cache_limit_bytes;
  if (const char* v = std::getenv("EMBER_CPU_ALLOC_CACHE"); v != nullptr && *v != '\0') fallback = 0;
  auto run = [&](const std::string& value, size_t expect) {
    std::string cmd = "EMBER_CPU_ALLOC_CACHE=" + value + " EMBER_TEST_EXPECT_LIMIT=" + std::to_string(expect) + " '" +
                      self + "' '[cpu_alloc_child]' > /dev/null 2>&1";
    INFO(cmd);
    CHECK(std::system(cmd.c_str()) == 0);
  };
  run("0", 0);
  run("2M", 2 * MiB);
  run("300k", 300 * KiB);
  run("1G", size_t{1} << 30);
  // the default: min(1 GiB, physical memory / 8), the same as this process's unless it was set
  size_t def = size_t{1} << 30;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) def = std::min(def, static_cast<size_t>(pages) * static_cast<size_t>(page) / 8);
  if (fallback != 0) CHECK(fallback == def);
  run("1", def);
  // not understood or too big: an error naming the value (before, a warning and the default, or
  // a bound that overflowed)
  for (const std::string bad : {"lots", "2MX", "-1", "2048G", "99999999999999999999"}) {
    const testing::ChildResult r =
        testing::run_self("[cpu_alloc_child]", {"EMBER_CPU_ALLOC_CACHE=" + bad, "EMBER_TEST_EXPECT_LIMIT=0"});
    INFO(r.out << r.err);
    CHECK(r.exit_code != 0);
    CHECK((r.out + r.err).find("EMBER_CPU_ALLOC_CACHE='" + bad + "': expected 0 (no cache), 1") != std::string::npos);
  }
}

TEST_CASE("cpu allocator: empty_cpu_cache releases every cached block", "[cpu_alloc]") {
  CacheScope scope(64 * MiB);
  Allocator* a = cpu_allocator();
  std::vector<void*> blocks;
  for (size_t kib : {64, 100, 200, 400, 800, 1600, 3000}) blocks.push_back(a->allocate(kib * KiB));
  size_t expect = 0;
  for (size_t kib : {64, 100, 200, 400, 800, 1600, 3000}) expect += cpu_alloc_round_size(kib * KiB);
  for (void* p : blocks) a->deallocate(p);
  CHECK(cpu_allocator_stats().cached_bytes == expect);
  empty_cpu_cache();
  HostAllocatorStats s = cpu_allocator_stats();
  CHECK(s.cached_bytes == 0);
  void* p = a->allocate(200 * KiB);  // nothing left to reuse
  CHECK(cpu_allocator_stats().num_cache_misses == s.num_cache_misses + 1);
  CHECK(cpu_allocator_stats().num_cache_hits == s.num_cache_hits);
  a->deallocate(p);
}

#if !TEST_ASAN  // ASan aborts on an impossible allocation instead of returning null
TEST_CASE("cpu allocator: out of memory empties the cache, retries, then says so", "[cpu_alloc]") {
  CacheScope scope(64 * MiB);
  Allocator* a = cpu_allocator();
  a->deallocate(a->allocate(MiB));
  REQUIRE(cpu_allocator_stats().cached_bytes == MiB);
  CHECK_THROWS_WITH(a->allocate(size_t{1} << 62), Catch::Contains("out of host memory") && Catch::Contains("retried"));
  CHECK(cpu_allocator_stats().cached_bytes == 0);
}
#endif

TEST_CASE("cpu allocator: 64-byte alignment for small, large and reused blocks", "[cpu_alloc]") {
  CacheScope scope(64 * MiB);
  Allocator* a = cpu_allocator();
  for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{1000}, 64 * KiB - 1, 64 * KiB, 64 * KiB + 1, 333 * KiB,
                   5 * MiB + 3}) {
    void* p = a->allocate(n);
    CHECK(aligned64(p));
    a->deallocate(p);
    void* q = a->allocate(n);  // possibly the same block, from the cache
    CHECK(aligned64(q));
    a->deallocate(q);
  }
}

TEST_CASE("cpu allocator: threads allocating and freeing at once", "[cpu_alloc]") {
  CacheScope scope(8 * MiB);  // small enough that blocks also go back to malloc
  Allocator* a = cpu_allocator();
  HostAllocatorStats s0 = cpu_allocator_stats();
  constexpr int kThreads = 4, kIters = 1500;
  std::atomic<int> bad{0};
  std::atomic<uint64_t> large{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      const size_t sizes[] = {48, 4 * KiB, 64 * KiB, 100 * KiB, 256 * KiB, 700 * KiB, 2 * MiB};
      std::vector<std::pair<unsigned char*, size_t>> held;
      uint64_t my_large = 0;
      for (int i = 0; i < kIters; ++i) {
        if (held.size() < 6 && (held.empty() || rng() % 3 != 0)) {
          size_t n = sizes[rng() % 7];
          auto* p = static_cast<unsigned char*>(a->allocate(n));
          if (p == nullptr || !aligned64(p)) ++bad;
          if (n >= 64 * KiB) ++my_large;
          unsigned char tag = static_cast<unsigned char>(t * 31 + i);
          p[0] = tag;
          p[n - 1] = tag;
          held.emplace_back(p, n);
        } else {
          size_t k = rng() % held.size();
          auto [p, n] = held[k];
          if (p[0] != p[n - 1]) ++bad;  // another thread wrote into a block this one holds
          a->deallocate(p);
          held.erase(held.begin() + static_cast<long>(k));
        }
      }
      for (auto [p, n] : held) a->deallocate(p);
      large += my_large;
    });
  }
  for (auto& th : threads) th.join();
  HostAllocatorStats s1 = cpu_allocator_stats();
  CHECK(bad.load() == 0);
  CHECK(s1.allocated_bytes == s0.allocated_bytes);
  CHECK(s1.cached_bytes <= 8 * MiB);
  CHECK((s1.num_cache_hits - s0.num_cache_hits) + (s1.num_cache_misses - s0.num_cache_misses) == large.load());
  CHECK(s1.num_cache_hits > s0.num_cache_hits);
}
