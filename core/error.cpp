#include "core/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

namespace ember {

namespace {
constexpr const char* kRoots[] = {"core/", "kernels/", "nn/",    "optim/", "data/", "amp/",    "dist/",
                                  "apps/", "bench/",   "tests/", "io/",    "ckpt/", "logging/"};
}  // namespace

std::string user_message(const std::string& what) {
  // One line: messages that list things on indented lines of their own are joined.
  std::string joined;
  for (size_t i = 0; i < what.size(); ++i) {
    if (what[i] != '\n') {
      joined += what[i];
      continue;
    }
    while (i + 1 < what.size() && (what[i + 1] == ' ' || what[i + 1] == '\t' || what[i + 1] == '\n')) ++i;
    if (i + 1 < what.size()) joined += ' ';
  }
  if (const char* keep = std::getenv("EMBER_ERROR_LOCATIONS"); keep != nullptr && std::strcmp(keep, "1") == 0)
    return joined;
  // Every " (ROOT/....ext:LINE)" group dropped; anything else in parentheses stays.
  std::string out;
  size_t i = 0;
  while (i < joined.size()) {
    if (joined.compare(i, 2, " (") == 0) {
      size_t close = joined.find(')', i + 2);
      if (close != std::string::npos) {
        std::string inner = joined.substr(i + 2, close - i - 2);
        bool root = false;
        for (const char* r : kRoots) root = root || inner.rfind(r, 0) == 0;
        size_t colon = inner.rfind(':');
        bool line = colon != std::string::npos && colon + 1 < inner.size() &&
                    inner.find_first_not_of("0123456789", colon + 1) == std::string::npos;
        bool file = colon != std::string::npos && inner.find('.') < colon && inner.find(' ') == std::string::npos;
        if (root && line && file) {
          i = close + 1;
          continue;
        }
      }
    }
    out += joined[i++];
  }
  return out;
}

namespace {

const char* g_program = "ember";

// The last line of defense of a program (Note [no abort] in core/error.h).
[[noreturn]] void on_terminate() noexcept {
  // One report even when several threads get here at once: the first one ends the process, the
  // others wait for it (the mutex is never released).
  static std::mutex once;
  once.lock();
  const char* what = "std::terminate was called without an exception";
  std::string text;
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      try {
        text = user_message(x.what());
        what = text.c_str();
      } catch (...) {
        what = x.what();  // no memory for the shortened message: the whole one
      }
    } catch (...) {
      what = "an exception that is not a std::exception";
    }
  }
  std::fflush(stdout);  // what the program printed before stays before the error line
  std::fprintf(stderr,
               "%s: error: %s (raised where nothing could handle it: a destructor, a thread or a callback; "
               "please report this)\n",
               g_program, what);
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

void install_terminate_handler(const char* program) {
  g_program = program;
  std::set_terminate(on_terminate);
}

}  // namespace ember

namespace ember::detail {

void throw_error(const char* file, int line, const std::string& msg) {
  // Keep only the path below the source root so messages stay short and stable.
  const char* short_file = file;
  for (const char* root : {"/core/", "/kernels/", "/nn/", "/optim/", "/data/", "/amp/", "/dist/", "/apps/", "/bench/",
                           "/tests/", "/io/", "/ckpt/", "/logging/"}) {
    if (const char* p = std::strstr(file, root)) {
      short_file = p + 1;
      break;
    }
  }
  throw Error(msg + " (" + short_file + ":" + std::to_string(line) + ")");
}

}  // namespace ember::detail
