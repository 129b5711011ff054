// No error ends a process in std::terminate (Note [no abort] in core/error.h): an exception out of a
// destructor, a thread's function or a callback that a destructor runs. What could end the process
// runs in a child process of this binary (tests/child_run.h): the programs' last line of defense
// (install_terminate_handler: one line, exit code 1) and the profiler's listener; the image folder's
// workers in this process, where std::terminate would end (and fail) the test with SIGABRT.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/profiler.h"
#include "data/image_folder.h"
#include "tests/child_run.h"
#include "tests/data_test_util.h"

#include "tests/stb_image_write_util.h"

using namespace ember;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// Throws out of whatever calls it (not inline in the destructor below, where the compiler would
// see a throw in a noexcept function and warn).
[[noreturn]] __attribute__((noinline)) void fail_now(const char* what) { EMBER_FAIL(what); }

struct CleanupFails {
  ~CleanupFails() { fail_now("releasing the buffer failed"); }  // noexcept: std::terminate
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

// ---- the programs' last line of defense ----

TEST_CASE("no abort: (child) an exception out of a destructor", "[.][no_abort_child_destructor]") {
  install_terminate_handler("ember_tests");
  { CleanupFails c; }
  FAIL("not reached: the destructor's exception ends the process");
}

TEST_CASE("no abort: (child) an exception out of a thread's function", "[.][no_abort_child_thread]") {
  install_terminate_handler("ember_tests");
  std::thread t([] { fail_now("a worker's batch failed"); });
  t.join();
  FAIL("not reached: the thread's exception ends the process");
}

TEST_CASE("no abort: an exception that reaches std::terminate ends a program with one line and exit code 1",
          "[no_abort]") {
  const std::pair<const char*, const char*> cases[] = {
      {"[no_abort_child_destructor]", "releasing the buffer failed"},
      {"[no_abort_child_thread]", "a worker's batch failed"},
  };
  for (const auto& [spec, message] : cases) {
    INFO(spec);
    const testing::ChildResult r = testing::run_self(spec);
    INFO("stderr: " << r.err);
    CHECK(r.signal == 0);  // SIGABRT (134 in a shell) without the handler
    CHECK(r.exit_code == 1);
    const std::vector<std::string> lines = lines_of(r.err);
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], StartsWith("ember_tests: error: ") && Contains(message));
    CHECK_THAT(lines[0], !Contains("tests/test_no_abort.cpp"));  // the user's message: no source location
  }
}

// ---- callbacks and worker threads ----

// A Listener's on_end runs in profiler::Range's destructor, during the unwinding of an op's error
// too (the op runner opens a Range around every kernel): what it throws must stay there, and the
// op's own error must reach the caller. In a child: std::terminate would end this whole run.
TEST_CASE("no abort: (child) a profiler listener that fails when a range closes", "[.][no_abort_child_listener]") {
  struct Failing final : profiler::Listener {
    int ended = 0;
    void on_begin(const char*, const char*, Device) override {}
    void on_end(const char*, const char*, Device) override {
      ++ended;
      fail_now("the listener's clock failed");
    }
  } failing;
  struct Restore {
    ~Restore() { profiler::set_listener(nullptr); }
  } restore;
  profiler::set_listener(&failing);
  { profiler::Range r("add", "cpu", kCPU); }
  CHECK_THROWS_WITH(
      [] {
        profiler::Range r("add", "cpu", kCPU);
        fail_now("the op failed");
      }(),
      Contains("the op failed"));
  CHECK(failing.ended == 2);
}

TEST_CASE("no abort: a profiler listener that fails when a range closes does not end the program",
          "[no_abort][profiler]") {
  const testing::ChildResult r = testing::run_self("[no_abort_child_listener]");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.signal == 0);  // SIGABRT: the listener's error left the destructor
  CHECK(r.exit_code == 0);
}

// load_image_folder decodes on worker threads while its caller's progress callback runs: a callback
// that throws must reach the caller (the workers stopped and joined), not destroy running threads.
TEST_CASE("no abort: a progress callback that throws while images decode reaches the caller", "[no_abort][data]") {
  testing::TempDir dir;
  const std::vector<uint8_t> pixels(4 * 4 * 3, 128);
  for (const char* cls : {"a", "b"}) {
    std::filesystem::create_directories(dir.file(cls));
    for (int i = 0; i < 8; ++i) {
      const std::string path = dir.file(std::string(cls) + "/" + std::to_string(i) + ".bmp");
      REQUIRE(stbi_write_bmp(path.c_str(), 4, 4, 3, pixels.data()) != 0);
    }
  }
  data::ImageFolder folder(dir.path());
  data::FolderLoadOptions o;
  o.workers = 2;
  o.progress = [](int64_t, int64_t) { fail_now("the progress display failed"); };
  CHECK_THROWS_WITH(data::load_image_folder(folder, o), Contains("the progress display failed"));
  // the workers were joined: the folder loads again
  o.progress = nullptr;
  CHECK(data::load_image_folder(folder, o)->size() == 16);
}
