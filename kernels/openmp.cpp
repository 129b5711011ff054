// The OpenMP wait policy switch: see Note [OpenMP wait policy] in kernels/openmp.h.
#include "kernels/openmp.h"

#include <unistd.h>

#include <cstdlib>

namespace ember {

void restart_with_passive_openmp(char** argv) {
#if EMBER_WITH_DNNL
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;  // the user's choice (or the restarted process)
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0) != 0) return;
  execv("/proc/self/exe", argv);
  // execv returned: it failed (no /proc?). Go on with libgomp's default policy.
#else
  (void)argv;
#endif
}

}  // namespace ember
