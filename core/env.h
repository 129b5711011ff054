// Numbers from environment variables, checked.
//
// Note [environment numbers]: every EMBER_* variable ember reads as a number goes through these.
// The whole value must be an integer (or a finite decimal number) inside the range the variable
// accepts; anything else (trailing characters, inf, nan, 1e300, a value outside the range) throws
// ember::Error naming the variable, the value and the range, e.g.
//   EMBER_NUM_THREADS='8x': expected an integer from 1 to 4096
// instead of being clamped, overflowing or silently replaced by a default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ember::env {

// `text` as an integer in [lo, hi]; throws ember::Error naming `name` and the range otherwise.
int64_t parse_integer(const char* name, const std::string& text, int64_t lo, int64_t hi);
// `text` as a finite number in [lo, hi] (decimal or exponent notation).
double parse_number(const char* name, const std::string& text, double lo, double hi);

// The variable's value, parsed as above; nullopt when it is unset or empty.
std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi);
std::optional<double> number(const char* name, double lo, double hi);

}  // namespace ember::env
