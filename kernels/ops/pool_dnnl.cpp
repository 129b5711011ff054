// oneDNN variants ("dnnl", kVendor) of avg_pool2d and avg_pool2d_backward on the CPU, beside the
// hand-written loops of pool_cpu.cpp.
//
// - Semantics: pooling_avg_include_padding divides by kh * kw, which is ember's count_include_pad
//   divisor in floor mode (a window never reaches past the right padding: its end is at most
//   (P - 1) sh - ph + kh <= H + ph); pooling_avg_exclude_padding divides by the window clipped to
//   the input, which is count_include_pad = false. Right padding is given equal to the left one.
// - Layouts: pooling moves each byte once, so the operands are described as they are (NCHW or
//   channels-last dims + strides) and oneDNN runs on them directly: a reorder to a blocked layout
//   would cost more than it saves.
// - max_pool2d has no dnnl variant: oneDNN's max pooling records the argmax in an opaque,
//   implementation-defined workspace (its backward needs that workspace), not as ember's
//   documented h * W + w indices, and max_pool2d_backward takes those indices from the caller.
//   Meeting ember's contract would mean recomputing the indices ourselves, i.e. not oneDNN.
// - supports(): f32 / bf16 / f16 operands oneDNN has an implementation for (primitive built once
//   per shape, Note [dnnl primitive cache] in kernels/common/dnnl_utils.h), no empty tensor, and
//   no bf16 gradient with overlapping windows (Note [dnnl bf16 pooling gradient] below).
#include "kernels/ops/pool.h"
#include "kernels/registry.h"

#if EMBER_WITH_DNNL

#include <unordered_map>

#include "kernels/common/dnnl_utils.h"
#include "kernels/common/memory_format.h"

namespace ember {

namespace {

using namespace dnnl_utils;
using dnnl::memory;

struct PoolEntry {
  dnnl::primitive prim;
  memory::desc in, out;
};

// (forward?, geometry, layout): x [N, C, H, W] and y [N, C, P, Q] in the op's layout.
PoolGeom geom_of(bool fwd, const KernelCall& c) {
  const auto& a = c.attr<PoolAttrs>();
  if (fwd) return pool_geometry("avg_pool2d", c.in[0].shape(), a);
  const Shape& gy = c.in[0].shape();
  return pool_geometry("avg_pool2d_backward", {gy[0], gy[1], a.size[0], a.size[1]}, a);
}

std::vector<int64_t> layout(int64_t C, int64_t H, int64_t W, bool cl) {
  return cl ? std::vector<int64_t>{H * W * C, 1, W * C, C} : std::vector<int64_t>{C * H * W, H * W, W, 1};
}

std::shared_ptr<const PoolEntry> build(bool fwd, const PoolGeom& g, DType t, bool cl) {
  const memory::desc x = desc_of(t, {g.N, g.C, g.H, g.W}, layout(g.C, g.H, g.W, cl));
  const memory::desc y = desc_of(t, {g.N, g.C, g.P, g.Q}, layout(g.C, g.P, g.Q, cl));
  const auto alg =
      g.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
  const memory::dims strides{g.sh, g.sw}, kernel{g.kh, g.kw}, pad{g.ph, g.pw};
  auto fpd = try_primitive_desc<dnnl::pooling_forward::primitive_desc>("avg_pool2d dnnl", [&] {
    // forward_training when the backward's hint: avg pooling keeps no workspace either way
    const auto prop = fwd ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
    return dnnl::pooling_forward::primitive_desc(
        dnnl::pooling_forward::desc(prop, alg, x, y, strides, kernel, pad, pad), engine());
  });
  if (!fpd) return nullptr;
  auto e = std::make_shared<PoolEntry>();
  if (fwd) {
    e->prim = checked("avg_pool2d dnnl", [&] { return dnnl::pooling_forward(*fpd); });
    e->in = x;
    e->out = y;
    return e;
  }
  auto bpd = try_primitive_desc<dnnl::pooling_backward::primitive_desc>("avg_pool2d_backward dnnl", [&] {
    return dnnl::pooling_backward::primitive_desc(dnnl::pooling_backward::desc(alg, x, y, strides, kernel, pad, pad),
                                                  engine(), *fpd);
  });
  if (!bpd) return nullptr;
  e->prim = checked("avg_pool2d_backward dnnl", [&] { return dnnl::pooling_backward(*bpd); });
  e->in = y;
  e->out = x;
  return e;
}

std::shared_ptr<const PoolEntry> entry(bool fwd, const KernelCall& c, const PoolGeom& g, bool cl) {
  const DType t = c.in[0].dtype();
  const std::vector<int64_t> key{fwd,  static_cast<int64_t>(t), cl, g.N, g.C, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.ph,
                                 g.pw, g.count_include_pad};
  return cache_of<PoolEntry>().get(key, [&] { return build(fwd, g, t, cl); });
}

bool supports(bool fwd, const KernelCall& c) {
  if (!data_type(c.in[0].dtype()) || c.in[0].dim() != 4) return false;
  const PoolGeom g = geom_of(fwd, c);
  if (g.N == 0 || g.C == 0 || g.H == 0 || g.W == 0) return false;
  // Note [dnnl bf16 pooling gradient]: with overlapping windows (stride < kernel) oneDNN 2.6's
  // bf16 backward (jit:avx512_core_bf16, channels-last) adds the windows' shares in bf16: on the
  // sample "channels-last 3x3 stride 2 pad 1 [2,5,7,6]" 13 of 420 gradients were off by up to 10%
  // (-0.00157 for -0.00174) against ember's sum in double rounded once. Without overlap each
  // input gets one share and nothing accumulates, so only that case is taken in bf16.
  if (!fwd && c.in[0].dtype() == DType::bf16 && (g.sh < g.kh || g.sw < g.kw)) return false;
  return entry(fwd, c, g, runs_channels_last(c.in[0])) != nullptr;
}

void run(bool fwd, const KernelCall& c) {
  const char* op = fwd ? "avg_pool2d dnnl" : "avg_pool2d_backward dnnl";
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  const PoolGeom g = geom_of(fwd, c);
  const bool cl = runs_channels_last(c.in[0]);
  std::shared_ptr<const PoolEntry> e = entry(fwd, c, g, cl);
  EMBER_CHECK(e != nullptr, op, ": oneDNN has no implementation for this pooling (", c.in[0].dtype(),
              "); supports() should have refused it");
  EMBER_CHECK(cl ? out.is_channels_last() : out.is_contiguous(), op, ": the output must be ",
              cl ? "channels-last" : "contiguous", " like the input, got strides ", out.strides());
  const Tensor in = contiguous_as(c.in[0], cl);
  checked(op, [&] {
    std::unordered_map<int, memory> args;
    args.emplace(fwd ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST, memory_of(e->in, in));
    args.emplace(fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC, memory_of(e->out, out));
    e->prim.execute(stream(), args);
    stream().wait();
  });
}

constexpr DTypeSet kDnnlTypes{DType::f32, DType::bf16, DType::f16};

}  // namespace

void register_dnnl_avg_pool2d(OpInfo& info) {
  info.add_variant({.name = "dnnl",
                    .device = DeviceType::cpu,
                    .fn = [](const KernelCall& c) { run(true, c); },
                    .dtypes = kDnnlTypes,
                    .flags = kVendor,
                    .supports = [](const KernelCall& c) { return supports(true, c); },
                    .note = "oneDNN pooling_forward (avg include/exclude padding) on ember's layout"});
}

void register_dnnl_avg_pool2d_backward(OpInfo& info) {
  info.add_variant({.name = "dnnl",
                    .device = DeviceType::cpu,
                    .fn = [](const KernelCall& c) { run(false, c); },
                    .dtypes = kDnnlTypes,
                    .flags = kVendor,
                    .supports = [](const KernelCall& c) { return supports(false, c); },
                    .note = "oneDNN pooling_backward (avg) on ember's layout"});
}

}  // namespace ember

#endif  // EMBER_WITH_DNNL
