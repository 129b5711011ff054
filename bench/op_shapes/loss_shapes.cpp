// Benchmark shapes of the losses and their fused gradients (kernels/ops/loss.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/functional.h"
#include "kernels/ops/loss.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

struct BenchShape {
  const char* name;
  int64_t N, C;
  DType dt;
};
const std::vector<BenchShape>& class_bench_shapes() {
  static const std::vector<BenchShape> v{{"[8192, 32768] f32", 8192, 32768, DType::f32},
                                         {"[8192, 32768] bf16", 8192, 32768, DType::bf16},
                                         {"[64, 10] f32", 64, 10, DType::f32},
                                         {"[512, 10] f32", 512, 10, DType::f32}};
  return v;
}

// cross_entropy's forward, its backward, and both at once (cross_entropy_with_grad) on the same shapes.
enum class CeBench { forward, backward, with_grad };
template <CeBench kMode>
std::vector<BenchCase> cross_entropy_benches() {
  std::vector<BenchCase> v;
  for (const BenchShape& b : class_bench_shapes()) {
    BenchCase bc;
    bc.name = b.name;
    bc.attrs = LossAttrs{Reduction::mean, -100, 0};
    bc.make = [b](Device d) {
      Tensor x = uniform({b.N, b.C}, -1, 1, TensorOptions().dtype(b.dt).device(d));
      Tensor t = samples::randint({b.N}, b.C, 7).to(d);
      Tensor g = full({}, 1.0, TensorOptions().dtype(b.dt).device(d));
      if (kMode == CeBench::forward) return std::vector<Tensor>{x, t, Tensor()};
      if (kMode == CeBench::with_grad) return std::vector<Tensor>{x, t, Tensor(), g};
      Tensor tw = full({}, static_cast<double>(b.N), TensorOptions().dtype(loss_acc_dtype(b.dt)).device(d));
      return std::vector<Tensor>{g, x, t, Tensor(), tw};
    };
    v.push_back(std::move(bc));
  }
  return v;
}

std::vector<BenchCase> nll_loss_benches() {
  BenchCase bc;
  bc.name = "[512, 10] f32";
  bc.attrs = LossAttrs{Reduction::mean, -100, 0};
  bc.make = [](Device d) {
    return std::vector<Tensor>{uniform({512, 10}, -3, 0, TensorOptions().device(d)),
                               samples::randint({512}, 10, 7).to(d), Tensor()};
  };
  return {bc};
}

std::vector<BenchCase> mse_benches() {
  Shape s{int64_t{1} << 26};
  return {{"2^26 f32 mean",
           {TensorSpec{s, DType::f32, {}}, TensorSpec{s, DType::f32, {}}},
           LossAttrs{Reduction::mean, -100, 0},
           {}}};
}
std::vector<BenchCase> mse_backward_benches() {
  Shape s{int64_t{1} << 26};
  return {{"2^26 f32 mean",
           {TensorSpec{Shape{}, DType::f32, {}}, TensorSpec{s, DType::f32, {}}, TensorSpec{s, DType::f32, {}}},
           LossAttrs{Reduction::mean, -100, 0},
           {}}};
}

}  // namespace

std::vector<BenchCase> benches_cross_entropy() { return cross_entropy_benches<CeBench::forward>(); }
std::vector<BenchCase> benches_cross_entropy_backward() { return cross_entropy_benches<CeBench::backward>(); }
std::vector<BenchCase> benches_cross_entropy_with_grad() { return cross_entropy_benches<CeBench::with_grad>(); }
std::vector<BenchCase> benches_nll_loss() { return nll_loss_benches(); }
std::vector<BenchCase> benches_mse_loss() { return mse_benches(); }
std::vector<BenchCase> benches_mse_loss_backward() { return mse_backward_benches(); }

}  // namespace ember
