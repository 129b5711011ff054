// Catch2's runner for the CPU suite. Starts with libgomp's passive wait policy, as mnist_train
// does, so the oneDNN variants the parity tests run do not leave spinning threads beside the other
// tests (Note [OpenMP wait policy] in kernels/openmp.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

#include "kernels/openmp.h"

int main(int argc, char** argv) {
  ember::restart_with_passive_openmp(argv);
  // The mnist_train runs of the suite use the fixed CPU kernels (Note [CPU defaults] in
  // kernels/registry.h): measured ones would differ between runs a test compares, and land in the
  // user's cache. The tests of the measured defaults set it themselves.
  ::setenv("EMBER_CPU_DEFAULTS", "fixed", 0);
  return Catch::Session().run(argc, argv);
}
