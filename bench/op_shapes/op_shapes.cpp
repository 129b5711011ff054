// The table of every op's benchmark cases, in ops.def order (see bench/op_shapes/op_shapes.h), and
// the ops bench_ops does not time.
#include "bench/op_shapes/op_shapes.h"

namespace ember {

// The ops without benchmark cases (the views have no kernel to time); giving one some is adding
// its <op>_shapes.cpp definition instead of the line here.
std::vector<BenchCase> benches_where() { return {}; }
std::vector<BenchCase> benches_cast() { return {}; }
std::vector<BenchCase> benches_cast_many() { return {}; }
std::vector<BenchCase> benches_copy() { return {}; }
std::vector<BenchCase> benches_arange() { return {}; }
std::vector<BenchCase> benches_view() { return {}; }
std::vector<BenchCase> benches_permute() { return {}; }
std::vector<BenchCase> benches_slice() { return {}; }
std::vector<BenchCase> benches_expand() { return {}; }
std::vector<BenchCase> benches_cat() { return {}; }
std::vector<BenchCase> benches_index_add() { return {}; }
std::vector<BenchCase> benches_gather() { return {}; }
std::vector<BenchCase> benches_scatter_add() { return {}; }
std::vector<BenchCase> benches_amp_update_scale() { return {}; }
std::vector<BenchCase> benches_train_stats() { return {}; }  // one launch on a few KB: launch bound
std::vector<BenchCase> benches_nll_loss_backward() { return {}; }
std::vector<BenchCase> benches_clip_by_total_norm() { return {}; }

BenchFn op_benches(OpId id) {
  static constexpr BenchFn kTable[] = {
#define EMBER_OP(name, devices) &benches_##name,
#define EMBER_UNARY(name, Functor) &benches_##name, &benches_##name##_backward,
#define EMBER_BINARY(name, Functor) &benches_##name, &benches_##name##_scalar,
#include "kernels/ops.def"
  };
  static_assert(std::size(kTable) == kNumOps, "one benchmark function per op in kernels/ops.def");
  return kTable[static_cast<int>(id)];
}

}  // namespace ember
