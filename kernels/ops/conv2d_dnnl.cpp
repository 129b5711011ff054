// oneDNN variants ("dnnl", kVendor) of the three convolution ops on the CPU, registered beside the
// hand-written ones (conv2d_cpu.cpp) as cuDNN's are beside the CUDA kernels (conv2d_cudnn.cu), so
// `bench_ops --op conv2d --device cpu` prints ours next to the library PyTorch's CPU convolutions use.
//
// - Primitives: convolution_forward (forward_training, bias fused), convolution_backward_data and
//   convolution_backward_weights (no diff bias: a call that asks for db gets it from the CPU's own
//   pass, Note [conv bias gradient] in conv2d.h), algorithm convolution_direct (oneDNN picks its
//   jit / brgemm / gemm implementation).
// - Layouts: the primitive is described with format `any`, so oneDNN chooses its blocked layouts
//   (nChw16c ...) where they are faster; ember's NCHW / channels-last operands are described as they
//   are (dims + strides) and reordered in and out when the choice differs. Grouped weights are the
//   same memory seen as [G, K/G, C/G, R, S].
// - Numerics: f32 runs in f32 (default fpmath mode: no implicit bf16 down-conversion); bf16 takes
//   bf16 operands with f32 accumulation, as ember's kernels. f64 has no oneDNN type: the variants
//   do not list it, so the hand-written ones run. f16 is listed, and supports() says no on CPUs
//   without native f16 (oneDNN 2.6 reports "unimplemented", cached per shape).
// - supports(): a primitive descriptor for the call's geometry can be built (Note [dnnl primitive
//   cache] in kernels/common/dnnl_utils.h: built once per shape and remembered, also when
//   oneDNN has no implementation), and no tensor is empty (ember's kernels handle those).
// - Padding: oneDNN's right padding is given equal to the left one; its output-size formula
//   floors like ember's, so the same P, Q come out (checked against the op's output shape).
#include "kernels/ops/conv2d.h"
#include "kernels/registry.h"

#if EMBER_WITH_DNNL

#include "kernels/common/dnnl_utils.h"
#include "kernels/common/memory_format.h"

#include <unordered_map>

namespace ember {

namespace {

using namespace dnnl_utils;
using dnnl::memory;

ConvGeom geom_of(ConvDirection kind, const KernelCall& c) {
  const auto& a = c.attr<Conv2dAttrs>();
  ConvGeom g;
  switch (kind) {
    case ConvDirection::forward:
      g = conv_geometry("conv2d", c.in[0].shape(), c.in[1].shape(), a);
      g.channels_last = runs_channels_last(c.in[0]);
      break;
    case ConvDirection::backward_input: {
      const Shape& gy = c.in[0].shape();
      const Shape& w = c.in[1].shape();
      g = conv_geometry("conv2d_backward_input", {gy[0], w[1] * a.conv.groups, a.size[0], a.size[1]}, w, a);
      g.channels_last = runs_channels_last(c.in[0]);
      break;
    }
    case ConvDirection::backward_weight: {
      const Shape& gy = c.in[0].shape();
      const Shape& x = c.in[1].shape();
      g = conv_geometry("conv2d_backward_weight", x, {gy[1], x[1] / a.conv.groups, a.size[0], a.size[1]}, a);
      g.channels_last = runs_channels_last(c.in[1]);
      break;
    }
  }
  return g;
}

std::vector<int64_t> act_strides(int64_t C, int64_t H, int64_t W, bool cl) {
  return cl ? std::vector<int64_t>{H * W * C, 1, W * C, C} : std::vector<int64_t>{C * H * W, H * W, W, 1};
}

// The user's memory of the three operands: x [N, C, H, W], w [K, C/G, R, S] (grouped: [G, K/G, C/G,
// R, S]), y [N, K, P, Q], dense in the op's layout (the inputs pass through contiguous_as, the
// output is allocated so by infer).
struct UserDescs {
  memory::desc x, w, y;
  memory::dims xd, wd, yd;
};

UserDescs user_descs(const ConvGeom& g, DType t) {
  UserDescs u;
  u.xd = {g.N, g.C, g.H, g.W};
  u.yd = {g.N, g.K, g.P, g.Q};
  u.x = desc_of(t, {g.N, g.C, g.H, g.W}, act_strides(g.C, g.H, g.W, g.channels_last));
  u.y = desc_of(t, {g.N, g.K, g.P, g.Q}, act_strides(g.K, g.P, g.Q, g.channels_last));
  // KCRS, or KRSC for a channels-last weight
  const std::vector<int64_t> ws = g.channels_last ? std::vector<int64_t>{g.R * g.S * g.Cg, 1, g.S * g.Cg, g.Cg}
                                                  : std::vector<int64_t>{g.Cg * g.R * g.S, g.R * g.S, g.S, 1};
  if (g.G == 1) {
    u.wd = {g.K, g.Cg, g.R, g.S};
    u.w = desc_of(t, {g.K, g.Cg, g.R, g.S}, ws);
  } else {
    u.wd = {g.G, g.Kg, g.Cg, g.R, g.S};
    u.w = desc_of(t, {g.G, g.Kg, g.Cg, g.R, g.S}, {g.Kg * ws[0], ws[0], ws[1], ws[2], ws[3]});
  }
  return u;
}

// One built convolution: the primitive, the reorders between the user's layouts and the ones
// oneDNN chose, and its scratchpad size (allocated from ember's allocator per call).
struct ConvEntry {
  dnnl::primitive prim;
  int in_arg[2] = {0, 0};  // DNNL_ARG_* of the two tensor inputs
  memory::desc in_user[2];
  Reorder in[2];  // user -> primitive
  int out_arg = 0;
  memory::desc out_user, out_prim;
  Reorder out;  // primitive -> user
  bool bias = false;
  memory::desc bias_desc;
  memory::desc scratchpad;
};

std::vector<int64_t> key_of(ConvDirection kind, const ConvGeom& g, DType t, int bias_dtype) {
  return {static_cast<int64_t>(kind),
          static_cast<int64_t>(t),
          bias_dtype,
          g.channels_last,
          g.N,
          g.C,
          g.H,
          g.W,
          g.K,
          g.R,
          g.S,
          g.G,
          g.sh,
          g.sw,
          g.ph,
          g.pw,
          g.dh,
          g.dw};
}

std::shared_ptr<const ConvEntry> build(ConvDirection kind, const ConvGeom& g, DType t, int bias_dtype) {
  const memory::data_type dt = *data_type(t);
  UserDescs u = user_descs(g, t);
  auto any = [&](const memory::dims& d) { return memory::desc(d, dt, memory::format_tag::any); };
  const memory::dims strides{g.sh, g.sw}, dil{g.dh - 1, g.dw - 1}, pad{g.ph, g.pw};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto fwd = try_primitive_desc<dnnl::convolution_forward::primitive_desc>("conv2d dnnl", [&] {
    if (bias_dtype >= 0) {
      const memory::desc b({g.K}, *data_type(static_cast<DType>(bias_dtype)), memory::format_tag::a);
      return dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                          any(u.xd), any(u.wd), b, any(u.yd), strides, dil, pad, pad),
          attr, engine());
    }
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        any(u.xd), any(u.wd), any(u.yd), strides, dil, pad, pad),
        attr, engine());
  });
  if (!fwd) return nullptr;
  auto e = std::make_shared<ConvEntry>();
  auto finish = [&](const memory::desc& a_user, const memory::desc& a_prim, int a_arg, const memory::desc& b_user,
                    const memory::desc& b_prim, int b_arg, const memory::desc& o_user, const memory::desc& o_prim,
                    int o_arg, const memory::desc& scratch) {
    e->in_user[0] = a_user;
    e->in_user[1] = b_user;
    e->in[0] = Reorder::between(a_user, a_prim);
    e->in[1] = Reorder::between(b_user, b_prim);
    e->in_arg[0] = a_arg;
    e->in_arg[1] = b_arg;
    e->out_user = o_user;
    e->out_prim = o_prim;
    e->out = Reorder::between(o_prim, o_user);
    e->out_arg = o_arg;
    e->scratchpad = scratch;
  };
  switch (kind) {
    case ConvDirection::forward:
      e->prim = checked("conv2d dnnl", [&] { return dnnl::convolution_forward(*fwd); });
      finish(u.x, fwd->src_desc(), DNNL_ARG_SRC, u.w, fwd->weights_desc(), DNNL_ARG_WEIGHTS, u.y, fwd->dst_desc(),
             DNNL_ARG_DST, fwd->scratchpad_desc());
      e->bias = bias_dtype >= 0;
      if (e->bias) e->bias_desc = fwd->bias_desc();
      break;
    case ConvDirection::backward_input: {
      auto pd = try_primitive_desc<dnnl::convolution_backward_data::primitive_desc>("conv2d_backward_input dnnl", [&] {
        return dnnl::convolution_backward_data::primitive_desc(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any(u.xd), any(u.wd), any(u.yd),
                                                  strides, dil, pad, pad),
            attr, engine(), *fwd);
      });
      if (!pd) return nullptr;
      e->prim = checked("conv2d_backward_input dnnl", [&] { return dnnl::convolution_backward_data(*pd); });
      finish(u.y, pd->diff_dst_desc(), DNNL_ARG_DIFF_DST, u.w, pd->weights_desc(), DNNL_ARG_WEIGHTS, u.x,
             pd->diff_src_desc(), DNNL_ARG_DIFF_SRC, pd->scratchpad_desc());
      break;
    }
    case ConvDirection::backward_weight: {
      auto pd =
          try_primitive_desc<dnnl::convolution_backward_weights::primitive_desc>("conv2d_backward_weight dnnl", [&] {
            return dnnl::convolution_backward_weights::primitive_desc(
                dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any(u.xd), any(u.wd),
                                                         any(u.yd), strides, dil, pad, pad),
                attr, engine(), *fwd);
          });
      if (!pd) return nullptr;
      e->prim = checked("conv2d_backward_weight dnnl", [&] { return dnnl::convolution_backward_weights(*pd); });
      finish(u.y, pd->diff_dst_desc(), DNNL_ARG_DIFF_DST, u.x, pd->src_desc(), DNNL_ARG_SRC, u.w,
             pd->diff_weights_desc(), DNNL_ARG_DIFF_WEIGHTS, pd->scratchpad_desc());
      break;
    }
  }
  return e;
}

int bias_dtype_of(ConvDirection kind, const KernelCall& c) {
  return kind == ConvDirection::forward && c.in.size() > 2 && c.in[2].defined() ? static_cast<int>(c.in[2].dtype())
                                                                                : -1;
}

std::shared_ptr<const ConvEntry> entry(ConvDirection kind, const KernelCall& c, const ConvGeom& g) {
  const DType t = c.in[0].dtype();
  const int bd = bias_dtype_of(kind, c);
  return cache_of<ConvEntry>().get(key_of(kind, g, t, bd), [&] { return build(kind, g, t, bd); });
}

bool supports(ConvDirection kind, const KernelCall& c) {
  const ConvGeom g = geom_of(kind, c);
  if (g.N == 0 || g.C == 0 || g.K == 0 || g.P == 0 || g.Q == 0 || g.H == 0 || g.W == 0) return false;
  if (!data_type(c.in[0].dtype())) return false;
  const int bd = bias_dtype_of(kind, c);
  if (bd >= 0 && !data_type(static_cast<DType>(bd))) return false;
  return entry(kind, c, g) != nullptr;
}

void run(ConvDirection kind, const KernelCall& c) {
  const char* op = kind == ConvDirection::forward          ? "conv2d dnnl"
                   : kind == ConvDirection::backward_input ? "conv2d_backward_input dnnl"
                                                           : "conv2d_backward_weight dnnl";
  const ConvGeom g = geom_of(kind, c);
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  std::shared_ptr<const ConvEntry> e = entry(kind, c, g);
  EMBER_CHECK(e != nullptr, op, ": oneDNN has no implementation for this convolution (", c.in[0].dtype(),
              "); supports() should have refused it");
  // The output must be dense in the op's layout (as infer allocates it): the descriptor says so.
  EMBER_CHECK(out.is_contiguous() || (g.channels_last && out.is_channels_last()), op,
              ": the output must be contiguous or channels-last, got strides ", out.strides());
  const Tensor a = contiguous_as(c.in[0], g.channels_last);
  const Tensor b = contiguous_as(c.in[1], g.channels_last);
  checked(op, [&] {
    Tensor keep[4];
    std::unordered_map<int, memory> args;
    args.emplace(e->in_arg[0], reorder_in(e->in[0], memory_of(e->in_user[0], a), keep[0]));
    args.emplace(e->in_arg[1], reorder_in(e->in[1], memory_of(e->in_user[1], b), keep[1]));
    Tensor bias;
    if (e->bias) {
      bias = c.in[2].contiguous();
      args.emplace(DNNL_ARG_BIAS, memory_of(e->bias_desc, bias));
    }
    memory user_out = memory_of(e->out_user, out);
    memory prim_out = e->out.prim ? scratch(e->out_prim, keep[2]) : user_out;
    args.emplace(e->out_arg, prim_out);
    if (e->scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, scratch(e->scratchpad, keep[3]));
    e->prim.execute(stream(), args);
    if (e->out.prim) e->out.prim->execute(stream(), prim_out, user_out);
    stream().wait();  // the CPU engine runs synchronously; this keeps `keep` alive until it is done
  });
}

void dnnl_forward(const KernelCall& c) { run(ConvDirection::forward, c); }
void dnnl_backward_data(const KernelCall& c) { run(ConvDirection::backward_input, c); }
void dnnl_backward_weights(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  run(ConvDirection::backward_weight, c);
}

constexpr DTypeSet kDnnlTypes{DType::f32, DType::bf16, DType::f16};

}  // namespace

void register_dnnl_conv2d(OpInfo& info) {
  info.add_variant({.name = "dnnl",
                    .device = DeviceType::cpu,
                    .fn = dnnl_forward,
                    .dtypes = kDnnlTypes,
                    .flags = kVendor,
                    .supports = [](const KernelCall& c) { return supports(ConvDirection::forward, c); },
                    .note = "oneDNN convolution_forward (layouts oneDNN picks, reorders in/out), bias fused"});
}

void register_dnnl_conv2d_backward_input(OpInfo& info) {
  info.add_variant({.name = "dnnl",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<dnnl_backward_data>,
                    .dtypes = kDnnlTypes,
                    .flags = kVendor,
                    .supports = [](const KernelCall& c) { return supports(ConvDirection::backward_input, c); },
                    .note = "oneDNN convolution_backward_data"});
}

void register_dnnl_conv2d_backward_weight(OpInfo& info) {
  info.add_variant({.name = "dnnl",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<dnnl_backward_weights>,
                    .dtypes = kDnnlTypes,
                    .flags = kVendor,
                    .supports = [](const KernelCall& c) { return supports(ConvDirection::backward_weight, c); },
                    .note = "oneDNN convolution_backward_weights (db, where asked for, in a pass of its own)"});
}

}  // namespace ember

#endif  // EMBER_WITH_DNNL
