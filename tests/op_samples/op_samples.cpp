// The table of every op's samples, in ops.def order (see tests/op_samples/op_samples.h).
#include "tests/op_samples/op_samples.h"

namespace ember {

SamplesFn op_samples(OpId id) {
  static constexpr SamplesFn kTable[] = {
#define EMBER_OP(name, devices) &samples_##name,
#define EMBER_UNARY(name, Functor) &samples_##name, &samples_##name##_backward,
#define EMBER_BINARY(name, Functor) &samples_##name, &samples_##name##_scalar,
#include "kernels/ops.def"
  };
  static_assert(std::size(kTable) == kNumOps, "one samples function per op in kernels/ops.def");
  return kTable[static_cast<int>(id)];
}

}  // namespace ember
