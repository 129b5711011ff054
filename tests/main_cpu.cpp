// Catch2's runner for the CPU suite. Starts with libgomp's passive wait policy, as mnist_train
// does, so the oneDNN variants the parity tests run do not leave spinning threads beside the other
// tests (Note [OpenMP wait policy] in kernels/openmp.h).
#include "kernels/openmp.h"
#include "tests/catch_session.h"
#include "tests/suite_env.h"

int main(int argc, char** argv) {
  ember::restart_with_passive_openmp(argv);
  ember::testing::set_suite_environment();
  return ember::testing::run_catch(argc, argv);
}
