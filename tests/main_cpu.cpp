// Catch2's runner for the CPU suite.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
