// Convolution, pooling and batch norm on a GPU, beyond the generic per-sample parity tests: the
// large shapes that reach split-K / multi-split paths (MNIST at batch 64, ResNet-like channel
// counts), running statistics updated on the device, mixed-precision batch norm, deterministic
// variant selection, and a CNN training step that matches the CPU.
#include <cstring>
#include <functional>

#include <catch2/catch.hpp>

#include "ember.h"
#include "kernels/common/memory_format.h"
#include "kernels/ops/conv2d.h"  // Conv2dAttrs
#include "kernels/registry.h"
#include "tests/bn_count_check.h"
#include "tests/launch_count_util.h"
#include "tests/op_driver.h"

using namespace ember;

namespace {

// Every CUDA variant of `op` on `inputs` (CPU tensors in the test dtype) against the CPU default.
void all_variants_match(OpId op, const std::vector<Tensor>& inputs, const Attrs& attrs, Tol tol) {
  const OpInfo& info = op_info(op);
  std::vector<Tensor> want = call(op, inputs, attrs);
  std::vector<Tensor> din;
  for (const Tensor& t : inputs) din.push_back(testing::to_device_same_layout(t, kCUDA));
  int ran = 0;
  for (const Variant& v : info.variants) {
    if (v.device != DeviceType::cuda || (v.flags & kReference)) continue;
    std::vector<TensorSpec> specs = info.infer(din, attrs);
    std::vector<Tensor> probe_out;
    for (const TensorSpec& sp : specs) probe_out.push_back(empty({0}, TensorOptions(sp.dtype)));
    KernelCall probe{op, din, probe_out, attrs};
    if (!v.accepts(probe)) continue;
    INFO(info.name << " variant " << v.name);
    std::vector<Tensor> got = call_variant(v, op, din, attrs);
    ++ran;
    for (size_t k = 0; k < want.size(); ++k) {
      std::string msg = testing::compare(got[k].to(kCPU), want[k], tol);
      CHECK(msg == "");
    }
  }
  CHECK(ran > 0);
}

}  // namespace

TEST_CASE("conv2d variants at MNIST batch 64 (split-K and multi-block paths)", "[gpu][conv]") {
  // Batch 32 in the simulator (146 s under ASan at 64): the weight gradients' reductions over
  // (n, p, q) are still long enough to split over K, and the direct kernels still shrink their
  // channel blocks to give the SMs enough blocks.
  const int64_t n = testing::kSimulator ? 32 : 64;
  for (DType dt : {DType::f32, DType::bf16}) {
    Tol tol = dt == DType::f32 ? Tol{1e-4, 1e-3} : Tol{2e-2, 2e-2};
    INFO("dtype " << dt);
    Conv2dFuncOptions o = Conv2dFuncOptions().set_padding(1);
    Tensor x1 = uniform({n, 1, 28, 28}, -1, 1).to(dt), w1 = uniform({32, 1, 3, 3}, -1, 1).to(dt);
    Tensor x2 = uniform({n, 32, 14, 14}, -1, 1).to(dt), w2 = uniform({64, 32, 3, 3}, -1, 1).to(dt);
    Tensor b2 = uniform({64}, -1, 1).to(dt);
    all_variants_match(OpId::conv2d, {x1, w1, Tensor()}, Conv2dAttrs{o}, tol);
    all_variants_match(OpId::conv2d, {x2, w2, b2}, Conv2dAttrs{o}, tol);
    Tensor g2 = uniform({n, 64, 14, 14}, -1, 1).to(dt);
    all_variants_match(OpId::conv2d_backward_input, {g2, w2}, Conv2dAttrs{o, {14, 14}}, tol);
    all_variants_match(OpId::conv2d_backward_weight, {g2, x2}, Conv2dAttrs{o, {3, 3}}, tol);
    Tensor g1 = uniform({n, 32, 28, 28}, -1, 1).to(dt);
    // conv1 as the CNN runs it, with its bias gradient (Note [conv bias gradient])
    all_variants_match(OpId::conv2d_backward_weight, {g1, x1}, Conv2dAttrs{o, {3, 3}, 1}, tol);
  }
}

TEST_CASE("conv2d variants on ResNet-like channel counts, NCHW and channels-last", "[gpu][conv]") {
  // One image in the simulator (testing::kSimulator): the channel counts make the tiles and K
  // slices this test is about; four images only make it four times slower under ASan (323 s).
  const int64_t n = testing::kSimulator ? 1 : 4;
  for (DType dt : {DType::f32, DType::f16}) {
    for (bool cl : {false, true}) {
      INFO("dtype " << dt << (cl ? " channels-last" : ""));
      Tol tol = dt == DType::f32 ? Tol{1e-4, 1e-3} : Tol{5e-3, 5e-3};
      Conv2dFuncOptions o = Conv2dFuncOptions().set_padding(1);
      Tensor x = contiguous_as(uniform({n, 64, 14, 14}, -1, 1).to(dt), cl);
      Tensor w = contiguous_as(uniform({128, 64, 3, 3}, -0.2, 0.2).to(dt), cl);
      Tensor g = contiguous_as(uniform({n, 128, 14, 14}, -1, 1).to(dt), cl);
      all_variants_match(OpId::conv2d, {x, w, Tensor()}, Conv2dAttrs{o}, tol);
      all_variants_match(OpId::conv2d_backward_input, {g, w}, Conv2dAttrs{o, {14, 14}}, tol);
      all_variants_match(OpId::conv2d_backward_weight, {g, x}, Conv2dAttrs{o, {3, 3}}, tol);
      // 1x1 stride 2 (a ResNet downsample) and a grouped 3x3
      Conv2dFuncOptions o2 = Conv2dFuncOptions().set_stride(2);
      Tensor w2 = contiguous_as(uniform({96, 64, 1, 1}, -0.2, 0.2).to(dt), cl);
      all_variants_match(OpId::conv2d, {x, w2, Tensor()}, Conv2dAttrs{o2}, tol);
      Conv2dFuncOptions o3 = Conv2dFuncOptions().set_padding(1).set_groups(4);
      Tensor w3 = contiguous_as(uniform({64, 16, 3, 3}, -0.3, 0.3).to(dt), cl);
      all_variants_match(OpId::conv2d, {x, w3, Tensor()}, Conv2dAttrs{o3}, tol);
    }
  }
}

TEST_CASE("deterministic mode never picks a nondeterministic cuDNN algorithm", "[gpu][conv]") {
  Tensor g = uniform({8, 16, 10, 10}, -1, 1, kCUDA), x = uniform({8, 8, 10, 10}, -1, 1, kCUDA);
  const Conv2dAttrs a{Conv2dFuncOptions().set_padding(1), {3, 3}};
  const OpInfo& info = op_info(OpId::conv2d_backward_weight);
  std::vector<Tensor> in{g, x};
  std::vector<Tensor> out{empty({16, 8, 3, 3}, kCUDA)};
  KernelCall c{OpId::conv2d_backward_weight, in, out, a};
  set_backend(OpId::conv2d_backward_weight, "cudnn_nondet");
  set_deterministic(true);
  const Variant& v = select_variant(info, c, DeviceType::cuda);
  CHECK((v.flags & kNondeterministic) == 0);
  set_deterministic(false);
  set_backend(OpId::conv2d_backward_weight, "default");
}

TEST_CASE("batch_norm on the GPU updates the running statistics like the CPU", "[gpu][bn]") {
  for (bool cl : {false, true}) {
    INFO((cl ? "channels-last" : "NCHW"));
    Tensor x = contiguous_as(uniform({64, 32, 14, 14}, -2, 3), cl);
    Tensor w = uniform({32}, 0.5, 1.5), b = uniform({32}, -1, 1);
    Tensor rm = uniform({32}, -0.5, 0.5), rv = uniform({32}, 0.5, 2);
    Tensor rm_d = rm.to(kCUDA), rv_d = rv.to(kCUDA);
    Tensor y = batch_norm(x, w, b, rm, rv, true, 0.2, 1e-5);
    Tensor y_d = batch_norm(x.to(kCUDA), w.to(kCUDA), b.to(kCUDA), rm_d, rv_d, true, 0.2, 1e-5);
    CHECK(y_d.is_channels_last() == cl);
    CHECK(testing::compare(y_d.to(kCPU), y, {1e-5, 1e-5}) == "");
    CHECK(testing::compare(rm_d.to(kCPU), rm, {1e-5, 1e-6}) == "");
    CHECK(testing::compare(rv_d.to(kCPU), rv, {1e-5, 1e-6}) == "");
  }
}

// Every CUDA variant counts when training (Note [batch norm counts its batches]), and a training
// BatchNorm2d launches what the op alone launches (its counter's add was a launch of its own).
TEST_CASE("batch_norm counts its batches in the op's launch on the GPU", "[gpu][bn]") {
  CHECK(test::check_bn_counts(kCUDA) >= 6);
  CHECK_THROWS_WITH(batch_norm(zeros({4, 3}, kCUDA), {}, {}, zeros({3}, kCUDA), ones({3}, kCUDA), true, 0.1, 1e-5,
                               zeros({}, DType::i64)),
                    Catch::Contains("input 5 is i64[] on cpu"));
  nn::BatchNorm2d bn(nn::BatchNormOptions(8));
  bn->to(kCUDA);
  Tensor x = uniform({4, 8, 6, 6}, -1, 1, kCUDA);
  bn(x);  // warm-up: the variants' first calls
  const size_t module = test::kernels_launched_by([&] { bn(x); });
  const size_t op = test::kernels_launched_by([&] {
    Tensor rm = bn->running_mean, rv = bn->running_var;
    batch_norm(x, bn->weight, bn->bias, rm, rv, true, 0.1, 1e-5);
  });
  CHECK(module == op);
  CHECK(bn->num_batches_tracked.item() == 1);  // the captured calls never ran
  bn(x);
  CHECK(bn->num_batches_tracked.item() == 2);
}

#if EMBER_WITH_CUDA
// Each direction of a training batch norm is one launch where the stream has tickets (Note [batch
// norm in one launch]): a capture on a stream without tickets yet takes each direction's two
// kernels, two kernels more, and gives the same outputs, running statistics and gradients bit for
// bit; planar, channels-last and 2-D x, and the max pooled and averaged forms (their own kernels).
TEST_CASE("cuda batch_norm: each direction is one launch, bit for bit its two kernels", "[gpu][bn]") {
  manual_seed(21);
  enum class Form { plain, max_pool, avg_pool };
  struct Case {
    const char* name;
    Shape x;
    bool channels_last;
    Form form;
  };
  const std::vector<Case> cases = {{"NCHW", {8, 6, 10, 10}, false, Form::plain},
                                   {"channels-last", {8, 6, 10, 10}, true, Form::plain},
                                   {"2-D", {64, 12}, false, Form::plain},
                                   {"max pooled, relu", {8, 6, 10, 10}, false, Form::max_pool},
                                   {"averaged, relu", {8, 6, 10, 10}, false, Form::avg_pool}};
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (const Case& k : cases) {
      INFO(dt << " " << k.name);
      const TensorOptions o = TensorOptions(dt).device(kCUDA);
      Tensor x = contiguous_as(uniform(k.x, -2, 2, o), k.channels_last);
      const Tensor w = uniform({k.x[1]}, 0.5, 1.5, o), b = uniform({k.x[1]}, -0.5, 0.5, o);
      const Tensor rm0 = uniform({k.x[1]}, -0.1, 0.1, o), rv0 = uniform({k.x[1]}, 0.9, 1.1, o);
      Tensor y0 = k.form == Form::max_pool   ? empty({8, 6, 5, 5}, o)
                  : k.form == Form::avg_pool ? empty({8, 6, 1, 1}, o)
                                             : empty(k.x, o);
      const Tensor g = uniform(y0.shape(), -1, 1, o);
      // the step: forward and backward from fresh copies of the running statistics
      struct Result {
        Tensor y, rm, rv, dx, dw, db;
      };
      auto step = [&](Result& r) {
        Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_(), bg = b.detach().requires_grad_();
        r.rm = rm0.clone();
        r.rv = rv0.clone();
        if (k.form == Form::max_pool)
          r.y = batch_norm_max_pool2d(xg, wg, bg, r.rm, r.rv, true, 0.1, 1e-5, {2, 2}, {2, 2}, {0, 0}, true);
        else if (k.form == Form::avg_pool)
          r.y = batch_norm_global_avg_pool2d(xg, wg, bg, r.rm, r.rv, true, 0.1, 1e-5, true);
        else r.y = batch_norm(xg, wg, bg, r.rm, r.rv, true, 0.1, 1e-5);
        r.y.backward(g);
        r.dx = xg.grad();
        r.dw = wg.grad();
        r.db = bg.grad();
      };
      Result one, two;
      step(one);  // warm-up (allocations, the variants' first calls)
      const size_t ticketed = test::kernels_launched_by([&] { step(one); });
      step(one);
      // the two kernels a direction: on a new stream, which has no tickets yet
      const size_t kernels = test::kernels_run_on_a_fresh_stream([&] { step(two); });
      CHECK(kernels == ticketed + 2);
      const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> outs = {
          {"y", {one.y, two.y}},    {"running mean", {one.rm, two.rm}}, {"running var", {one.rv, two.rv}},
          {"dx", {one.dx, two.dx}}, {"dweight", {one.dw, two.dw}},      {"dbias", {one.db, two.db}}};
      for (const auto& [what, pair] : outs) {
        INFO(what);
        const Tensor a = pair.first.contiguous().cpu(), c = pair.second.contiguous().cpu();
        REQUIRE(a.nbytes() == c.nbytes());
        CHECK(std::memcmp(a.data_ptr(), c.data_ptr(), a.nbytes()) == 0);
      }
    }
}
#endif

#if EMBER_WITH_CUDA
// Eval's forward is one launch (Note [batch norm in one launch]): y, mean and invstd as the CPU
// computes them from the running statistics, which stay untouched, in both layouts and 2-D; with a
// batch of nothing the kernel still writes the statistics.
TEST_CASE("cuda batch_norm: eval's forward is one launch", "[gpu][bn]") {
  manual_seed(24);
  const Variant* v = testing::find_variant(OpId::batch_norm, DeviceType::cuda, "cuda");
  REQUIRE(v != nullptr);
  const BatchNormAttrs a{0, 0.1, 1e-5};
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (const auto& [shape, cl] : std::vector<std::pair<Shape, bool>>{
             {{8, 6, 10, 10}, false}, {{8, 6, 10, 10}, true}, {{64, 12}, false}, {{0, 6, 4, 4}, false}}) {
      INFO(dt << " " << shape << (cl ? " channels-last" : ""));
      const DType sd = dt == DType::f64 ? DType::f64 : DType::f32;  // the statistics' dtype
      const TensorOptions o = TensorOptions(dt).device(kCUDA), so = TensorOptions(sd).device(kCUDA);
      const Tensor x = contiguous_as(uniform(shape, -2, 2, o), cl);
      const Tensor w = uniform({shape[1]}, 0.5, 1.5, so), b = uniform({shape[1]}, -0.5, 0.5, so);
      const Tensor rm = uniform({shape[1]}, -0.1, 0.1, so), rv = uniform({shape[1]}, 0.5, 1.5, so);
      const std::vector<Tensor> in{x, w, b, rm, rv};
      const Tensor rm0 = rm.cpu(), rv0 = rv.cpu();
      const std::vector<Tensor> got = call_variant(*v, OpId::batch_norm, in, a);
      CHECK(test::kernels_launched_by([&] { call_variant(*v, OpId::batch_norm, in, a); }) == 1);
      std::vector<Tensor> cin;
      for (const Tensor& t : in) cin.push_back(t.cpu());
      const std::vector<Tensor> want = call(OpId::batch_norm, cin, a);
      REQUIRE(got.size() == want.size());
      const Tol tol = dt == DType::f64 ? Tol{1e-12, 1e-12} : dt == DType::f32 ? Tol{1e-5, 1e-5} : Tol{1e-2, 1e-2};
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("output " << i);
        CHECK(testing::compare(got[i].contiguous().cpu(), want[i].contiguous(), tol) == "");
      }
      CHECK(testing::compare(rm.cpu(), rm0, Tol{0, 0}) == "");
      CHECK(testing::compare(rv.cpu(), rv0, Tol{0, 0}) == "");
    }
}
#endif

#if EMBER_WITH_CUDA
// The direct weight gradient sums its image splits in its own launch where the stream has tickets
// (Note [conv weight gradient in one launch]): one kernel, the same dW and db bit for bit as the
// two kernels a capture on a stream without tickets yet still runs, and the tickets back at 0 for
// the next call; 3x3 and 5x5, with and without the bias gradient.
TEST_CASE("cuda conv2d: the direct weight gradient is one launch, bit for bit its two", "[gpu][conv]") {
  manual_seed(22);
  const Variant* v = testing::find_variant(OpId::conv2d_backward_weight, DeviceType::cuda, "direct");
  REQUIRE(v != nullptr);
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t ks : {3, 5})
      for (int64_t bias : {0, 1}) {
        INFO(dt << " " << ks << "x" << ks << (bias ? " with db" : ""));
        const TensorOptions o = TensorOptions(dt).device(kCUDA);
        const int64_t pad = ks / 2;
        Tensor x = uniform({6, 4, 12, 12}, -1, 1, o), g = uniform({6, 16, 12, 12}, -1, 1, o);
        const Conv2dAttrs a{Conv2dFuncOptions().set_padding(pad), {ks, ks}, bias};
        const std::vector<Tensor> once = call_variant(*v, OpId::conv2d_backward_weight, {g, x}, a);
        CHECK(test::kernels_launched_by([&] { call_variant(*v, OpId::conv2d_backward_weight, {g, x}, a); }) == 1);
        const std::vector<Tensor> again = call_variant(*v, OpId::conv2d_backward_weight, {g, x}, a);
        std::vector<Tensor> two;
        for (const Tensor& t : once) two.push_back(empty(t.shape(), o));
        CHECK(test::kernels_run_on_a_fresh_stream([&] {
                call_variant_into(*v, OpId::conv2d_backward_weight, {g, x}, two, a);
              }) == 2);
        REQUIRE(once.size() == static_cast<size_t>(1 + bias));
        for (size_t i = 0; i < once.size(); ++i) {
          INFO((i == 0 ? "dW" : "db"));
          const Tensor want = once[i].cpu();
          CHECK(std::memcmp(again[i].cpu().data_ptr(), want.data_ptr(), want.nbytes()) == 0);
          CHECK(std::memcmp(two[i].cpu().data_ptr(), want.data_ptr(), want.nbytes()) == 0);
        }
      }
}
#endif

#if EMBER_WITH_CUDA
// The implicit-GEMM weight gradients add their split partials in the same launch, each tile's last
// block in split order (Note [wgrad split-K in one launch] in kernels/ops/conv2d_igemm.cu): one
// kernel, the same dW bit for bit as the GEMM and gemm::sum_splits that a capture on a stream
// without tickets yet still runs, and the tickets back at 0 for the next call (a ticket left
// behind would make no block the last, or the wrong one). Shapes whose reduction is split 8 to 16
// ways: both layouts, one group and two (the tickets are per tile of every group), both kernels.
TEST_CASE("cuda conv2d: the igemm weight gradient is one launch, bit for bit its two", "[gpu][conv]") {
  manual_seed(23);
  for (const char* name : {"igemm_simt", "igemm_mma"}) {
    const Variant* v = testing::find_variant(OpId::conv2d_backward_weight, DeviceType::cuda, name);
    REQUIRE(v != nullptr);
    const std::vector<DType> dtypes = std::string(name) == "igemm_simt" ? std::vector<DType>{DType::f32, DType::f64}
                                                                        : std::vector<DType>{DType::bf16};
    for (DType dt : dtypes)
      for (bool cl : {false, true})
        for (int64_t groups : {1, 2}) {
          INFO(name << " " << dt << (cl ? " channels-last" : "") << " groups " << groups);
          const TensorOptions o = TensorOptions(dt).device(kCUDA);
          Tensor x = contiguous_as(uniform({8, 8, 16, 16}, -1, 1, o), cl);
          Tensor g = contiguous_as(uniform({8, 32, 16, 16}, -1, 1, o), cl);
          const Conv2dAttrs a{Conv2dFuncOptions().set_padding(1).set_groups(groups), {3, 3}, 0};
          const std::vector<Tensor> once = call_variant(*v, OpId::conv2d_backward_weight, {g, x}, a);
          CHECK(test::kernels_launched_by([&] { call_variant(*v, OpId::conv2d_backward_weight, {g, x}, a); }) == 1);
          const std::vector<Tensor> again = call_variant(*v, OpId::conv2d_backward_weight, {g, x}, a);
          std::vector<Tensor> two{empty(once[0].shape(), o)};
          CHECK(test::kernels_run_on_a_fresh_stream([&] {
                  call_variant_into(*v, OpId::conv2d_backward_weight, {g, x}, two, a);
                }) == 2);
          const Tensor want = once[0].cpu();
          CHECK(std::memcmp(again[0].cpu().data_ptr(), want.data_ptr(), want.nbytes()) == 0);
          CHECK(std::memcmp(two[0].cpu().data_ptr(), want.data_ptr(), want.nbytes()) == 0);
          // and the CPU's result, within the dtype's rounding of a 2,048-term sum
          const Tensor ref = call1(OpId::conv2d_backward_weight, {g.cpu(), x.cpu()}, a);
          const Tol tol = dt == DType::f64 ? Tol{1e-9, 1e-9} : dt == DType::f32 ? Tol{1e-4, 1e-3} : Tol{2e-2, 2e-1};
          CHECK(testing::compare(want, ref, tol) == "");
        }
  }
}
#endif

TEST_CASE("batch_norm mixed precision on the GPU: bf16 activations, f32 parameters and statistics", "[gpu][bn]") {
  Tensor x = uniform({32, 16, 8, 8}, -2, 2).to(DType::bf16);
  Tensor w = uniform({16}, 0.5, 1.5), b = uniform({16}, -1, 1), rm = zeros({16}), rv = ones({16});
  Tensor rm_d = rm.to(kCUDA), rv_d = rv.to(kCUDA);
  Tensor xd = x.to(kCUDA).requires_grad_(), wd = w.to(kCUDA).requires_grad_(), bd = b.to(kCUDA).requires_grad_();
  Tensor y_d = batch_norm(xd, wd, bd, rm_d, rv_d, true);
  Tensor y = batch_norm(x, w, b, rm, rv, true);
  CHECK(y_d.dtype() == DType::bf16);
  CHECK(testing::compare(y_d.to(kCPU), y, {1.6e-2, 1e-2}) == "");
  CHECK(testing::compare(rm_d.to(kCPU), rm, {1e-5, 1e-6}) == "");
  sum(mul(y_d, y_d.detach())).backward();
  CHECK(wd.grad().dtype() == DType::f32);
  CHECK(xd.grad().dtype() == DType::bf16);
}

TEST_CASE("a CNN training step on the GPU matches the CPU", "[gpu][conv][bn][pool]") {
  Tensor x = uniform({16, 1, 28, 28}, 0, 1);
  Tensor w1 = uniform({32, 1, 3, 3}, -0.3, 0.3), b1 = zeros({32});
  Tensor w2 = uniform({64, 32, 3, 3}, -0.1, 0.1), b2 = zeros({64});
  auto run = [&](Device d) {
    // detach: on the CPU to() returns w1 itself, which must not become a leaf that requires grad
    Tensor xw1 = w1.to(d).detach().requires_grad_(), xw2 = w2.to(d).detach().requires_grad_();
    Tensor rm = zeros({32}, d), rv = ones({32}, d);
    const auto pad1 = Conv2dFuncOptions().set_padding(1);
    Tensor h = relu(batch_norm(conv2d(x.to(d), xw1, b1.to(d), pad1), Tensor(), Tensor(), rm, rv, true));
    h = max_pool2d(h, {2, 2});
    h = relu(conv2d(h, xw2, b2.to(d), pad1));
    h = adaptive_avg_pool2d(max_pool2d(h, {2, 2}), {1, 1});
    Tensor loss = sum(mul(h, h));
    loss.backward();
    return std::vector<Tensor>{loss.to(kCPU), xw1.grad().to(kCPU), xw2.grad().to(kCPU), rm.to(kCPU)};
  };
  std::vector<Tensor> cpu = run(kCPU), gpu = run(kCUDA);
  CHECK(testing::compare(gpu[0], cpu[0], {1e-4, 1e-4}) == "");
  CHECK(testing::compare(gpu[1], cpu[1], {1e-3, 1e-4}) == "");
  CHECK(testing::compare(gpu[2], cpu[2], {1e-3, 1e-4}) == "");
  CHECK(testing::compare(gpu[3], cpu[3], {1e-5, 1e-6}) == "");
}

#if EMBER_WITH_CUDA
namespace {

// The kernels a fused and a plain form of the same network launch, forward and backward.
struct FusedAndPlain {
  size_t fused_fwd = 0, fused_bwd = 0, plain_fwd = 0, plain_bwd = 0;
};

// Runs both networks (on the GPU, the same weights) on x with upstream gradient g, counts their
// launches (after a warm-up: allocations, the variants' first calls), and checks that their
// outputs and parameter gradients agree bit for bit.
FusedAndPlain compare_fused_and_plain(nn::Sequential& fused, nn::Sequential& plain, const Tensor& x, const Tensor& g) {
  auto run = [&](nn::Sequential& net, std::vector<Tensor>* results, size_t* fwd, size_t* bwd) {
    net->zero_grad();
    Tensor y;
    *fwd = test::kernels_launched_by([&] { y = net(x); });  // captured, never run: run it again
    y = net(x);
    *bwd = test::kernels_launched_by([&] { y.backward(g); });
    net->zero_grad();
    y = net(x);
    y.backward(g);
    results->clear();
    results->push_back(y.detach().cpu());
    for (const Tensor& p : net->parameters()) results->push_back(p.grad().cpu());
  };
  std::vector<Tensor> a, b;
  FusedAndPlain n;
  for (int pass = 0; pass < 2; ++pass) {
    run(fused, &a, &n.fused_fwd, &n.fused_bwd);
    run(plain, &b, &n.plain_fwd, &n.plain_bwd);
  }
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("result " << i << " (0: y, then the parameters' grads)");
    CHECK(a[i].to(DType::f64).to_vector<double>() == b[i].to(DType::f64).to_vector<double>());
  }
  return n;
}

// compare_fused_and_plain on two copies of make()'s net on CUDA in dt, every Sequential of the
// first with fuse_pool, none of the second's; their buffers (running statistics) must match too.
FusedAndPlain compare_pool_fusion(const std::function<nn::Sequential()>& make, DType dt, const Tensor& x,
                                  const Tensor& g) {
  nn::Sequential fused = make(), plain = make();
  plain->load_state_dict(fused->state_dict());
  for (nn::Sequential* s : {&fused, &plain}) {
    (*s)->to(kCUDA, dt);
    for (auto& [name, m] : (*s)->named_modules())
      if (auto* seq = dynamic_cast<nn::SequentialImpl*>(m.get())) seq->fuse_pool = s == &fused;
  }
  const FusedAndPlain n = compare_fused_and_plain(fused, plain, x.to(dt).cuda(), g.to(dt).cuda());
  for (const auto& [name, t] : fused->named_buffers()) {
    INFO(name);
    CHECK(t.to(DType::f64).cpu().to_vector<double>() ==
          plain->named_buffers().at(name).to(DType::f64).cpu().to_vector<double>());
  }
  return n;
}

// mnist_train's fast model's conv, batch norm, relu block.
nn::Sequential fast_block(int64_t cin, int64_t cout) {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(cin, cout, 3).padding(1).bias(false)), nn::BatchNorm2d(cout),
                        nn::ReLU());
}

}  // namespace

// A ReLU followed by a MaxPool2d runs as one max_pool2d with the relu fused (Note [relu after max
// pooling]): one launch fewer each way, with the same values and gradients.
TEST_CASE("cuda nn: a ReLU fused into the MaxPool2d after it saves a launch each way, bit for bit", "[gpu][pool]") {
  manual_seed(4);
  auto make = [] {
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(4 * 4 * 4, 3));
  };
  nn::Sequential fused = make(), plain = make();
  plain->load_state_dict(fused->state_dict());
  fused->fuse_pool = false;  // the conv on its own (the next test fuses it)
  plain->fuse_activations = false;
  for (nn::Sequential* s : {&fused, &plain}) (*s)->to(kCUDA);
  const FusedAndPlain n = compare_fused_and_plain(fused, plain, randn({4, 1, 8, 8}).cuda(), randn({4, 3}).cuda());
  CHECK(n.fused_fwd + 1 == n.plain_fwd);
  CHECK(n.fused_bwd + 1 == n.plain_bwd);
}

// A Conv2d, ReLU, MaxPool2d runs as one conv2d_max_pool2d (Note [fused layer and max pooling]):
// the direct forward pools its output before it stores it, and the direct kernels read the pooled
// gradient, so each such layer loses the pool's launch each way, with the same values and
// gradients bit for bit (the same sums of the same values, rounded alike).
TEST_CASE("cuda nn: the direct conv kernels pool and read the pooled gradient, bit for bit", "[gpu][conv][pool]") {
  manual_seed(6);
  auto make = [] {
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(4, 8, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(8 * 2 * 2, 3));
  };
  nn::Sequential fused = make(), plain = make();
  plain->load_state_dict(fused->state_dict());
  plain->fuse_pool = false;  // the relu still fused into the pool
  for (nn::Sequential* s : {&fused, &plain}) (*s)->to(kCUDA);
  const FusedAndPlain n = compare_fused_and_plain(fused, plain, randn({4, 1, 8, 8}).cuda(), randn({4, 3}).cuda());
  CHECK(n.fused_fwd + 2 == n.plain_fwd);  // conv and pool in one launch
  CHECK(n.fused_bwd + 2 == n.plain_bwd);  // no max_pool2d_backward
}

// A BatchNorm2d, ReLU, MaxPool2d at the end of a block and after it (mnist_train's fast model) runs
// as one batch_norm_max_pool2d (Note [max pooling in the batch norm backward]): the normalise kernel
// pools before it stores, and the backward's kernels read the pooled gradient, so each such block
// loses the pool's launch each way, with the same values, running statistics and gradients bit for
// bit, in every floating dtype.
TEST_CASE("cuda nn: batch norm pools its output and reads the pooled gradient, bit for bit", "[gpu][pool]") {
  manual_seed(9);
  auto make = [] {
    return nn::Sequential(fast_block(1, 4), nn::MaxPool2d(2), fast_block(4, 8), nn::MaxPool2d(2), nn::Flatten(),
                          nn::Linear(8 * 2 * 2, 3));
  };
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    INFO("dtype " << dt);
    const FusedAndPlain n = compare_pool_fusion(make, dt, randn({4, 1, 8, 8}), randn({4, 3}));
    CHECK(n.fused_fwd + 2 == n.plain_fwd);  // normalise and pool in one launch, twice
    CHECK(n.fused_bwd + 2 == n.plain_bwd);  // no max_pool2d_backward
  }
}

// mnist_train's fast model ends with conv, BatchNorm2d, ReLU, AdaptiveAvgPool2d(1): the batch norm,
// relu and average run as one batch_norm_global_avg_pool2d (Note [global average pooling in the
// batch norm backward]): the normalise kernel sums each plane, and the backward's kernels read the
// averaged gradient and recompute the relu's mask, so that block loses the relu's and the average's
// launches each way, with the same values, running statistics and gradients bit for bit, in every
// floating dtype, for planes summed across lanes (16 values and more) and serially (fewer).
TEST_CASE("cuda nn: batch norm averages its planes and reads the averaged gradient, bit for bit", "[gpu][pool]") {
  manual_seed(10);
  auto make = [] {
    return nn::Sequential(fast_block(1, 4), nn::MaxPool2d(2), fast_block(4, 8), nn::AdaptiveAvgPool2d(1), nn::Flatten(),
                          nn::Linear(8, 3));
  };
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (int64_t side : {4, 8}) {  // 2x2 planes (serial), then 4x4 (across lanes)
      INFO("dtype " << dt << ", planes " << side / 2 << "x" << side / 2);
      const FusedAndPlain n = compare_pool_fusion(make, dt, randn({4, 1, side, side}), randn({4, 3}));
      CHECK(n.fused_fwd + 3 == n.plain_fwd);  // the first block's pool; the last block's relu and average
      CHECK(n.fused_bwd + 3 == n.plain_bwd);  // no max_pool2d_backward, relu backward or average backward
    }
  }
}

// A conv layer's bias gradient comes out of its weight gradient's kernels (Note [conv bias
// gradient]): the backward of a biased conv launches no more kernels than an unbiased one (the sum
// op took two or three more), and db is grad_output summed over (n, p, q).
TEST_CASE("cuda conv2d: the bias gradient costs no launch of its own", "[gpu][conv]") {
  manual_seed(5);
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO("dtype " << dt);
    Tensor x = randn({6, 3, 12, 12}).to(dt).cuda(), g = randn({6, 8, 12, 12}).to(dt).cuda();
    Tensor w = randn({8, 3, 3, 3}).to(dt).cuda().requires_grad_(), b = randn({8}).to(dt).cuda().requires_grad_();
    auto backward_launches = [&](const Tensor& bias) {
      w.reset_grad();  // no accumulation into an earlier .grad
      b.reset_grad();
      Tensor y = conv2d(x, w, bias, Conv2dFuncOptions().set_padding(1));
      return test::kernels_launched_by([&] { y.backward(g); });
    };
    backward_launches(b);  // warm-up (allocations, the variants' first calls)
    backward_launches(Tensor());
    const size_t with_bias = backward_launches(b), without = backward_launches(Tensor());
    CHECK(with_bias == without);
    w.reset_grad();
    b.reset_grad();
    conv2d(x, w, b, Conv2dFuncOptions().set_padding(1)).backward(g);
    Tensor want = sum(g.to(DType::f64), {0, 2, 3}).cpu();
    Tol tol = dt == DType::f32 ? Tol{1e-4, 1e-5} : Tol{2e-2, 2e-2};
    CHECK(testing::compare(b.grad().to(DType::f64).cpu(), want, tol) == "");
  }
}
#endif
