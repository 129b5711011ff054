// The environment the test suites give the programs they start (mnist_train, ember_tune): fixed
// CPU kernels, since measured ones (Note [CPU defaults] in kernels/registry.h) could differ between
// two runs a test compares; and a kernel cache of this test process's own, removed at its end,
// instead of the user's ~/.cache/ember. A test of those features sets the variables itself.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ember::testing {

inline void set_suite_environment() {
  ::setenv("EMBER_CPU_DEFAULTS", "fixed", 0);
  if (std::getenv("EMBER_CACHE_DIR") != nullptr) return;
  std::string dir = (std::filesystem::temp_directory_path() / "ember_test_cache_XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) return;  // then the default place: no test depends on it
  ::setenv("EMBER_CACHE_DIR", dir.c_str(), 1);
  static const std::string kept = dir;
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(kept, ec);
  });
}

}  // namespace ember::testing
