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

// Note [no abort]: an error in a program of ember's ends with one line, "<program>: error: ...", on
// stderr and a non-zero exit code, never in std::terminate (SIGABRT, exit 134). Exceptions reach
// std::terminate where nothing can catch them: thrown out of a destructor (implicitly noexcept;
// during the unwinding of another error too), out of a thread's function, or out of a callback
// that a noexcept function or a C library calls. So, in the code:
//  - destructors catch what their calls may throw and report it once on stderr, or keep it for
//    their owner to rethrow on the caller's thread (Note [no throwing destructors] in
//    core/storage.cpp; a CUDA error a destructor swallows is also cleared from the runtime's last
//    error, or the next launch check would report it as its own);
//  - a thread's function catches everything and hands it to the thread that consumes its work
//    (the DataLoader's workers to next(), a process group's worker to the collective's Work);
//  - callbacks that a destructor runs (the profiler's Listener::on_end in profiler::Range) do not
//    let an exception out.
// And the programs (mnist_train, bench_ops, ember_pack, ember_tune; ember_run, which links nothing
// of ember's, has one of its own) install the handler below as the last line of defense, so that a
// path these rules missed still ends with the one line and exit code 1, naming the error; the place
// it escaped from is then the bug to fix.
//
// install_terminate_handler makes std::terminate print "<program>: error: <the exception's
// message> (...)" on stderr and end the process with exit code 1 (std::_Exit: no static
// destructors run after a failure that may have left the device or a lock unusable). `program`
// must outlive the process (a string literal).
void install_terminate_handler(const char* program);

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
