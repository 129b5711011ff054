// oneDNN's CPU variants ("dnnl": kernels/ops/conv2d_dnnl.cpp, pool_dnnl.cpp, matmul_dnnl.cpp,
// batch_norm_dnnl.cpp): registration, selection by the backend preference ("vendor") and by
// autotune, supports() rules, and parity with the reference on MNIST- and ResNet-like shapes the
// small op samples do not reach (oneDNN's jit and brgemm kernels with blocked layouts take over from
// its reference code there), batch_norm's running statistics. The op samples themselves run
// through every dnnl variant in tests/test_ops.cpp (variant_parity).
#include <catch2/catch.hpp>

#include <algorithm>

#include "kernels/autotune.h"
#include "kernels/functional.h"
#include "kernels/ops/batch_norm.h"        // BatchNormAttrs
#include "kernels/ops/conv2d.h"            // Conv2dAttrs
#include "kernels/common/memory_format.h"  // channels_last_strides
#include "kernels/ops/pool.h"              // PoolAttrs
#include "kernels/registry.h"
#include "tests/op_driver.h"

using namespace ember;

#if EMBER_WITH_DNNL

namespace {

const Variant* cpu_variant(OpId op, const std::string& name) {
  for (const Variant& v : op_info(op).variants)
    if (v.device == DeviceType::cpu && v.name == name) return &v;
  return nullptr;
}

// A call as the runner makes it: outputs allocated from infer().
struct Call {
  OpId op;
  std::vector<Tensor> in, out;
  Attrs attrs;
  Call(OpId id, std::vector<Tensor> inputs, Attrs a) : op(id), in(std::move(inputs)), attrs(a) {
    for (const TensorSpec& s : op_info(op).infer(in, attrs))
      out.push_back(s.strides.size() > 0 ? empty_strided(s.shape, s.strides, TensorOptions(s.dtype))
                                         : empty(s.shape, TensorOptions(s.dtype)));
  }
  KernelCall call() { return KernelCall{op, in, out, attrs}; }
};

// oneDNN's bf16 kernels need AVX-512 (its avx512_core ISA); on a CPU without it (an AMD EPYC VM
// without AVX-512, 2026-11-30) oneDNN has no bf16 implementation for these shapes, the dnnl
// variants refuse the calls and ember's kernels run. So a bf16 case is skipped only there, and
// only when the variant refuses; with AVX-512 it must be taken.
bool bf16_refusal_allowed(DType dt) {
#if defined(__x86_64__)
  const bool avx512_core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  const bool avx512_core = false;
#endif
  return dt == DType::bf16 && !avx512_core;
}

struct BackendGuard {  // restores the default preference of the ops a test changes
  std::vector<OpId> ops;
  ~BackendGuard() {
    for (OpId op : ops) set_backend(op, "default");
  }
};

Tensor channels_last(const Tensor& t) {
  Tensor o = empty_strided(t.shape(), channels_last_strides(t.shape()), TensorOptions(t.dtype()));
  o.copy_(t);
  return o;
}

}  // namespace

TEST_CASE("dnnl: vendor variants are registered for conv2d, its gradients and avg pooling", "[dnnl]") {
  for (OpId op : {OpId::conv2d, OpId::conv2d_backward_input, OpId::conv2d_backward_weight, OpId::avg_pool2d,
                  OpId::avg_pool2d_backward}) {
    INFO(op_info(op).name);
    const Variant* v = cpu_variant(op, "dnnl");
    REQUIRE(v != nullptr);
    CHECK((v->flags & kVendor) != 0);
    CHECK(v->dtypes.has(DType::f32));
    CHECK(v->dtypes.has(DType::bf16));
    CHECK_FALSE(v->dtypes.has(DType::f64));  // oneDNN has no f64: the hand-written variants run
  }
  // max pooling: oneDNN's argmax workspace is not ember's h * W + w indices (pool_dnnl.cpp)
  CHECK(cpu_variant(OpId::max_pool2d, "dnnl") == nullptr);
}

TEST_CASE("dnnl: the default stays hand-written, set_backend(vendor) picks dnnl for conv2d on the CPU", "[dnnl]") {
  BackendGuard guard{{OpId::conv2d, OpId::conv2d_backward_input, OpId::conv2d_backward_weight}};
  Tensor x = randn({2, 3, 9, 9}), w = randn({4, 3, 3, 3}), b = randn({4});
  Call c(OpId::conv2d, {x, w, b}, Conv2dAttrs{Conv2dFuncOptions().set_padding(1)});
  const OpInfo& info = op_info(OpId::conv2d);
  CHECK(select_variant(info, c.call(), DeviceType::cpu).name != "dnnl");
  set_backend(OpId::conv2d, "vendor");
  CHECK(select_variant(info, c.call(), DeviceType::cpu).name == "dnnl");

  // ... and the functional call runs it, with the reference's answer
  const Variant* dnnl = cpu_variant(OpId::conv2d, "dnnl");
  REQUIRE(dnnl != nullptr);
  const uint64_t before = variant_runs(*dnnl, DType::f32);
  Tensor y = conv2d(x, w, b, Conv2dFuncOptions().set_padding(1));
  CHECK(variant_runs(*dnnl, DType::f32) == before + 1);
  set_backend(OpId::conv2d, "naive");
  Tensor want = conv2d(x, w, b, Conv2dFuncOptions().set_padding(1));
  CHECK(testing::compare(y, want, {1e-5, 1e-5}) == "");

  // f64: dnnl does not accept it, so even "vendor" falls back to the hand-written default
  set_backend(OpId::conv2d, "vendor");
  Call c64(OpId::conv2d, {x.to(DType::f64), w.to(DType::f64), b.to(DType::f64)},
           Conv2dAttrs{Conv2dFuncOptions().set_padding(1)});
  const Variant* plain = info.default_variant(c64.call(), DeviceType::cpu);
  REQUIRE(plain != nullptr);
  CHECK(select_variant(info, c64.call(), DeviceType::cpu).name == plain->name);

  // set_backends' string form, as mnist_train --backends passes it
  set_backends("conv2d=vendor,conv2d_backward_input=vendor,conv2d_backward_weight=vendor");
  Tensor xg = randn({2, 3, 9, 9});
  xg.requires_grad_();
  Tensor wg = randn({4, 3, 3, 3});
  wg.requires_grad_();
  const Variant* dx = cpu_variant(OpId::conv2d_backward_input, "dnnl");
  const Variant* dw = cpu_variant(OpId::conv2d_backward_weight, "dnnl");
  REQUIRE(dx != nullptr);
  REQUIRE(dw != nullptr);
  const uint64_t dx0 = variant_runs(*dx, DType::f32), dw0 = variant_runs(*dw, DType::f32);
  sum(conv2d(xg, wg, Tensor(), Conv2dFuncOptions().set_padding(1))).backward();
  CHECK(variant_runs(*dx, DType::f32) == dx0 + 1);
  CHECK(variant_runs(*dw, DType::f32) == dw0 + 1);
}

// The candidates the registry handed to the autotune hook on its last call.
std::vector<std::string> g_candidates;
const Variant* record_candidates(const OpInfo& info, const KernelCall& c, std::span<const Variant* const> cands) {
  g_candidates.clear();
  for (const Variant* v : cands) g_candidates.push_back(v->name);
  return autotune::choose(info, c, cands);
}

TEST_CASE("dnnl: autotune gets dnnl beside the hand-written conv2d variants and times it", "[dnnl][autotune]") {
  BackendGuard guard{{OpId::conv2d}};
  autotune::set_cache_file("");
  autotune::clear();
  autotune::reset_stats();
  autotune::set_runs(1, 2);
  const OpInfo& info = op_info(OpId::conv2d);
  const Variant* dnnl = cpu_variant(OpId::conv2d, "dnnl");
  const Variant* naive = cpu_variant(OpId::conv2d, "naive");
  REQUIRE(dnnl != nullptr);
  REQUIRE(naive != nullptr);
  Tensor w = randn({16, 16, 3, 3});
  const Conv2dFuncOptions o = Conv2dFuncOptions().set_padding(1);

  // The registry's "auto" preference offers every non-reference variant that accepts the call:
  // dnnl and ember's own (which ones win is the machine's business, not the test's).
  set_autotune_hook(record_candidates);
  set_backend(OpId::conv2d, "auto");
  Tensor x = randn({2, 16, 12, 12});
  Tensor y = conv2d(x, w, Tensor(), o);
  autotune::install();  // the real hook again
  CHECK(std::find(g_candidates.begin(), g_candidates.end(), "dnnl") != g_candidates.end());
  CHECK(std::find(g_candidates.begin(), g_candidates.end(), "im2col") != g_candidates.end());
  CHECK(std::find(g_candidates.begin(), g_candidates.end(), "naive") == g_candidates.end());  // kReference
  CHECK(autotune::stats().tunings == 1);
  CHECK(autotune::stats().failures == 0);  // dnnl ran under the tuner's timing loop without throwing
  std::string winner;
  for (const autotune::Entry& e : autotune::entries()) winner = e.variant;
  CHECK(std::find(g_candidates.begin(), g_candidates.end(), winner) != g_candidates.end());
  WARN("autotune picked " << winner << " for conv2d [2,16,12,12] x [16,16,3,3] (2-core dev VM)");
  set_backend(OpId::conv2d, "naive");
  CHECK(testing::compare(y, conv2d(x, w, Tensor(), o), {1e-4, 1e-4}) == "");

  // The tuner times a dnnl-only or mixed candidate list like any other and returns one of them.
  Call c(OpId::conv2d, {randn({4, 16, 16, 16}), w, Tensor()}, Conv2dAttrs{o});
  const Variant* pair[] = {naive, dnnl};
  const Variant* pick = autotune::choose(info, c.call(), pair);
  CHECK((pick == naive || pick == dnnl));
  CHECK(autotune::stats().failures == 0);
  autotune::clear();
  autotune::reset_stats();
  autotune::set_runs(2, 5);
}

TEST_CASE("dnnl: conv2d and its gradients match the reference on MNIST and ResNet-like shapes", "[dnnl]") {
  struct Shape4 {
    int64_t N, C, H, K, R, stride, pad, groups;
  };
  // MNIST CNN layers; a strided ResNet block; grouped + strided; 1x1
  const Shape4 shapes[] = {{8, 1, 28, 32, 5, 1, 2, 1},
                           {8, 32, 14, 64, 5, 1, 2, 1},
                           {2, 64, 16, 64, 3, 2, 1, 1},
                           {2, 32, 10, 64, 3, 1, 1, 4},
                           {2, 64, 8, 128, 1, 1, 0, 1}};
  for (const Shape4& s : shapes)
    for (DType dt : {DType::f32, DType::bf16})
      for (bool cl : {false, true}) {
        INFO("N " << s.N << " C " << s.C << " H " << s.H << " K " << s.K << " R " << s.R << " stride " << s.stride
                  << " groups " << s.groups << " " << dt << (cl ? " channels-last" : ""));
        const Conv2dFuncOptions o = Conv2dFuncOptions().set_stride(s.stride).set_padding(s.pad).set_groups(s.groups);
        Tensor x = randn({s.N, s.C, s.H, s.H}).to(dt), w = randn({s.K, s.C / s.groups, s.R, s.R}).to(dt),
               b = randn({s.K}).to(dt);
        if (cl) {
          x = channels_last(x);
          w = channels_last(w);
        }
        const ConvGeom g = conv_geometry("conv2d", x.shape(), w.shape(), Conv2dAttrs{o});
        Tensor gy = randn({s.N, s.K, g.P, g.Q}).to(dt);
        if (cl) gy = channels_last(gy);
        // f32 against the reference's double sums: the error of an f32 sum grows with its length
        // (unit-variance terms; partial sums of size sqrt(n), each add rounding at 6e-8 of that), so
        // atol scales with the longest reduction: C R S for the forward and backward_input, N P Q
        // (6272 on the first shape, observed error 1.6e-4) for backward_weight. bf16: one rounding
        // of the f32 sum on each side (PyTorch's bf16 tolerance, atol for values near zero).
        const double n_red = std::max<double>(s.C / s.groups * s.R * s.R, s.N * g.P * g.Q);
        const Tol tol = dt == DType::f32 ? Tol{1e-4, std::max(1e-4, 1e-7 * n_red)} : Tol{1.6e-2, 1e-2};
        struct OpCase {
          OpId op;
          std::vector<Tensor> in;
          Conv2dAttrs attrs;
        };
        const OpCase cases[] = {{OpId::conv2d, {x, w, b}, Conv2dAttrs{o}},
                                {OpId::conv2d_backward_input, {gy, w}, Conv2dAttrs{o, {g.H, g.W}}},
                                {OpId::conv2d_backward_weight, {gy, x}, Conv2dAttrs{o, {g.R, g.S}}}};
        for (const OpCase& oc : cases) {
          INFO(op_info(oc.op).name);
          const Variant* d = cpu_variant(oc.op, "dnnl");
          const Variant* ref = cpu_variant(oc.op, "naive");
          REQUIRE(d != nullptr);
          REQUIRE(ref != nullptr);
          Call probe(oc.op, oc.in, oc.attrs);
          if (bf16_refusal_allowed(dt) && !d->accepts(probe.call())) continue;
          REQUIRE(d->accepts(probe.call()));
          std::vector<Tensor> got = call_variant(*d, oc.op, oc.in, oc.attrs);
          std::vector<Tensor> want = call_variant(*ref, oc.op, oc.in, oc.attrs);
          CHECK(got[0].is_channels_last() == want[0].is_channels_last());
          CHECK(testing::compare(got[0].to(DType::f32), want[0].to(DType::f32), tol) == "");
        }
      }
}

TEST_CASE("dnnl: avg_pool2d and its gradient match the reference, bf16 gradients of overlapping windows are refused",
          "[dnnl]") {
  for (bool cl : {false, true})
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO(dt << (cl ? " channels-last" : ""));
      Tensor x = randn({4, 32, 28, 28}).to(dt);
      if (cl) x = channels_last(x);
      for (int64_t include : {0, 1}) {
        PoolAttrs a{};
        a.kernel[0] = a.kernel[1] = 3;
        a.stride[0] = a.stride[1] = 2;
        a.padding[0] = a.padding[1] = 1;
        a.count_include_pad = include;
        const Tol tol = dt == DType::f32 ? Tol{1e-5, 1e-5} : Tol{1.6e-2, 1e-5};
        const Variant* d = cpu_variant(OpId::avg_pool2d, "dnnl");
        const Variant* ref = cpu_variant(OpId::avg_pool2d, "cpu");
        REQUIRE(d != nullptr);
        Call fwd(OpId::avg_pool2d, {x}, a);
        if (bf16_refusal_allowed(dt) && !d->accepts(fwd.call())) continue;
        std::vector<Tensor> got = call_variant(*d, OpId::avg_pool2d, {x}, a);
        std::vector<Tensor> want = call_variant(*ref, OpId::avg_pool2d, {x}, a);
        CHECK(testing::compare(got[0].to(DType::f32), want[0].to(DType::f32), tol) == "");

        Tensor gy = randn(want[0].shape()).to(dt);
        if (cl) gy = channels_last(gy);
        PoolAttrs ab = a;
        ab.size[0] = ab.size[1] = 28;
        const Variant* db = cpu_variant(OpId::avg_pool2d_backward, "dnnl");
        REQUIRE(db != nullptr);
        Call probe(OpId::avg_pool2d_backward, {gy}, ab);
        // 3x3 windows at stride 2 overlap: bf16 gradients are left to ember (pool_dnnl.cpp)
        CHECK(db->accepts(probe.call()) == (dt != DType::bf16));
        if (dt == DType::bf16) continue;
        got = call_variant(*db, OpId::avg_pool2d_backward, {gy}, ab);
        want = call_variant(*cpu_variant(OpId::avg_pool2d_backward, "cpu"), OpId::avg_pool2d_backward, {gy}, ab);
        CHECK(testing::compare(got[0], want[0], tol) == "");
      }
    }
}

TEST_CASE("dnnl: matmul variant: vendor picks it for 2-D and same-batch 3-D, broadcast batches stay ember's",
          "[dnnl]") {
  BackendGuard guard{{OpId::matmul}};
  const OpInfo& info = op_info(OpId::matmul);
  const Variant* d = cpu_variant(OpId::matmul, "dnnl");
  const Variant* ref = cpu_variant(OpId::matmul, "cpu");
  REQUIRE(d != nullptr);
  REQUIRE(ref != nullptr);
  CHECK((d->flags & kVendor) != 0);
  set_backend(OpId::matmul, "vendor");
  // an MLP layer's shapes, with the weight read transposed in place as linear's backward does
  Tensor x = randn({64, 784}), w = randn({128, 784});
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dt);
    Tensor a = x.to(dt), b = w.to(dt).transpose(0, 1);
    Call c(OpId::matmul, {a, b}, Attrs());
    if (bf16_refusal_allowed(dt) && !d->accepts(c.call())) continue;
    CHECK(select_variant(info, c.call(), DeviceType::cpu).name == "dnnl");
    std::vector<Tensor> got = call_variant(*d, OpId::matmul, {a, b});
    std::vector<Tensor> want = call_variant(*ref, OpId::matmul, {a, b});
    // K = 784 products per output: f32 sums in another order; bf16 rounds the f32 sum once
    const Tol tol = dt == DType::f32 ? Tol{1e-4, 1e-4} : Tol{1.6e-2, 1e-2};
    CHECK(testing::compare(got[0].to(DType::f32), want[0].to(DType::f32), tol) == "");
  }
  Call batched(OpId::matmul, {randn({3, 5, 7}), randn({3, 7, 4})}, Attrs());
  CHECK(d->accepts(batched.call()));
  Call broadcast(OpId::matmul, {randn({3, 5, 7}), randn({1, 7, 4})}, Attrs());
  CHECK_FALSE(d->accepts(broadcast.call()));
  CHECK(select_variant(info, broadcast.call(), DeviceType::cpu).name == "cpu_blocked");
}

TEST_CASE("dnnl: batch_norm forward matches the CPU kernel, running statistics included", "[dnnl][bn]") {
  const Variant* d = cpu_variant(OpId::batch_norm, "dnnl");
  const Variant* ref = cpu_variant(OpId::batch_norm, "cpu");
  REQUIRE(d != nullptr);
  REQUIRE(ref != nullptr);
  CHECK(cpu_variant(OpId::batch_norm_backward, "dnnl") == nullptr);  // oneDNN's backward wants the variance
  for (DType dt : {DType::f32, DType::bf16})
    for (bool cl : {false, true})
      for (int64_t training : {1, 0}) {
        INFO(dt << (cl ? " channels-last" : "") << (training ? " training" : " eval"));
        Tensor x = (randn({16, 32, 14, 14}) * 2.0 + 0.5).to(dt);
        if (cl) x = channels_last(x);
        Tensor w = rand({32}), b = randn({32});
        Tensor rm0 = randn({32}) * 0.1, rv0 = rand({32}) + 0.5;
        BatchNormAttrs a{};
        a.training = training;
        Tensor rm_d = rm0.clone(), rv_d = rv0.clone(), rm_r = rm0.clone(), rv_r = rv0.clone();
        Call probe(OpId::batch_norm, {x, w, b, rm_d, rv_d}, a);
        if (bf16_refusal_allowed(dt) && !d->accepts(probe.call())) continue;
        std::vector<Tensor> got = call_variant(*d, OpId::batch_norm, {x, w, b, rm_d, rv_d}, a);
        std::vector<Tensor> want = call_variant(*ref, OpId::batch_norm, {x, w, b, rm_r, rv_r}, a);
        // f32: oneDNN's fp32 sums over M = 3136 values against the reference's double sums (the op
        // samples' own f32 tolerance); bf16: y is rounded to bf16 once on each side
        const Tol tol = dt == DType::f32 ? Tol{1e-5, 1e-5} : Tol{1.6e-2, 1e-2};
        CHECK(got[0].is_channels_last() == want[0].is_channels_last());
        CHECK(testing::compare(got[0].to(DType::f32), want[0].to(DType::f32), tol) == "");
        CHECK(testing::compare(got[1], want[1], {1e-5, 1e-5}) == "");  // mean (f32 either way)
        CHECK(testing::compare(got[2], want[2], {1e-5, 1e-5}) == "");  // invstd
        CHECK(testing::compare(rm_d, rm_r, {1e-5, 1e-6}) == "");
        CHECK(testing::compare(rv_d, rv_r, {1e-5, 1e-6}) == "");
      }
}

#else

TEST_CASE("dnnl: not built (EMBER_DNNL=OFF), no dnnl variants registered", "[dnnl]") {
  WARN("oneDNN tests skipped: this build has no oneDNN (Debian: libdnnl-dev, then reconfigure)");
  for (const OpInfo& info : all_ops())
    for (const Variant& v : info.variants) CHECK(v.name != "dnnl");
}

#endif
