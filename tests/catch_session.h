// The test programs' access to Catch2's session (tests/catch_session.cpp holds Catch2's
// implementation, compiled once; Catch2 v2 declares its Session only in that file).
#pragma once

#include <cstddef>

namespace ember::testing {

// Catch::Session().run(argc, argv): runs the test cases the command line selects.
int run_catch(int argc, char** argv);

// How many test cases the program holds, hidden ones not counted.
size_t visible_test_cases();

}  // namespace ember::testing
