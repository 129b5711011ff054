#include "core/error.h"

#include <cstring>

namespace ember::detail {

void throw_error(const char* file, int line, const std::string& msg) {
  // Keep only the path below the source root so messages stay short and stable.
  const char* short_file = file;
  for (const char* root : {"/core/", "/kernels/", "/nn/", "/optim/", "/data/", "/amp/", "/dist/", "/apps/",
                           "/bench/", "/tests/"}) {
    if (const char* p = std::strstr(file, root)) {
      short_file = p + 1;
      break;
    }
  }
  throw Error(msg + " (" + short_file + ":" + std::to_string(line) + ")");
}

}  // namespace ember::detail
