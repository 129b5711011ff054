// oneDNN variant ("dnnl", kVendor) of batch_norm's forward on the CPU, beside ember's two-pass
// loop in double (kernels/ops/batch_norm.cpp).
//
// - Training: batch_normalization forward_training with use_scale | use_shift computes y, the
//   batch mean (written straight into ember's mean output) and the biased variance; invstd =
//   1 / sqrt(var + eps) and the running-statistics update (unbiased variance, momentum) are ours,
//   in double, exactly as the CPU kernel's. Eval: use_global_stats with the running statistics.
// - Parameters: oneDNN takes f32 scale, shift, mean and variance; ember's weight, bias and running
//   statistics may be the input's dtype (bf16) or f32, so they are converted to f32 first
//   (undefined weight / bias: 1 / 0).
// - Layouts: x described as it is (4-D NCHW or channels-last, or 2-D (N, C)); y is allocated in
//   the same layout by infer.
// - supports(): f32 or bf16 input of 2 or 4 dims, no empty tensor, and an implementation in
//   oneDNN (cached per shape, Note [dnnl primitive cache] in kernels/common/dnnl_utils.h).
//   batch_norm_backward has no dnnl variant: oneDNN's backward wants the variance, which ember's
//   contract hands over only as invstd.
#include "kernels/ops/batch_norm.h"
#include "kernels/registry.h"

#if EMBER_WITH_DNNL

#include <cmath>
#include <cstring>
#include <unordered_map>

#include "kernels/common/dnnl_utils.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"

namespace ember {

void register_dnnl_batch_norm(OpInfo& info);

namespace {

using namespace dnnl_utils;
using dnnl::memory;

struct BnEntry {
  dnnl::primitive prim;
  memory::desc x, stat, scale;
  memory::desc scratchpad;
};

std::vector<int64_t> dense_strides(const Tensor& x, bool cl) {
  const Shape& s = x.shape();
  if (x.dim() == 2) return {s[1], 1};
  return cl ? std::vector<int64_t>{s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}
            : std::vector<int64_t>{s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
}

std::shared_ptr<const BnEntry> entry(const Tensor& x, bool training, double eps) {
  const bool cl = runs_channels_last(x);
  std::vector<int64_t> key{training, cl, static_cast<int64_t>(x.dtype())};
  for (int64_t s : x.shape()) key.push_back(s);
  int64_t eps_bits = 0;
  const double e = eps;
  std::memcpy(&eps_bits, &e, sizeof e);
  key.push_back(eps_bits);
  return cache_of<BnEntry>().get(key, [&]() -> std::shared_ptr<const BnEntry> {
    const int64_t C = x.shape()[1];
    const memory::desc xd = desc_of(x.dtype(), {x.shape().begin(), x.shape().end()}, dense_strides(x, cl));
    auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    if (!training) flags = flags | dnnl::normalization_flags::use_global_stats;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto pd = try_primitive_desc<dnnl::batch_normalization_forward::primitive_desc>("batch_norm dnnl", [&] {
      return dnnl::batch_normalization_forward::primitive_desc(
          dnnl::batch_normalization_forward::desc(
              training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, xd,
              static_cast<float>(eps), flags),
          attr, engine());
    });
    if (!pd) return nullptr;
    auto en = std::make_shared<BnEntry>();
    en->prim = checked("batch_norm dnnl", [&] { return dnnl::batch_normalization_forward(*pd); });
    en->x = xd;
    en->stat = memory::desc({C}, memory::data_type::f32, memory::format_tag::a);
    en->scale = en->stat;
    en->scratchpad = pd->scratchpad_desc();
    return en;
  });
}

bool supports(const KernelCall& c) {
  const Tensor& x = c.in[0];
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16) return false;
  if ((x.dim() != 2 && x.dim() != 4) || x.numel() == 0) return false;
  return entry(contiguous_as(x, runs_channels_last(x)), c.attr<BatchNormAttrs>().training != 0,
               c.attr<BatchNormAttrs>().eps) != nullptr;
}

// A [C] parameter as a contiguous f32 tensor (`fill` where undefined).
Tensor f32_param(const Tensor& t, int64_t C, double fill) {
  if (!t.defined()) return full({C}, fill, TensorOptions(DType::f32));
  return t.to(DType::f32).contiguous();
}

void run(const KernelCall& c) {
  const auto& a = c.attr<BatchNormAttrs>();
  const bool training = a.training != 0;
  const Tensor x = contiguous_as(c.in[0], runs_channels_last(c.in[0]));
  const Tensor &rm = c.in[3], &rv = c.in[4];
  const Tensor &y = c.out[0], &mean = c.out[1], &invstd = c.out[2];
  const int64_t C = x.shape()[1];
  std::shared_ptr<const BnEntry> e = entry(x, training, a.eps);
  EMBER_CHECK(e != nullptr, "batch_norm dnnl: oneDNN has no implementation for ", x.describe(),
              "; supports() should have refused it");
  EMBER_CHECK(runs_channels_last(x) ? y.is_channels_last() : y.is_contiguous(),
              "batch_norm dnnl: the output must have the input's layout, got strides ", y.strides());
  EMBER_CHECK(
      mean.dtype() == DType::f32 && invstd.dtype() == DType::f32 && mean.is_contiguous() && invstd.is_contiguous(),
      "batch_norm dnnl: mean and invstd must be contiguous f32 tensors");
  const Tensor scale = f32_param(c.in[1], C, 1.0), shift = f32_param(c.in[2], C, 0.0);
  // training: oneDNN writes the batch mean into ember's output and the variance here;
  // eval: the running statistics are oneDNN's inputs
  Tensor var = training ? empty({C}, TensorOptions(DType::f32)) : f32_param(rv, C, 1.0);
  Tensor mean_in = training ? mean : f32_param(rm, C, 0.0);
  checked("batch_norm dnnl", [&] {
    Tensor keep;
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory_of(e->x, x)},           {DNNL_ARG_DST, memory_of(e->x, y)},
        {DNNL_ARG_SCALE, memory_of(e->scale, scale)}, {DNNL_ARG_SHIFT, memory_of(e->scale, shift)},
        {DNNL_ARG_MEAN, memory_of(e->stat, mean_in)}, {DNNL_ARG_VARIANCE, memory_of(e->stat, var)}};
    if (e->scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, scratch(e->scratchpad, keep));
    e->prim.execute(stream(), args);
    stream().wait();
  });
  // invstd (and, training, the running statistics) in double, as the CPU kernel
  const float* v = var.data<float>();
  float* is = invstd.data<float>();
  for (int64_t i = 0; i < C; ++i) is[i] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v[i]) + a.eps));
  if (!training) {
    Tensor m = mean;
    copy_(m, mean_in);
    return;
  }
  bn_count_batch(c);
  if (rm.defined()) {
    const double mom = a.momentum, M = static_cast<double>(x.numel() / C);
    std::vector<double> rmv = rm.to_vector<double>(), rvv = rv.to_vector<double>();
    const float* mv = mean.data<float>();
    for (int64_t i = 0; i < C; ++i) {
      rmv[static_cast<size_t>(i)] = (1 - mom) * rmv[static_cast<size_t>(i)] + mom * mv[i];
      rvv[static_cast<size_t>(i)] = (1 - mom) * rvv[static_cast<size_t>(i)] + mom * v[i] * M / (M - 1);
    }
    Tensor r1 = rm, r2 = rv;
    copy_(r1, tensor(rmv, rm.shape(), TensorOptions(DType::f64)));
    copy_(r2, tensor(rvv, rv.shape(), TensorOptions(DType::f64)));
    r1.bump_version();
    r2.bump_version();
  }
}

}  // namespace

void register_dnnl_batch_norm(OpInfo& info) {
  info.add_variant({.name = "dnnl",
                    .device = DeviceType::cpu,
                    .fn = run,
                    .dtypes = DTypeSet{DType::f32, DType::bf16},
                    .flags = kVendor,
                    .supports = supports,
                    .note = "oneDNN batch_normalization forward (scale/shift f32), invstd and running stats ours"});
}

}  // namespace ember

#endif  // EMBER_WITH_DNNL
