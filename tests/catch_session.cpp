// Catch2's own implementation (its session, reporters and matchers), compiled once for every test
// program instead of once in each runner: it is the largest file of the suite to compile (over a
// minute under ASan + UBSan on the 2-core VM). tests/main_cpu.cpp and tests/main_gpu.cpp call it
// through tests/catch_session.h; tests/CMakeLists.txt builds it without the sanitizers (it is not
// ember's code).
#define CATCH_CONFIG_RUNNER
#include "tests/catch_session.h"

#include <catch2/catch.hpp>

namespace ember::testing {

int run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }

size_t visible_test_cases() {
  Catch::Session session;
  size_t cases = 0;
  for (const Catch::TestCase& tc : Catch::getAllTestCasesSorted(session.config()))
    if (!tc.isHidden()) ++cases;
  return cases;
}

}  // namespace ember::testing
