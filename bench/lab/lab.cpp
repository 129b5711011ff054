// register_lab_variants(): every bench/lab/<op>_lab.cu in ops.def order (bench/lab/lab.h).
#include "bench/lab/lab.h"

#include <mutex>

namespace ember {

void register_lab_variants() {
  static std::once_flag once;
  std::call_once(once, [] {
#if EMBER_WITH_CUDA
    register_lab_index();
    register_lab_matmul();
    register_lab_linear();
    register_lab_softmax();
    register_lab_loss();
    register_lab_conv2d();
#endif
  });
}

}  // namespace ember
