// Numbers read from EMBER_* environment variables (Note [environment numbers] in core/env.h): a
// value outside its range, with trailing characters, inf, nan or an overflowing one is an error
// naming the variable, the value and the range, never clamped or turned into a negative timeout.
// EMBER_DIST_TIMEOUT=none waits without limit. EMBER_CPU_ALLOC_CACHE: tests/test_cpu_allocator.cpp.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/env.h"
#include "core/parallel.h"
#include "dist/process_group.h"
#include "dist/store.h"
#include "tests/child_run.h"

using namespace ember;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

struct EnvGuard {
  std::string name;
  EnvGuard(const std::string& n, const std::string& v) : name(n) { ::setenv(n.c_str(), v.c_str(), 1); }
  ~EnvGuard() { ::unsetenv(name.c_str()); }
};

dist::Options group_of_one() {
  dist::Options o;
  o.rank = 0;
  o.world_size = 1;
  o.master_port = 0;
  return o;
}

}  // namespace

TEST_CASE("env: the parsers take whole integers and finite numbers in range, naming what they refuse", "[env]") {
  CHECK(env::parse_integer("X", "42", 1, 100) == 42);
  CHECK(env::parse_integer("X", "-3", -5, 5) == -3);
  CHECK(env::parse_number("X", "2.5", 0.001, 10) == 2.5);
  CHECK(env::parse_number("X", "1e2", 0, 1000) == 100);
  for (const char* bad : {"", "8x", " 8", "0x10", "101", "0", "99999999999999999999", "2.0"})
    CHECK_THROWS_WITH(env::parse_integer("X", bad, 1, 100),
                      Contains(std::string("X='") + bad + "': expected an integer from 1 to 100"));
  for (const char* bad : {"inf", "-inf", "nan", "1e300", "1e-400", "11", "1s", ""})
    CHECK_THROWS_WITH(env::parse_number("X", bad, 0.001, 10),
                      Contains(std::string("X='") + bad + "': expected a number from 0.001 to 10"));
  ::unsetenv("EMBER_TEST_UNSET_NUMBER");
  CHECK_FALSE(env::integer("EMBER_TEST_UNSET_NUMBER", 0, 1).has_value());
}

TEST_CASE("env: EMBER_DIST_TIMEOUT out of range is refused naming it, and none waits without limit", "[env][dist]") {
  // Before: inf and 1e300 overflowed into a negative timeout ("could not reach the rendezvous
  // store ... within -9223 s"), 1e-6 became 0 ms.
  for (const char* bad : {"inf", "1e300", "nan", "1e-6", "0", "-5", "10s", "ten", "604801"}) {
    INFO(bad);
    EnvGuard g("EMBER_DIST_TIMEOUT", bad);
    CHECK_THROWS_AS(dist::init_process_group(group_of_one()), dist::DistError);
    CHECK_THROWS_WITH(dist::init_process_group(group_of_one()),
                      Contains(std::string("EMBER_DIST_TIMEOUT='") + bad +
                               "': expected a number from 0.001 to 604800 seconds, or none (no limit)"));
  }
  {
    EnvGuard g("EMBER_DIST_TIMEOUT", "2.5");
    CHECK(dist::init_process_group(group_of_one())->timeout() == 2500ms);
    dist::destroy_process_group();
  }
  {
    EnvGuard g("EMBER_DIST_TIMEOUT", "none");
    auto pg = dist::init_process_group(group_of_one());
    CHECK(pg->timeout() == dist::kNoTimeout);
    pg->barrier()->wait();
    dist::destroy_process_group();
  }
  CHECK(dist::describe_timeout(dist::kNoTimeout) == "no limit");
  CHECK(dist::describe_timeout(2500ms) == "2.5 s");
  // a store without a limit blocks until the key comes (no deadline that overflows into the past)
  dist::TcpStore server("127.0.0.1", 0, true, dist::kNoTimeout);
  dist::TcpStore client("127.0.0.1", server.port(), false, dist::kNoTimeout);
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    server.set("late", "v");
  });
  CHECK(client.get("late") == "v");
  later.join();
}

// Run by the next test in a child process with EMBER_NUM_THREADS set (hidden: [.]).
TEST_CASE("env: (child) start the thread pool", "[.][env_threads_child]") {
  std::printf("threads: %d\n", num_threads());
}

TEST_CASE("env: EMBER_NUM_THREADS outside 1..4096 or with trailing characters is an error", "[env]") {
  // Before: atoi, so "8x" was 8, and "0", "-2" or "lots" silently became every core.
  for (const std::string bad : {"0", "-2", "8x", "lots", "5000", "1e3"}) {
    const testing::ChildResult r = testing::run_self("[env_threads_child]", {"EMBER_NUM_THREADS=" + bad});
    INFO(r.out << r.err);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.out + r.err, Contains("EMBER_NUM_THREADS='" + bad + "': expected an integer from 1 to 4096"));
  }
  const testing::ChildResult ok = testing::run_self("[env_threads_child]", {"EMBER_NUM_THREADS=3"});
  INFO(ok.out << ok.err);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.out, Contains("threads: 3"));
}
