// Test samples of the losses and their fused gradients (kernels/ops/loss.*): every reduction, class
// weights, ignore_index (-100 and a real class), label smoothing, class dims beyond 1, empty and
// all-ignored batches, large magnitudes, -inf logits.
#include <limits>
#include <string>

#include "kernels/functional.h"
#include "kernels/ops/loss.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rows for the multi-block path (past the one-block path's 512 rows of 10 classes): 8000, and 600
// in the simulator build, where every lane is a simulated thread under its memory checks (with
// 8000 rows cross_entropy and its backward were the longest op tests of CI's simulator stage).
#if defined(EMBER_CUDA_SIM) && EMBER_CUDA_SIM
constexpr int64_t kManyRows = 600;
#else
constexpr int64_t kManyRows = 8000;
#endif

Tensor with_targets(std::vector<int64_t> v, const Shape& s) { return tensor_i64(v, s); }

struct ClassCase {
  std::string name;
  Tensor x, t, w;
  LossAttrs attrs;
  bool gradcheck = true;
};

std::vector<ClassCase> class_cases(bool smoothing) {
  std::vector<ClassCase> v;
  uint64_t seed = 2100;
  auto u = [&](Shape s, double lo = -3, double hi = 3) { return samples::uniform(s, lo, hi, ++seed); };
  auto ri = [&](Shape s, int64_t C) { return samples::randint(s, C, ++seed); };
  auto weights = [&](int64_t C) { return samples::uniform({C}, 0.2, 2.0, ++seed); };
  const LossAttrs mean{Reduction::mean, -100, 0}, sum{Reduction::sum, -100, 0}, none{Reduction::none, -100, 0};
  v.push_back({"[5, 7] mean", u({5, 7}), ri({5}, 7), {}, mean});
  v.push_back({"[5, 7] sum", u({5, 7}), ri({5}, 7), {}, sum});
  v.push_back({"[5, 7] none", u({5, 7}), ri({5}, 7), {}, none});
  v.push_back(
      {"[6, 4] ignore_index -100 present, mean", u({6, 4}), with_targets({1, -100, 3, 0, -100, 2}, {6}), {}, mean});
  v.push_back({"[6, 4] ignore_index 2 (a real class), none",
               u({6, 4}),
               with_targets({1, 2, 3, 0, 2, 2}, {6}),
               {},
               LossAttrs{Reduction::none, 2, 0}});
  v.push_back({"[6, 4] weights, mean", u({6, 4}), ri({6}, 4), weights(4), mean});
  v.push_back({"[6, 4] weights, sum", u({6, 4}), ri({6}, 4), weights(4), sum});
  v.push_back({"[6, 4] weights, none", u({6, 4}), ri({6}, 4), weights(4), none});
  v.push_back({"[6, 4] weights and ignore_index, mean", u({6, 4}), with_targets({3, -100, 0, 0, 2, -100}, {6}),
               weights(4), mean});
  v.push_back({"[2, 5, 3] class dim 1, mean", u({2, 5, 3}), ri({2, 3}, 5), {}, mean});
  v.push_back({"[2, 5, 3] class dim 1, none", u({2, 5, 3}), ri({2, 3}, 5), {}, none});
  v.push_back({"[2, 4, 3, 2] class dim 1 of 4-D, weights, ignore, mean", u({2, 4, 3, 2}),
               with_targets({0, 1, 2, 3, -100, 1, 2, 2, 3, 0, -100, 1}, {2, 3, 2}), weights(4), mean});
  v.push_back({"[7] one sample, 0-d target, mean", u({7}), tensor_i64({3}, Shape{}), {}, mean});
  v.push_back({"[7] one sample, 0-d target, none", u({7}), tensor_i64({6}, Shape{}), {}, none});
  v.push_back({"[0, 5] empty batch, mean (NaN)", u({0, 5}), ri({0}, 5), {}, mean});
  v.push_back({"[0, 5] empty batch, sum", u({0, 5}), ri({0}, 5), {}, sum});
  v.push_back({"[0, 5] empty batch, none", u({0, 5}), ri({0}, 5), {}, none});
  v.push_back({"[3, 5] all ignored, mean (NaN)", u({3, 5}), with_targets({-100, -100, -100}, {3}), {}, mean, false});
  {
    ClassCase c{"[5, 7] i32 targets, mean", u({5, 7}), ri({5}, 7).to(DType::i32), {}, mean};
    v.push_back(c);
  }
  v.push_back({"[64, 10] MNIST batch, mean", u({64, 10}), ri({64}, 10), {}, mean});
  v.push_back({"[512, 10] MNIST batch, mean, i32 targets", u({512, 10}), ri({512}, 10).to(DType::i32), {}, mean});
  const std::string many = "[" + std::to_string(kManyRows) + ", 10]";
  v.push_back({many + " mean (multi-block + finalize)", u({kManyRows, 10}), ri({kManyRows}, 10), {}, mean});
  v.push_back({many + " weights, sum", u({kManyRows, 10}), ri({kManyRows}, 10), weights(10), sum});
  v.push_back({"[9, 100] mean", u({9, 100}), ri({9}, 100), {}, mean});
  v.push_back({"[3, 700] none", u({3, 700}), ri({3}, 700), {}, none});
  v.push_back({"[3, 5000] mean (block per row)", u({3, 5000}), ri({3}, 5000), {}, mean});
  v.push_back({"[3, 60, 50] class dim 1 (strided), none", u({3, 60, 50}), ri({3, 50}, 60), {}, none});
  v.push_back({"+-1e4 [16, 50] mean (large magnitudes)", u({16, 50}, -1e4, 1e4), ri({16}, 50), {}, mean});
  v.push_back({"+-1e4 [4, 5000] none (large magnitudes, long)", u({4, 5000}, -1e4, 1e4), ri({4}, 5000), {}, none});
  {
    // -inf logits at non-target classes contribute exp(-inf) = 0
    Tensor x = u({4, 6});
    double* p = x.data<double>();
    p[1] = -kInf;
    p[8] = -kInf;
    v.push_back({"-inf at non-target logits, none", x, with_targets({0, 3, 5, 2}, {4}), {}, none, false});
  }
  if (smoothing) {
    const LossAttrs smean{Reduction::mean, -100, 0.1}, ssum{Reduction::sum, -100, 0.1},
        snone{Reduction::none, -100, 0.1};
    v.push_back({"[5, 7] smoothing 0.1, mean", u({5, 7}), ri({5}, 7), {}, smean});
    v.push_back({"[5, 7] smoothing 0.1, sum", u({5, 7}), ri({5}, 7), {}, ssum});
    v.push_back({"[5, 7] smoothing 0.1, none", u({5, 7}), ri({5}, 7), {}, snone});
    v.push_back({"[6, 4] smoothing 0.1, weights, ignore, mean", u({6, 4}), with_targets({3, -100, 0, 1, 2, -100}, {6}),
                 weights(4), smean});
    v.push_back({"[6, 4] smoothing 0.1, weights, ignore, none", u({6, 4}), with_targets({3, -100, 0, 1, 2, -100}, {6}),
                 weights(4), snone});
    v.push_back({"[2, 4, 3, 2] class dim 1, smoothing 0.1, weights, ignore, sum", u({2, 4, 3, 2}),
                 with_targets({0, 1, 2, 3, -100, 1, 2, 2, 3, 0, -100, 1}, {2, 3, 2}), weights(4), ssum});
    v.push_back({"[512, 10] smoothing 0.1, weights, mean", u({512, 10}), ri({512}, 10), weights(10), smean});
    v.push_back(
        {"[3, 5000] smoothing 0.1, weights, none (block per row)", u({3, 5000}), ri({3}, 5000), weights(5000), snone});
    v.push_back({"[3, 60, 50] class dim 1 (strided), smoothing 0.1, weights, mean", u({3, 60, 50}), ri({3, 50}, 60),
                 weights(60), smean});
    v.push_back(
        {"+-1e4 [16, 50] smoothing 0.1, weights, mean", u({16, 50}, -1e4, 1e4), ri({16}, 50), weights(50), smean});
    v.push_back({"near-equal large [8, 100] smoothing 0.1, mean", u({8, 100}, 9000, 9001), ri({8}, 100), {}, smean});
    v.push_back({"[4, 6] smoothing 1.0, mean", u({4, 6}), ri({4}, 6), {}, LossAttrs{Reduction::mean, -100, 1.0}});
  }
  return v;
}

// f32: sums over rows and classes in another order than the f64 reference. f16/bf16: the outputs
// are rounded once more; the absolute tolerance covers the gradients of near-cancelling terms.
void set_loss_tolerance(OpSample& s) {
  s.tol = {{DType::f32, {1e-5, 1e-5}}, {DType::f16, {1e-3, 1e-3}}, {DType::bf16, {1.6e-2, 1e-2}}};
  s.tol_note = "CUDA accumulates in f32 per row and in f64 across rows, in another order than the f64 reference";
}

template <bool kCE>
std::vector<OpSample> class_loss_samples() {
  std::vector<OpSample> out;
  for (ClassCase& c : class_cases(kCE)) {
    OpSample& s = samples::add_sample(out, c.name);
    s.inputs = {kCE ? c.x : log_softmax(c.x, c.x.dim() == 1 ? 0 : 1), c.t, c.w};
    s.attrs = c.attrs;
    s.grad_inputs = {0};  // not the targets, not the class weights (no gradient, like PyTorch)
    s.gradcheck = c.gradcheck;
    set_loss_tolerance(s);
  }
  return out;
}

template <bool kCE>
std::vector<OpSample> class_loss_backward_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 2300;
  for (ClassCase& c : class_cases(kCE)) {
    OpSample& s = samples::add_sample(out, c.name);
    Tensor x = kCE ? c.x : log_softmax(c.x, c.x.dim() == 1 ? 0 : 1);
    std::vector<Tensor> fwd = call(kCE ? OpId::cross_entropy : OpId::nll_loss, {x, c.t, c.w}, c.attrs);
    Tensor g = samples::uniform(fwd[0].shape(), 0.5, 2, ++seed);
    s.inputs = {g, x, c.t, c.w, fwd[1]};
    s.attrs = c.attrs;
    s.grad_inputs = {0};
    // cross_entropy_backward is not differentiated again; nll_loss_backward is (w.r.t. grad)
    s.gradcheck = !kCE && c.gradcheck;
    set_loss_tolerance(s);
  }
  return out;
}

// cross_entropy_with_grad: every cross_entropy case with an announced gradient (not 1, so the
// scale is checked). Its vjp is cross_entropy's (checked there); dx is an output, compared with
// the CPU's like the loss.
std::vector<OpSample> cross_entropy_with_grad_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 2400;
  for (ClassCase& c : class_cases(true)) {
    OpSample& s = samples::add_sample(out, c.name);
    const Shape gs = c.attrs.reduction == Reduction::none ? c.t.shape() : Shape{};
    s.inputs = {c.x, c.t, c.w, samples::uniform(gs, 0.5, 2, ++seed)};
    s.attrs = c.attrs;
    s.gradcheck = false;
    set_loss_tolerance(s);
  }
  return out;
}

std::vector<OpSample> mse_samples(bool backward) {
  std::vector<OpSample> out;
  uint64_t seed = 2500;
  auto add = [&](std::string name, Tensor x, Tensor y, Reduction red) {
    OpSample& s = samples::add_sample(out, std::move(name) + " " + reduction_name(red));
    s.attrs = LossAttrs{red, -100, 0};
    if (backward) {
      Shape gs = red == Reduction::none ? x.shape() : Shape{};
      s.inputs = {samples::uniform(gs, -1, 1, ++seed), x, y};
    } else {
      s.inputs = {x, y};
    }
    if (x.numel() > 1000) {
      s.tol = {{DType::f32, {1e-5, 1e-5}}};
      s.tol_note = "CUDA sums in f32 per thread and f64 across threads, in another order than the f64 reference";
    }
  };
  auto pair = [&](std::string name, Shape shape, Reduction red, bool transposed = false) {
    Tensor x = transposed ? samples::transposed(shape, -2, 2, ++seed) : samples::uniform(shape, -2, 2, ++seed);
    Tensor y = samples::uniform(shape, -2, 2, ++seed);
    add(std::move(name), x, y, red);
  };
  for (Reduction red : {Reduction::none, Reduction::mean, Reduction::sum}) {
    pair("[5, 6]", {5, 6}, red);
    pair("scalar", {}, red);
    pair("[7]", {7}, red);
    pair("[0] empty", {0}, red);
    pair("[1023]", {1023}, red);
    pair("transposed [6, 5]", {6, 5}, red, true);
    pair("[2^20+3]", {(1 << 20) + 3}, red);
  }
  pair("[300, 300] (multi-block)", {300, 300}, Reduction::mean);
  return out;
}

}  // namespace

std::vector<OpSample> samples_cross_entropy() { return class_loss_samples<true>(); }
std::vector<OpSample> samples_cross_entropy_backward() { return class_loss_backward_samples<true>(); }
std::vector<OpSample> samples_cross_entropy_with_grad() { return cross_entropy_with_grad_samples(); }
std::vector<OpSample> samples_nll_loss() { return class_loss_samples<false>(); }
std::vector<OpSample> samples_nll_loss_backward() { return class_loss_backward_samples<false>(); }
std::vector<OpSample> samples_mse_loss() { return mse_samples(false); }
std::vector<OpSample> samples_mse_loss_backward() { return mse_samples(true); }

}  // namespace ember
