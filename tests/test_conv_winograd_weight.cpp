// conv2d_backward_weight's "winograd" CPU variant (kernels/ops/conv2d_cpu.cpp, Note [conv winograd
// weight gradient]) against the naive reference: shapes that reach several blocks of tiles, several
// thread chunks, groups, padding 0/1/2 and odd output sizes, in every float dtype; and which
// variant the default picks for MNIST's two conv layers.
#include <catch2/catch.hpp>

#include "core/parallel.h"
#include "ember.h"
#include "kernels/common/memory_format.h"
#include "kernels/ops/conv2d.h"
#include "kernels/registry.h"
#include "tests/op_driver.h"
#include "tests/op_samples/sample_inputs.h"

using namespace ember;

namespace {

const Variant& variant_named(const OpInfo& info, const std::string& name) {
  for (const Variant& v : info.variants)
    if (v.device == DeviceType::cpu && v.name == name) return v;
  FAIL("no CPU variant " << name);
  throw std::logic_error("unreachable");
}

struct Case {
  const char* name;
  Shape x;
  int64_t K;
  Conv2dFuncOptions o;
};

// The call as the runner would make it (inputs in dtype dt), with outputs left empty like the
// generic driver's probe.
bool accepts(const Variant& v, const Tensor& gy, const Tensor& x, const Attrs& attrs) {
  std::vector<Tensor> in{gy, x};
  std::vector<Tensor> out{empty({0}, TensorOptions(gy.dtype()))};
  KernelCall c{OpId::conv2d_backward_weight, in, out, attrs};
  return v.accepts(c);
}

}  // namespace

TEST_CASE("conv2d_backward_weight winograd matches the reference", "[conv][winograd]") {
  const OpInfo& info = op_info(OpId::conv2d_backward_weight);
  const Variant& ref = variant_named(info, "naive");
  const Variant& wino = variant_named(info, "winograd");
  using O = Conv2dFuncOptions;
  const std::vector<Case> cases = {
      {"MNIST conv2 [3,32,14,14] -> 64 pad 1", {3, 32, 14, 14}, 64, O().set_padding(1)},
      {"blocks of tiles [37,8,13,11] -> 8 pad 1 (odd P, Q)", {37, 8, 13, 11}, 8, O().set_padding(1)},
      {"groups 2 pad 0 odd [3,16,9,8] -> 18", {3, 16, 9, 8}, 18, O().set_groups(2)},
      {"pad 2 [2,8,5,6] -> 9", {2, 8, 5, 6}, 9, O().set_padding(2)},
      {"pad (0, 1) one row of outputs [2,9,3,7] -> 10", {2, 9, 3, 7}, 10, O().set_padding(0, 1)},
  };
  const int threads = num_threads();
  uint64_t seed = 91000;
  for (int nt : {1, 3}) {
    set_num_threads(nt);
    for (const Case& cc : cases) {
      ConvGeom g = conv_geometry("conv2d", cc.x, {cc.K, cc.x[1] / cc.o.groups, 3, 3}, Conv2dAttrs{cc.o});
      Tensor x = samples::uniform(cc.x, -1, 1, ++seed);
      Tensor gy = samples::uniform({g.N, g.K, g.P, g.Q}, -1, 1, ++seed);
      const Attrs attrs = Conv2dAttrs{cc.o, {3, 3}};
      for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
        INFO(cc.name << " " << dt << " threads " << nt);
        Tensor gyd = gy.to(dt), xd = x.to(dt);
        REQUIRE(accepts(wino, gyd, xd, attrs));
        Tensor want = call_variant(ref, OpId::conv2d_backward_weight, {gyd, xd}, attrs)[0];
        Tensor got = call_variant(wino, OpId::conv2d_backward_weight, {gyd, xd}, attrs)[0];
        // sums over N P Q products: scale the f32 tolerance with the reduction like the samples do
        Tol tol = testing::default_tol(dt);
        if (dt == DType::f32) tol = {1e-4, 1e-4};
        if (dt == DType::f16) tol = {2e-3, 1e-3};
        if (dt == DType::bf16) tol = {1.6e-2, 1e-2};
        if (dt == DType::f64) tol = {1e-10, 1e-10};
        CHECK(testing::compare(got, want, tol) == "");
      }
    }
  }
  set_num_threads(threads);
}

TEST_CASE("conv2d_backward_weight winograd declines what it cannot run", "[conv][winograd]") {
  const OpInfo& info = op_info(OpId::conv2d_backward_weight);
  const Variant& wino = variant_named(info, "winograd");
  using O = Conv2dFuncOptions;
  auto check = [&](Shape xs, int64_t K, Shape ks, O o, bool want) {
    ConvGeom g = conv_geometry("conv2d", xs, {K, xs[1] / o.groups, ks[0], ks[1]}, Conv2dAttrs{o});
    Tensor x = zeros(xs), gy = zeros({g.N, g.K, g.P, g.Q});
    const Attrs attrs = Conv2dAttrs{o, {ks[0], ks[1]}};
    CHECK(accepts(wino, gy, x, attrs) == want);
  };
  check({2, 32, 14, 14}, 64, {3, 3}, O().set_padding(1), true);
  check({2, 1, 28, 28}, 32, {3, 3}, O().set_padding(1), false);               // C = 1 (MNIST conv1)
  check({2, 16, 14, 14}, 4, {3, 3}, O().set_padding(1), false);               // K < 8
  check({2, 16, 8, 8}, 16, {3, 3}, O().set_padding(1).set_groups(4), false);  // 4 channels per group
  check({2, 16, 9, 9}, 16, {3, 3}, O().set_stride(2), false);
  check({2, 16, 9, 9}, 16, {3, 3}, O().set_dilation(2), false);
  check({2, 16, 9, 9}, 16, {5, 5}, O().set_padding(2), false);
  // channels-last input
  Tensor xcl = contiguous_as(zeros({2, 16, 6, 6}), true);
  CHECK_FALSE(accepts(wino, zeros({2, 16, 6, 6}), xcl, Attrs(Conv2dAttrs{O().set_padding(1), {3, 3}})));
}

TEST_CASE("conv2d_backward_weight defaults for MNIST's conv layers", "[conv][winograd]") {
  const OpInfo& info = op_info(OpId::conv2d_backward_weight);
  auto default_name = [&](Shape xs, int64_t K) {
    Tensor x = zeros(xs), gy = zeros({xs[0], K, xs[2], xs[3]});
    std::vector<Tensor> in{gy, x};
    std::vector<Tensor> out{empty({K, xs[1], 3, 3})};
    const Attrs attrs = Conv2dAttrs{Conv2dFuncOptions().set_padding(1), {3, 3}};
    KernelCall c{OpId::conv2d_backward_weight, in, out, attrs};
    const Variant* v = info.default_variant(c, DeviceType::cpu);
    return v ? v->name : std::string("none");
  };
  CHECK(default_name({4, 1, 28, 28}, 32) == "im2col_blocked");
  CHECK(default_name({4, 32, 14, 14}, 64) == "winograd");
}
