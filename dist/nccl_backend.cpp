// Placeholder until the NCCL backend lands in this file: builds without NCCL.
#include "dist/backends.h"

namespace ember::dist {

bool nccl_available() { return false; }

ProcessGroupPtr make_nccl_group(std::shared_ptr<Store>, int, int, int, std::chrono::milliseconds) {
  throw DistError("the nccl backend is not built in; use gloo");
}

}  // namespace ember::dist
