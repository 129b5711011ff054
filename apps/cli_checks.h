// CLI11 validators the programs share (mnist_train, ember_tune), so a flag means the same in both.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace ember::cli {

// A finite number: CLI::Range and CLI::NonNegativeNumber let nan through (every comparison with it
// is false) and inf past any bound they do not check.
inline const CLI::Validator kFinite(
    [](std::string& text) -> std::string {
      double v = 0;
      if (CLI::detail::lexical_cast(text, v) && !std::isfinite(v)) return "expected a finite number, got " + text;
      return std::string();
    },
    "");

// A seed is a uint64: CLI11 would take -1 as 2^64 - 1 and clamp 2^64 and above to it, so two
// different seeds could run the same numbers. Only the decimal integers 0 .. 2^64 - 1 pass.
inline const CLI::Validator kSeed(
    [](std::string& text) -> std::string {
      uint64_t v = 0;
      const char* end = text.data() + text.size();
      const auto [ptr, ec] = std::from_chars(text.data(), end, v);
      if (text.empty() || ptr != end || ec == std::errc::invalid_argument)
        return "expected an integer in [0, 18446744073709551615], got '" + text + "'";
      if (ec == std::errc::result_out_of_range)
        return "expected an integer in [0, 18446744073709551615], got " + text + " (out of range)";
      return std::string();
    },
    "UINT64");

}  // namespace ember::cli
