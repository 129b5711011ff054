// Errors and checks used at every public entry point.
//
// EMBER_CHECK(cond, "what is wrong and what to do", values...) throws ember::Error with the
// message, the values streamed after it, and the source location. Every value type that has an
// operator<< (shapes, dtypes, devices, numbers, strings) can be passed.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define EMBER_HD __host__ __device__
#else
#define EMBER_HD
#endif

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Raised when a CUDA call fails; carries the CUDA error code as an int.
class CudaError : public Error {
 public:
  CudaError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Raised when a device allocation fails after the cache was released and the allocation retried.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {

inline void stream_all(std::ostringstream&) {}
template <class T, class... Rest>
void stream_all(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  stream_all(os, rest...);
}

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  stream_all(os, args...);
  return os.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

}  // namespace detail

// What a program shows its user: `what` without the " (core/tensor.cpp:123)" source locations
// EMBER_CHECK appends (they are for developers; EMBER_ERROR_LOCATIONS=1 keeps them).
std::string user_message(const std::string& what);

// Builds a string from any streamable values: str("shape ", s, " vs ", t).
template <class... Args>
std::string str(const Args&... args) {
  return detail::cat(args...);
}

}  // namespace ember

#define EMBER_CHECK(cond, ...)                                                             \
  do {                                                                                     \
    if (!(cond)) [[unlikely]] {                                                            \
      ::ember::detail::throw_error(__FILE__, __LINE__, ::ember::detail::cat(__VA_ARGS__)); \
    }                                                                                      \
  } while (0)

#define EMBER_FAIL(...) ::ember::detail::throw_error(__FILE__, __LINE__, ::ember::detail::cat(__VA_ARGS__))
