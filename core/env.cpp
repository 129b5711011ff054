// Numbers from environment variables, checked (Note [environment numbers] in core/env.h).
#include "core/env.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "core/runtime.h"

namespace ember::env {

namespace {

std::string shown(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

[[noreturn]] void refuse(const char* name, const std::string& text, const std::string& expected) {
  throw Error(std::string(name) + "='" + text + "': expected " + expected);
}

}  // namespace

int64_t parse_integer(const char* name, const std::string& text, int64_t lo, int64_t hi) {
  const std::string expected = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  // strtoll skips leading blanks; a value is refused with them as with trailing ones
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || end == text.c_str() || *end != '\0' ||
      errno == ERANGE || v < lo || v > hi)
    refuse(name, text, expected);
  return v;
}

double parse_number(const char* name, const std::string& text, double lo, double hi) {
  const std::string expected = "a number from " + shown(lo) + " to " + shown(hi);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  // !(lo <= v && v <= hi) also refuses nan; inf and overflow (ERANGE) fall outside every range
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || end == text.c_str() || *end != '\0' ||
      !std::isfinite(v) || !(lo <= v && v <= hi))
    refuse(name, text, expected);
  return v;
}

std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) {
  const std::string v = runtime::env(name);
  if (v.empty()) return std::nullopt;
  return parse_integer(name, v, lo, hi);
}

std::optional<double> number(const char* name, double lo, double hi) {
  const std::string v = runtime::env(name);
  if (v.empty()) return std::nullopt;
  return parse_number(name, v, lo, hi);
}

}  // namespace ember::env
