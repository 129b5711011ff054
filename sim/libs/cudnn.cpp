// The simulator's cuDNN convolutions (Note [simulated vendor libraries] in common.h): filter and
// convolution descriptors, the algorithm queries (Get*_v7 heuristics, Find*Ex timing), workspace
// sizes, and cudnnConvolutionForward / BackwardData / BackwardFilter, which enqueue the simulated
// kernels of conv.cu on the handle's stream. Handles and tensor descriptors are in
// cudnn_common.cpp; pooling, softmax and batch norm in cudnn_ops.cpp.
//
// Note [simulated cuDNN convolutions]:
// - Contract: every call checks what cuDNN's legacy API documents and returns the documented
//   status (the reason goes to cudnnGetLastErrorString): descriptors created and set; data types
//   of x, w and y equal (BAD_PARAM) and the convolution's compute type one the documented
//   configurations pair with them (f32: FLOAT; f64: DOUBLE; f16: HALF or FLOAT; bf16: FLOAT;
//   else NOT_SUPPORTED); channels C == filter c * groups and K divisible by groups, x and y
//   agreeing on N, y having K channels and the output size of cudnnGetConvolution2dForwardOutputDim
//   (BAD_PARAM); the filter no larger than the padded input (BAD_PARAM); an unknown algorithm
//   (BAD_PARAM) or one that does not support the configuration (NOT_SUPPORTED, rules at
//   `unsupported`); the workspace (BAD_PARAM when null with a nonzero size or smaller than the
//   algorithm needs with the descriptor's math type, which is what cudnnGet*WorkspaceSize returns:
//   sizes depend on the math type, `workspace_bytes`); data pointers device memory of
//   the handle's device holding the tensor (BAD_PARAM; null: BAD_PARAM_NULL_POINTER); alpha and
//   beta not null (BAD_PARAM_NULL_POINTER).
// - Layouts: tensors carry any positive strides, a size-1 dimension's fitting the packing of the
//   others (Note [cuDNN layouts from strides] in cudnn_common.cpp). The documented support tables pair a filter of
//   format NCHW (KCRS) with x and y in any layout (except NCHW_VECT_C, which is not modelled),
//   but a filter of format NHWC (KRSC) only with x and y in NHWC, fully packed: anything else with
//   an NHWC filter is NOT_SUPPORTED. FFT and Winograd algorithms need NCHW tensors whose rows are
//   packed (w stride 1, h stride W) and an NCHW filter.
// - Numerics: Note [emulated convolution numerics] in conv.cu; `numerics` below picks them from
//   the data type, compute type, math type and algorithm.
// - Algorithm lists: `candidates` below.
#if EMBER_WITH_CUDNN  // built where CMake found cudnn.h (CMakeLists.txt)

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "sim/libs/conv.h"
#include "sim/libs/cudnn_internal.h"

namespace ember::sim::libs::cudnn {

namespace {

using conv::Dir;

std::string str_of(const char* what, const std::string& rest) { return std::string(what) + ": " + rest; }

cudnnStatus_t check_filter(cudnnFilterDescriptor_t d, const char* what, const char* which) {
  if (d == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, std::string("the ") + which + " descriptor is null"));
  if (d->magic != kFilterMagic)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, std::string("the ") + which + " filter descriptor was destroyed or never created"));
  if (!d->set)
    return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                str_of(what, std::string("the ") + which + " filter descriptor was never set"));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_conv(cudnnConvolutionDescriptor_t d, const char* what) {
  if (d == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, "the convolution descriptor is null"));
  if (d->magic != kConvMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "the convolution descriptor was destroyed or never created"));
  if (!d->set)
    return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                str_of(what, "the convolution descriptor was never set (cudnnSetConvolution2dDescriptor)"));
  return CUDNN_STATUS_SUCCESS;
}

#define EMBER_CUDNN_TRY(expr)                                                \
  do {                                                                       \
    if (cudnnStatus_t st_ = (expr); st_ != CUDNN_STATUS_SUCCESS) return st_; \
  } while (0)

// ---- one convolution, checked ----

struct Problem {
  Dir dir = Dir::forward;
  Elem elem = Elem::f32;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool nhwc_filter = false;
  bool rows_packed = false;  // x and y NCHW with packed rows and planes (what FFT and Winograd read)
  conv::ConvGeom g;
  size_t x_bytes = 0, w_bytes = 0, y_bytes = 0;
};

bool nhwc_packed(const cudnnTensorStruct& d) {
  const int64_t C = d.dims[1], H = d.dims[2], W = d.dims[3];
  return d.strides[1] == 1 && d.strides[3] == C && d.strides[2] == W * C && d.strides[0] == H * W * C;
}
bool planes_packed(const cudnnTensorStruct& d) {
  return d.strides[3] == 1 && d.strides[2] == d.dims[3] && d.strides[1] == int64_t{d.dims[2]} * d.dims[3];
}

bool compute_allowed(Elem data, cudnnDataType_t compute) {
  switch (data) {
    case Elem::f32: return compute == CUDNN_DATA_FLOAT;
    case Elem::f64: return compute == CUDNN_DATA_DOUBLE;
    case Elem::f16: return compute == CUDNN_DATA_HALF || compute == CUDNN_DATA_FLOAT;
    case Elem::bf16: return compute == CUDNN_DATA_FLOAT;
  }
  return false;
}

// x and y of a convolution: 4-d (2-d convolutions), in layouts cuDNN reads as meant.
cudnnStatus_t check_data_tensors(const char* what, const cudnnTensorStruct& x, const char* xn,
                                 const cudnnTensorStruct& y, const char* yn) {
  if (x.nb_dims != 4 || y.nb_dims != 4)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, str_of(what, "only 4-d tensors (2-d convolutions) are simulated"));
  EMBER_CUDNN_TRY(check_layout(x, what, xn));
  return check_layout(y, what, yn);
}

// Checks the descriptors of one convolution (x, w, y: for backward data x is dx and y is dy, for
// backward filter w is dw and y is dy) and fills `pr`.
cudnnStatus_t describe(const char* what, Dir dir, cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                       cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, Problem& pr) {
  const char* xn = dir == Dir::backward_data ? "dx" : "x";
  const char* yn = dir == Dir::forward ? "y" : "dy";
  const char* wn = dir == Dir::backward_filter ? "dw" : "w";
  EMBER_CUDNN_TRY(check_tensor(xd, what, xn));
  EMBER_CUDNN_TRY(check_filter(wd, what, wn));
  EMBER_CUDNN_TRY(check_conv(cd, what));
  EMBER_CUDNN_TRY(check_tensor(yd, what, yn));
  EMBER_CUDNN_TRY(check_data_tensors(what, *xd, xn, *yd, yn));
  if (xd->type != wd->type || yd->type != wd->type)
    return fail(
        CUDNN_STATUS_BAD_PARAM,
        str_of(what, std::string("the data types of ") + xn + " (" + std::to_string(xd->type) + "), " + wn + " (" +
                         std::to_string(wd->type) + ") and " + yn + " (" + std::to_string(yd->type) + ") differ"));
  Elem e{};
  if (!elem_of(wd->type, e))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, str_of(what, "the data type is not one the simulator computes with"));
  if (!compute_allowed(e, cd->compute))
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                str_of(what, std::string("compute type ") + std::to_string(cd->compute) + " with " + elem_name(e) +
                                 " data is none of the documented configurations (f32: FLOAT, f64: DOUBLE, f16: "
                                 "HALF or FLOAT, bf16: FLOAT)"));
  const int64_t N = xd->dims[0], C = xd->dims[1], H = xd->dims[2], W = xd->dims[3];
  const int64_t K = wd->k, G = cd->groups, R = wd->r, S = wd->s;
  if (C != int64_t{wd->c} * G)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, std::string(xn) + " has " + std::to_string(C) + " channels but the filter " +
                                 std::to_string(wd->c) + " per group with " + std::to_string(G) + " groups"));
  if (K % G != 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "the filter's " + std::to_string(K) +
                                 " output channels are not divisible by the group count " + std::to_string(G)));
  if (yd->dims[0] != N)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, std::string(xn) + " and " + yn + " have batch sizes " +
                                                         std::to_string(N) + " and " + std::to_string(yd->dims[0])));
  if (yd->dims[1] != K)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, std::string(yn) + " has " + std::to_string(yd->dims[1]) +
                                                         " channels, the filter " + std::to_string(K) + " outputs"));
  const int64_t eff_r = cd->dil_h * (R - 1) + 1, eff_s = cd->dil_w * (S - 1) + 1;
  if (H + 2 * cd->pad_h < eff_r || W + 2 * cd->pad_w < eff_s)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "the (dilated) filter is larger than the padded input"));
  const int64_t P = (H + 2 * cd->pad_h - eff_r) / cd->stride_h + 1, Q = (W + 2 * cd->pad_w - eff_s) / cd->stride_w + 1;
  if (yd->dims[2] != P || yd->dims[3] != Q)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, std::string(yn) + " is " + std::to_string(yd->dims[2]) + "x" +
                                 std::to_string(yd->dims[3]) + " but the convolution's output is " + std::to_string(P) +
                                 "x" + std::to_string(Q) + " (cudnnGetConvolution2dForwardOutputDim)"));
  const bool nhwc_filter = wd->format == CUDNN_TENSOR_NHWC;
  if (nhwc_filter && (!nhwc_packed(*xd) || !nhwc_packed(*yd)))
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                str_of(what, std::string("a filter in format NHWC (KRSC) needs ") + xn + " and " + yn +
                                 " in NHWC, fully packed (the documented support tables); use an NCHW filter for "
                                 "other layouts"));
  pr.dir = dir;
  pr.elem = e;
  pr.compute = cd->compute;
  pr.math = cd->math;
  pr.nhwc_filter = nhwc_filter;
  pr.rows_packed = planes_packed(*xd) && planes_packed(*yd);
  conv::ConvGeom& g = pr.g;
  g.N = N, g.C = C, g.H = H, g.W = W, g.K = K, g.R = R, g.S = S, g.P = P, g.Q = Q, g.G = G;
  g.ph = cd->pad_h, g.pw = cd->pad_w, g.sh = cd->stride_h, g.sw = cd->stride_w, g.dh = cd->dil_h, g.dw = cd->dil_w;
  g.flip = cd->mode == CUDNN_CONVOLUTION;
  for (int i = 0; i < 4; ++i) {
    g.xs[i] = xd->strides[i];
    g.ys[i] = yd->strides[i];
  }
  const int64_t c = wd->c;
  if (nhwc_filter) {
    g.ws[0] = R * S * c, g.ws[1] = 1, g.ws[2] = S * c, g.ws[3] = c;
  } else {
    g.ws[0] = c * R * S, g.ws[1] = R * S, g.ws[2] = S, g.ws[3] = 1;
  }
  pr.x_bytes = span_bytes(*xd);
  pr.y_bytes = span_bytes(*yd);
  pr.w_bytes = static_cast<size_t>(K * c * R * S) * elem_bytes(e);
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithms ----

// `unimplemented`: the two algorithms cuDNN's documentation lists as not implemented
// (CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD): listed, never supported.
enum class Family {
  implicit_gemm,
  precomp_gemm,
  gemm,
  unimplemented,
  fft,
  fft_tiling,
  winograd,
  winograd_nonfused,
  none
};

int algo_count(Dir dir) {
  switch (dir) {
    case Dir::forward: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case Dir::backward_data: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case Dir::backward_filter: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

Family family(Dir dir, int algo) {
  switch (dir) {
    case Dir::forward:
      switch (algo) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return Family::implicit_gemm;
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return Family::precomp_gemm;
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return Family::gemm;
        case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return Family::unimplemented;
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return Family::fft;
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return Family::fft_tiling;
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return Family::winograd;
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return Family::winograd_nonfused;
        default: return Family::none;
      }
    case Dir::backward_data:
      switch (algo) {
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return Family::implicit_gemm;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return Family::precomp_gemm;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return Family::fft;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return Family::fft_tiling;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return Family::winograd;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return Family::winograd_nonfused;
        default: return Family::none;
      }
    case Dir::backward_filter:
      switch (algo) {
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return Family::implicit_gemm;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return Family::gemm;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return Family::fft;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return Family::precomp_gemm;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD: return Family::unimplemented;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return Family::winograd_nonfused;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return Family::fft_tiling;
        default: return Family::none;
      }
  }
  return Family::none;
}

// The algorithms cudnn_cnn.h documents as nondeterministic (atomic adds).
bool nondeterministic(Dir dir, int algo) {
  return (dir == Dir::backward_data && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) ||
         (dir == Dir::backward_filter &&
          (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
}

bool transform_family(Family f) {
  return f == Family::fft || f == Family::fft_tiling || f == Family::winograd || f == Family::winograd_nonfused;
}
// The algorithms computing through transforms whose error grows with the inputs (conv.cu's Note).
bool lossy(Family f) { return f == Family::fft || f == Family::fft_tiling || f == Family::winograd_nonfused; }

// Why `algo` does not support `pr` (empty: it does). These follow the shape of cuDNN's documented
// support tables, simplified; the simulator's rules are:
// - FWD_ALGO_DIRECT and BWD_FILTER_ALGO_WINOGRAD: never (cuDNN does not implement them);
// - FFT, FFT_TILING, WINOGRAD, WINOGRAD_NONFUSED: stride 1, dilation 1, one group, f32 or f16
//   data, an NCHW filter and x/y NCHW with packed planes, the filter taller and wider than the
//   padding; FFT: padded input at most 256x256; FFT_TILING: filter at most 32x32; WINOGRAD: 3x3;
//   WINOGRAD_NONFUSED: 3x3 or 5x5;
// - FWD_ALGO_GEMM: an NCHW filter;
// - BWD_FILTER_ALGO_3: an NCHW filter, dilation 1, one group;
// - FWD 0 and 1, BWD_DATA 0 and 1, BWD_FILTER 0 and 1: every configuration;
// - compute type HALF (f16 "true half"): the implicit-GEMM algorithms only.
std::string unsupported(const Problem& pr, int algo) {
  const Family f = family(pr.dir, algo);
  const conv::ConvGeom& g = pr.g;
  if (f == Family::unimplemented) return "cuDNN documents this algorithm as not implemented";
  if (pr.compute == CUDNN_DATA_HALF && f != Family::implicit_gemm && f != Family::precomp_gemm)
    return "compute type HALF runs on the implicit-GEMM algorithms only";
  if (transform_family(f)) {
    if (g.sh != 1 || g.sw != 1) return "FFT and Winograd algorithms need stride 1";
    if (g.dh != 1 || g.dw != 1) return "FFT and Winograd algorithms need dilation 1";
    if (g.G != 1) return "FFT and Winograd algorithms need one group";
    if (pr.elem != Elem::f32 && pr.elem != Elem::f16) return "FFT and Winograd algorithms need f32 or f16 data";
    if (pr.nhwc_filter || !pr.rows_packed)
      return "FFT and Winograd algorithms need an NCHW filter and NCHW tensors with packed planes";
    if (g.R <= g.ph || g.S <= g.pw) return "FFT and Winograd algorithms need a filter larger than the padding";
    if (f == Family::fft && (g.H + 2 * g.ph > 256 || g.W + 2 * g.pw > 256))
      return "FFT needs a padded input of at most 256x256";
    if (f == Family::fft_tiling && (g.R > 32 || g.S > 32)) return "FFT_TILING needs a filter of at most 32x32";
    if (f == Family::winograd && (g.R != 3 || g.S != 3)) return "WINOGRAD needs a 3x3 filter";
    if (f == Family::winograd_nonfused && !((g.R == 3 && g.S == 3) || (g.R == 5 && g.S == 5)))
      return "WINOGRAD_NONFUSED needs a 3x3 or 5x5 filter";
  }
  if (pr.dir == Dir::forward && f == Family::gemm && pr.nhwc_filter) return "FWD_ALGO_GEMM needs an NCHW filter";
  if (pr.dir == Dir::backward_filter && algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 &&
      (pr.nhwc_filter || g.dh != 1 || g.dw != 1 || g.G != 1))
    return "BWD_FILTER_ALGO_3 needs an NCHW filter, dilation 1 and one group";
  return {};
}

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// The workspace `algo` needs (bytes) with math type `math`: none for the implicit GEMMs, index
// tables for the precomputed ones, an im2col or split-K buffer for the GEMM-like ones, transformed
// operands for FFT and Winograd (complex f32 spectra; 6x6 or 8x8 tiles). With CUDNN_FMA_MATH
// every algorithm that has a workspace needs twice as much: cuDNN documents no sizes, but its math
// types select different kernels and its size queries read the math type from the convolution
// descriptor, so an algorithm's size may change with it; the simulator makes it change, so that
// running an algorithm with another math type than the one its size came for is caught (the
// workspace check at the call). The FMA side is the larger so that forcing FMA math onto an entry
// listed with CUDNN_DEFAULT_MATH (the mistake worth catching: TF32 is off that way) leaves the
// workspace short.
size_t workspace_bytes(const Problem& pr, int algo, cudnnMathType_t math) {
  const conv::ConvGeom& g = pr.g;
  const int64_t eb = static_cast<int64_t>(elem_bytes(pr.elem)), Cg = g.Cg();
  int64_t bytes = 0;
  switch (family(pr.dir, algo)) {
    case Family::implicit_gemm:
    case Family::unimplemented:
    case Family::none: bytes = 0; break;
    case Family::precomp_gemm:
      bytes = 4 * (pr.dir == Dir::backward_data ? g.Kg() : Cg) * g.R * g.S + 256;
      if (pr.dir == Dir::backward_filter) bytes = 4 * (g.R * g.S + g.N) + 256;
      break;
    case Family::gemm:
      if (pr.dir == Dir::forward) bytes = eb * Cg * g.R * g.S * g.P * g.Q * g.G;  // one image's im2col
      else
        bytes = 4 * g.K * Cg * g.R * g.S * std::max<int64_t>(1, (g.N * g.P * g.Q + 4095) / 4096);  // split-K partials
      break;
    case Family::fft: {
      const int64_t fh = next_pow2(g.H + 2 * g.ph), fw = next_pow2(g.W + 2 * g.pw);
      bytes = 8 * fh * (fw / 2 + 1) * (g.N * g.C + g.K * g.C + g.N * g.K);
      break;
    }
    case Family::fft_tiling: {
      const int64_t tiles = ((g.H + 2 * g.ph + 31) / 32) * ((g.W + 2 * g.pw + 31) / 32);
      bytes = 8 * 32 * 17 * (g.N * g.C * tiles + g.K * g.C + g.N * g.K * tiles);
      break;
    }
    case Family::winograd: bytes = eb * 16 * g.K * g.C; break;
    case Family::winograd_nonfused: {
      const int64_t t = (g.R + 3) * (g.S + 3), tiles = ((g.P + 3) / 4) * ((g.Q + 3) / 4);
      bytes = eb * t * (g.N * g.C * tiles + g.K * g.C + g.N * g.K * tiles);
      break;
    }
  }
  if (math == CUDNN_FMA_MATH) bytes *= 2;
  return static_cast<size_t>(bytes);
}

cudnnStatus_t check_algo(const char* what, const Problem& pr, int algo) {
  if (algo < 0 || algo >= algo_count(pr.dir))
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "algorithm " + std::to_string(algo) + " is not one of cudnn.h's"));
  if (std::string why = unsupported(pr, algo); !why.empty())
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                str_of(what, "algorithm " + std::to_string(algo) + " does not support this convolution: " + why));
  return CUDNN_STATUS_SUCCESS;
}

// The numerics of running `algo` with `math` (conv.cu's Note [emulated convolution numerics]):
// - f32 data: CUDNN_DEFAULT_MATH and CUDNN_TENSOR_OP_MATH permit TF32 on sm_80+ (the simulated
//   GPU is an sm_90 H100), so both operands are rounded to TF32; TENSOR_OP_MATH_ALLOW_CONVERSION
//   lets cuDNN convert them to f16; CUDNN_FMA_MATH is plain f32 fused multiply-adds;
// - f64: double throughout;
// - f16, compute type HALF ("true half"): every addition in f16 (chunks of one product);
// - f16, compute type FLOAT with tensor-op, conversion or default math (default math permits
//   tensor cores for f16, and the H200 observation, Note [cuDNN f16 partial sums], was with both
//   default and tensor-op math): the documented PSEUDO_HALF configuration accumulates in f32, but
//   the H200 showed an error growing like one f16 rounding per partial sum in backward data (and
//   not in the other directions: below). Modelled there as partial
//   sums of 32 products (a tensor-core kernel's k-tile) each rounded to f16 and added in f32, then
//   one rounding. Adding the partial sums in f16 as well gave errors several times the bound the
//   H200's run suggested, so that is not modelled;
// - f16 with CUDNN_FMA_MATH, and bf16 with any math: the documented PSEUDO_HALF and
//   PSEUDO_BFLOAT16 configurations compute in f32 and round once at the end. FMA math rules out
//   the tensor-core kernels; for bf16 nothing observed partial sums kept in the type (the H200
//   run widened ember's tolerance for f16 only; bf16 partial sums would be 8 times coarser), so
//   none are modelled;
// - nondeterministic algorithms: partial sums (of 8 products, or of the data-type chunks) combined
//   in a per-call order; FFT, FFT_TILING and WINOGRAD_NONFUSED: the transform error.
conv::ConvNumerics numerics(const Problem& pr, int algo, cudnnMathType_t math, double alpha, double beta) {
  conv::ConvNumerics n;
  n.elem = pr.elem;
  n.acc_f64 = pr.elem == Elem::f64;
  n.alpha = alpha;
  n.beta = beta;
  n.chunk = 32;
  if (pr.elem == Elem::f32) {
    if (math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH) n.operands = conv::OperandRounding::tf32;
    else if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) n.operands = conv::OperandRounding::f16;
  } else if (pr.elem == Elem::f16) {
    if (pr.compute == CUDNN_DATA_HALF) {
      n.partials_in_type = true;
      n.chunk = 1;
    } else if (math != CUDNN_FMA_MATH && pr.dir == Dir::backward_data) {
      // where the H200 showed it; its forward and weight-gradient convolutions met one f32 rounding's
      // bound (tests/test_cnn_ops_gpu.cpp at 5e-3), as the documented PSEUDO_HALF configuration says
      n.partials_rounded = true;
      n.chunk = 32;
    }
  }
  if (nondeterministic(pr.dir, algo)) {
    n.nondeterministic = true;
    n.seed = next_call_seed();
    if (!n.partials_in_type && !n.partials_rounded) n.chunk = 8;
  }
  if (lossy(family(pr.dir, algo))) {
    n.transform_error = true;
    n.transform_seed = 0x7f4a7c159e3779b9ull ^ (static_cast<uint64_t>(pr.dir) << 8) ^ static_cast<uint64_t>(algo);
  }
  return n;
}

// ---- the candidate lists ----

struct Candidate {
  int algo = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  float time = -1;
  size_t memory = 0;
  cudnnDeterminism_t determinism = CUDNN_DETERMINISTIC;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

// What cudnnGet*Algorithm_v7 lists, in this order, so that every kind of entry a caller must judge
// comes early: a nonfused Winograd or FFT algorithm (lossy) first where it fits, a nondeterministic
// one first in the backward directions, then the GEMM-like ones. f32 lists every algorithm with
// CUDNN_DEFAULT_MATH (TF32 permitted) and right after it with CUDNN_FMA_MATH; f16/bf16 list every
// algorithm with CUDNN_TENSOR_OP_MATH first, then every one with CUDNN_FMA_MATH; f64 lists each
// once with CUDNN_DEFAULT_MATH. Entries that do not support the configuration keep their place
// among themselves but come after the supported ones, with status NOT_SUPPORTED and no workspace.
std::vector<Candidate> candidates(const Problem& pr) {
  std::vector<int> order;
  switch (pr.dir) {
    case Dir::forward:
      order = {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
               CUDNN_CONVOLUTION_FWD_ALGO_FFT,
               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
               CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
               CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
               CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
               CUDNN_CONVOLUTION_FWD_ALGO_DIRECT};
      break;
    case Dir::backward_data:
      order = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,        CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
               CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,        CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
               CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED};
      break;
    case Dir::backward_filter:
      order = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING,
               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD};
      break;
  }
  std::vector<std::pair<int, cudnnMathType_t>> entries;
  switch (pr.elem) {
    case Elem::f32:
      for (int a : order) {
        entries.push_back({a, CUDNN_DEFAULT_MATH});
        entries.push_back({a, CUDNN_FMA_MATH});
      }
      break;
    case Elem::f16:
    case Elem::bf16:
      for (int a : order) entries.push_back({a, CUDNN_TENSOR_OP_MATH});
      for (int a : order) entries.push_back({a, CUDNN_FMA_MATH});
      break;
    case Elem::f64:
      for (int a : order) entries.push_back({a, CUDNN_DEFAULT_MATH});
      break;
  }
  std::vector<Candidate> out;
  for (auto [a, m] : entries) {
    Candidate c;
    c.algo = a;
    c.math = m;
    c.determinism = nondeterministic(pr.dir, a) ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
    if (unsupported(pr, a).empty()) c.memory = workspace_bytes(pr, a, m);
    else c.status = CUDNN_STATUS_NOT_SUPPORTED;
    out.push_back(c);
  }
  std::stable_partition(out.begin(), out.end(), [](const Candidate& c) { return c.status == CUDNN_STATUS_SUCCESS; });
  return out;
}

template <class Perf, class Algo>
void write_perf(const std::vector<Candidate>& list, int requested, int* returned, Perf* perf) {
  const int n = std::min<int>(requested, static_cast<int>(list.size()));
  for (int i = 0; i < n; ++i) {
    Perf p{};
    p.algo = static_cast<Algo>(list[i].algo);
    p.status = list[i].status;
    p.time = list[i].time;
    p.memory = list[i].memory;
    p.determinism = list[i].determinism;
    p.mathType = list[i].math;
    perf[i] = p;
  }
  *returned = n;
}

cudnnStatus_t check_list_args(const char* what, int requested, const int* returned, const void* perf) {
  if (returned == nullptr || perf == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, "returnedAlgoCount or perfResults is null"));
  if (requested <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "requestedAlgoCount is " + std::to_string(requested)));
  return CUDNN_STATUS_SUCCESS;
}

// ---- running ----

cudnnStatus_t check_data(const char* what, const char* which, const void* p, size_t bytes) {
  if (p == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, std::string(which) + " is null"));
  if (!device_span_ok(p, bytes))
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, std::string(which) +
                                                         " is not device memory of the handle's device "
                                                         "holding the tensor's " +
                                                         std::to_string(bytes) + " bytes"));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_workspace(const char* what, const void* ws, size_t size, size_t need) {
  if (ws == nullptr && size > 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "workSpace is null but workSpaceSizeInBytes is " + std::to_string(size)));
  if (size < need)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "workSpaceSizeInBytes is " + std::to_string(size) + " but the algorithm needs " +
                                 std::to_string(need) + " (cudnnGet*WorkspaceSize)"));
  if (size > 0 && !device_span_ok(ws, size))
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "workSpace is not device memory of the handle's device holding workSpaceSizeInBytes"));
  return CUDNN_STATUS_SUCCESS;
}

double scalar(const void* p, Elem e) {
  // cuDNN's scaling factors: double for double data, float otherwise (host memory)
  return e == Elem::f64 ? *static_cast<const double*>(p) : static_cast<double>(*static_cast<const float*>(p));
}

cudnnStatus_t enqueue(const char* what, const Problem& pr, int algo, cudnnMathType_t math, double alpha, double beta,
                      const void* a, const void* b, void* out, void* ws, cudaStream_t stream) {
  try {
    const size_t need = workspace_bytes(pr, algo, math);
    conv::enqueue(pr.dir, pr.g, numerics(pr, algo, math, alpha, beta), a, b, out, need > 0 ? ws : nullptr, need,
                  stream);
  } catch (const std::exception& e) {
    return fail(CUDNN_STATUS_EXECUTION_FAILED, str_of(what, std::string("launching the kernel failed: ") + e.what()));
  }
  return CUDNN_STATUS_SUCCESS;
}

// The operands of each direction: `a` and `b` as conv::enqueue takes them, and their names.
struct Operands {
  const void* a;
  size_t a_bytes;
  const char* a_name;
  const void* b;
  size_t b_bytes;
  const char* b_name;
  void* out;
  size_t out_bytes;
  const char* out_name;
};

Operands operands(const Problem& pr, const void* first, const void* second, void* out) {
  switch (pr.dir) {
    case Dir::forward: return {first, pr.x_bytes, "x", second, pr.w_bytes, "w", out, pr.y_bytes, "y"};
    case Dir::backward_data: return {first, pr.y_bytes, "dy", second, pr.w_bytes, "w", out, pr.x_bytes, "dx"};
    case Dir::backward_filter: return {first, pr.x_bytes, "x", second, pr.y_bytes, "dy", out, pr.w_bytes, "dw"};
  }
  return {};
}

cudnnStatus_t check_operands(const char* what, const Operands& o) {
  EMBER_CUDNN_TRY(check_data(what, o.a_name, o.a, o.a_bytes));
  EMBER_CUDNN_TRY(check_data(what, o.b_name, o.b, o.b_bytes));
  return check_data(what, o.out_name, o.out, o.out_bytes);
}

// cudnnConvolution{Forward, BackwardData, BackwardFilter}.
cudnnStatus_t convolve(const char* what, cudnnHandle_t h, Dir dir, const void* alpha, cudnnTensorDescriptor_t xd,
                       cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd,
                       const void* first, const void* second, void* out, int algo, void* ws, size_t ws_size,
                       const void* beta) {
  EMBER_CUDNN_TRY(check_handle(h, what));
  if (alpha == nullptr || beta == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, "alpha or beta is null"));
  Problem pr;
  EMBER_CUDNN_TRY(describe(what, dir, xd, wd, cd, yd, pr));
  EMBER_CUDNN_TRY(check_algo(what, pr, algo));
  EMBER_CUDNN_TRY(check_workspace(what, ws, ws_size, workspace_bytes(pr, algo, pr.math)));
  const Operands o = operands(pr, first, second, out);
  EMBER_CUDNN_TRY(check_operands(what, o));
  return enqueue(what, pr, algo, pr.math, scalar(alpha, pr.elem), scalar(beta, pr.elem), o.a, o.b, o.out, ws,
                 h->stream);
}

// cudnnGet*Algorithm_v7.
template <class Perf, class Algo>
cudnnStatus_t heuristics(const char* what, cudnnHandle_t h, Dir dir, cudnnTensorDescriptor_t xd,
                         cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd,
                         int requested, int* returned, Perf* perf) {
  EMBER_CUDNN_TRY(check_handle(h, what));
  EMBER_CUDNN_TRY(check_list_args(what, requested, returned, perf));
  Problem pr;
  EMBER_CUDNN_TRY(describe(what, dir, xd, wd, cd, yd, pr));
  write_perf<Perf, Algo>(candidates(pr), requested, returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

// cudnnFind*AlgorithmEx: synchronises the handle's stream (through the simulated runtime, so a
// stream capture refuses it as on a GPU), then runs every supported candidate on the caller's
// buffers (the output is scratch, as documented), timing each between two events, and returns
// them fastest first; failed and unsupported ones follow. A candidate needing more workspace than
// given gets CUDNN_STATUS_ALLOC_FAILED, which the perf-struct documentation names for "the provided
// workspace is insufficient" (cuDNN 9's header defines it as
// CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED). A failing CUDA runtime call (the refused
// synchronisation during a capture among them) returns CUDNN_STATUS_EXECUTION_FAILED_CUDART: the
// status cuDNN 9 names for a CUDA runtime failure. BAD_PARAM_CUDA_GRAPH_MISMATCH is about the
// cudnn graph API's CUDA graphs, not about stream capture.
template <class Perf, class Algo>
cudnnStatus_t find(const char* what, cudnnHandle_t h, Dir dir, cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                   cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, const void* first, const void* second,
                   void* out, int requested, int* returned, Perf* perf, void* ws, size_t ws_size) {
  EMBER_CUDNN_TRY(check_handle(h, what));
  EMBER_CUDNN_TRY(check_list_args(what, requested, returned, perf));
  Problem pr;
  EMBER_CUDNN_TRY(describe(what, dir, xd, wd, cd, yd, pr));
  if (ws == nullptr && ws_size > 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "workSpace is null but workSpaceSizeInBytes is " + std::to_string(ws_size)));
  if (ws_size > 0 && !device_span_ok(ws, ws_size))
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "workSpace is not device memory of the handle's device holding workSpaceSizeInBytes"));
  const Operands o = operands(pr, first, second, out);
  EMBER_CUDNN_TRY(check_operands(what, o));
  cudaStream_t st = h->stream;
  if (cudaError_t e = cudaStreamSynchronize(st); e != cudaSuccess)
    return fail(CUDNN_STATUS_EXECUTION_FAILED_CUDART,
                str_of(what, std::string("synchronising the handle's stream failed: ") + cudaGetErrorString(e)));
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    if (start != nullptr) cudaEventDestroy(start);
    return fail(CUDNN_STATUS_EXECUTION_FAILED_CUDART, str_of(what, "creating the timing events failed"));
  }
  std::vector<Candidate> list = candidates(pr);
  cudnnStatus_t result = CUDNN_STATUS_SUCCESS;
  for (Candidate& c : list) {
    if (c.status != CUDNN_STATUS_SUCCESS) continue;
    if (c.memory > ws_size) {
      c.status = CUDNN_STATUS_ALLOC_FAILED;
      continue;
    }
    if (cudaEventRecord(start, st) != cudaSuccess) {
      result = fail(CUDNN_STATUS_EXECUTION_FAILED_CUDART, str_of(what, "recording a timing event failed"));
      break;
    }
    c.status = enqueue(what, pr, c.algo, c.math, 1.0, 0.0, o.a, o.b, o.out, ws, st);
    if (c.status != CUDNN_STATUS_SUCCESS) continue;
    float ms = -1;
    if (cudaEventRecord(stop, st) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
        cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
      c.status = CUDNN_STATUS_EXECUTION_FAILED;
      continue;
    }
    c.time = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (result != CUDNN_STATUS_SUCCESS) return result;
  std::stable_sort(list.begin(), list.end(), [](const Candidate& x, const Candidate& y) {
    const bool xs = x.status == CUDNN_STATUS_SUCCESS, ys = y.status == CUDNN_STATUS_SUCCESS;
    if (xs != ys) return xs;
    return xs && x.time < y.time;
  });
  write_perf<Perf, Algo>(list, requested, returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

// cudnnGet*WorkspaceSize.
cudnnStatus_t workspace_size(const char* what, cudnnHandle_t h, Dir dir, cudnnTensorDescriptor_t xd,
                             cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd,
                             int algo, size_t* size) {
  EMBER_CUDNN_TRY(check_handle(h, what));
  if (size == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, "sizeInBytes is null"));
  Problem pr;
  EMBER_CUDNN_TRY(describe(what, dir, xd, wd, cd, yd, pr));
  EMBER_CUDNN_TRY(check_algo(what, pr, algo));
  *size = workspace_bytes(pr, algo, pr.math);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

}  // namespace ember::sim::libs::cudnn

using namespace ember::sim::libs;
using namespace ember::sim::libs::cudnn;
using ember::sim::libs::conv::Dir;

// ---- filter descriptors ----

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* filterDesc) {
  if (filterDesc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreateFilterDescriptor: null");
  *filterDesc = revive<cudnnFilterStruct>();
  (*filterDesc)->magic = kFilterMagic;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc) {
  if (filterDesc == nullptr) return CUDNN_STATUS_SUCCESS;  // destroying null is a no-op
  if (filterDesc->magic != kFilterMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroyFilterDescriptor: not a live descriptor");
  bury(filterDesc);
  return CUDNN_STATUS_SUCCESS;
}

// Documented: BAD_PARAM when k, c, h or w is not positive, or format or data type is invalid.
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  const char* what = "cudnnSetFilter4dDescriptor";
  if (filterDesc == nullptr || filterDesc->magic != kFilterMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "not a live descriptor"));
  Elem e{};
  if (!elem_of(dataType, e))
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "data type " + std::to_string(dataType) + " is not one the legacy API computes with"));
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "format must be NCHW (KCRS) or NHWC (KRSC)"));
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "k, c, h and w must be positive (got " + std::to_string(k) + ", " + std::to_string(c) +
                                 ", " + std::to_string(h) + ", " + std::to_string(w) + ")"));
  filterDesc->type = dataType;
  filterDesc->format = format;
  filterDesc->k = k;
  filterDesc->c = c;
  filterDesc->r = h;
  filterDesc->s = w;
  filterDesc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t filterDesc, cudnnDataType_t* dataType,
                                         cudnnTensorFormat_t* format, int* k, int* c, int* h, int* w) {
  const char* what = "cudnnGetFilter4dDescriptor";
  if (cudnnStatus_t st = check_filter(filterDesc, what, "filter"); st != CUDNN_STATUS_SUCCESS) return st;
  if (dataType == nullptr || format == nullptr || k == nullptr || c == nullptr || h == nullptr || w == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, "an output pointer is null"));
  *dataType = filterDesc->type;
  *format = filterDesc->format;
  *k = filterDesc->k;
  *c = filterDesc->c;
  *h = filterDesc->r;
  *w = filterDesc->s;
  return CUDNN_STATUS_SUCCESS;
}

// ---- convolution descriptors ----

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* convDesc) {
  if (convDesc == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreateConvolutionDescriptor: null");
  *convDesc = revive<cudnnConvolutionStruct>();
  (*convDesc)->magic = kConvMagic;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc) {
  if (convDesc == nullptr) return CUDNN_STATUS_SUCCESS;
  if (convDesc->magic != kConvMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroyConvolutionDescriptor: not a live descriptor");
  bury(convDesc);
  return CUDNN_STATUS_SUCCESS;
}

// Documented: BAD_PARAM when a padding is negative, a stride or dilation not positive, or the mode
// or compute type invalid. The group count and math type set before are kept.
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  const char* what = "cudnnSetConvolution2dDescriptor";
  if (convDesc == nullptr || convDesc->magic != kConvMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "not a live descriptor"));
  if (pad_h < 0 || pad_w < 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "padding " + std::to_string(pad_h) + "x" + std::to_string(pad_w) + " is negative"));
  if (u <= 0 || v <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "stride " + std::to_string(u) + "x" + std::to_string(v) + " is not positive"));
  if (dilation_h <= 0 || dilation_w <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "dilation " + std::to_string(dilation_h) + "x" +
                                                         std::to_string(dilation_w) + " is not positive"));
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "unknown mode " + std::to_string(mode)));
  Elem e{};
  if (!elem_of(computeType, e))
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "compute type " + std::to_string(computeType) +
                                                         " is not one the legacy API computes with"));
  convDesc->pad_h = pad_h;
  convDesc->pad_w = pad_w;
  convDesc->stride_h = u;
  convDesc->stride_w = v;
  convDesc->dil_h = dilation_h;
  convDesc->dil_w = dilation_w;
  convDesc->mode = mode;
  convDesc->compute = computeType;
  convDesc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount) {
  const char* what = "cudnnSetConvolutionGroupCount";
  if (convDesc == nullptr || convDesc->magic != kConvMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "not a live descriptor"));
  if (groupCount <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "group count " + std::to_string(groupCount) + " is not positive"));
  convDesc->groups = groupCount;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType) {
  const char* what = "cudnnSetConvolutionMathType";
  if (convDesc == nullptr || convDesc->magic != kConvMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "not a live descriptor"));
  if (mathType != CUDNN_DEFAULT_MATH && mathType != CUDNN_TENSOR_OP_MATH &&
      mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && mathType != CUDNN_FMA_MATH)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "unknown math type " + std::to_string(mathType)));
  convDesc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t* mathType) {
  const char* what = "cudnnGetConvolutionMathType";
  if (convDesc == nullptr || convDesc->magic != kConvMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "not a live descriptor"));
  if (mathType == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, "mathType is null"));
  *mathType = convDesc->math;
  return CUDNN_STATUS_SUCCESS;
}

// Documented: BAD_PARAM when the input's feature maps differ from the filter's (times the group
// count) or the output would be empty; each output dimension is
// 1 + (input + 2 * pad - ((filter - 1) * dilation + 1)) / stride.
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc, int* n, int* c, int* h,
                                                    int* w) {
  const char* what = "cudnnGetConvolution2dForwardOutputDim";
  if (cudnnStatus_t st = check_conv(convDesc, what); st != CUDNN_STATUS_SUCCESS) return st;
  if (cudnnStatus_t st = check_tensor(inputTensorDesc, what, "input"); st != CUDNN_STATUS_SUCCESS) return st;
  if (cudnnStatus_t st = check_filter(filterDesc, what, "filter"); st != CUDNN_STATUS_SUCCESS) return st;
  if (n == nullptr || c == nullptr || h == nullptr || w == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, str_of(what, "an output pointer is null"));
  const cudnnTensorStruct& x = *inputTensorDesc;
  if (x.nb_dims != 4) return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "the input is not 4-d"));
  if (x.dims[1] != filterDesc->c * convDesc->groups)
    return fail(CUDNN_STATUS_BAD_PARAM,
                str_of(what, "the input has " + std::to_string(x.dims[1]) + " channels, the filter " +
                                 std::to_string(filterDesc->c) + " per group with " + std::to_string(convDesc->groups) +
                                 " groups"));
  const int64_t eff_r = int64_t{convDesc->dil_h} * (filterDesc->r - 1) + 1;
  const int64_t eff_s = int64_t{convDesc->dil_w} * (filterDesc->s - 1) + 1;
  const int64_t span_h = x.dims[2] + 2 * int64_t{convDesc->pad_h} - eff_r;
  const int64_t span_w = x.dims[3] + 2 * int64_t{convDesc->pad_w} - eff_s;
  if (span_h < 0 || span_w < 0)
    return fail(CUDNN_STATUS_BAD_PARAM, str_of(what, "the (dilated) filter is larger than the padded input"));
  *n = x.dims[0];
  *c = filterDesc->k;
  *h = static_cast<int>(span_h / convDesc->stride_h + 1);
  *w = static_cast<int>(span_w / convDesc->stride_w + 1);
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithm queries ----

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                     const cudnnFilterDescriptor_t filterDesc,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t destDesc,
                                                     const int requestedAlgoCount, int* returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      "cudnnGetConvolutionForwardAlgorithm_v7", handle, Dir::forward, srcDesc, filterDesc, convDesc, destDesc,
      requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount,
    int* returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      "cudnnGetConvolutionBackwardDataAlgorithm_v7", handle, Dir::backward_data, gradDesc, filterDesc, convDesc,
      diffDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                            const cudnnTensorDescriptor_t diffDesc,
                                                            const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t gradDesc,
                                                            const int requestedAlgoCount, int* returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      "cudnnGetConvolutionBackwardFilterAlgorithm_v7", handle, Dir::backward_filter, srcDesc, gradDesc, convDesc,
      diffDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  return workspace_size("cudnnGetConvolutionForwardWorkspaceSize", handle, Dir::forward, xDesc, wDesc, convDesc, yDesc,
                        static_cast<int>(algo), sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                           const cudnnTensorDescriptor_t dyDesc,
                                                           const cudnnConvolutionDescriptor_t convDesc,
                                                           const cudnnTensorDescriptor_t dxDesc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  return workspace_size("cudnnGetConvolutionBackwardDataWorkspaceSize", handle, Dir::backward_data, dxDesc, wDesc,
                        convDesc, dyDesc, static_cast<int>(algo), sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                             const cudnnTensorDescriptor_t dyDesc,
                                                             const cudnnConvolutionDescriptor_t convDesc,
                                                             const cudnnFilterDescriptor_t gradDesc,
                                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                                             size_t* sizeInBytes) {
  return workspace_size("cudnnGetConvolutionBackwardFilterWorkspaceSize", handle, Dir::backward_filter, xDesc, gradDesc,
                        convDesc, dyDesc, static_cast<int>(algo), sizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                     const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t yDesc, void* y,
                                                     const int requestedAlgoCount, int* returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t* perfResults, void* workSpace,
                                                     size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      "cudnnFindConvolutionForwardAlgorithmEx", handle, Dir::forward, xDesc, wDesc, convDesc, yDesc, x, w, y,
      requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                          const void* w, const cudnnTensorDescriptor_t dyDesc,
                                                          const void* dy, const cudnnConvolutionDescriptor_t convDesc,
                                                          const cudnnTensorDescriptor_t dxDesc, void* dx,
                                                          const int requestedAlgoCount, int* returnedAlgoCount,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perfResults,
                                                          void* workSpace, size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      "cudnnFindConvolutionBackwardDataAlgorithmEx", handle, Dir::backward_data, dxDesc, wDesc, convDesc, dyDesc, dy, w,
      dx, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                            const void* x, const cudnnTensorDescriptor_t dyDesc,
                                                            const void* y, const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t dwDesc, void* dw,
                                                            const int requestedAlgoCount, int* returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perfResults,
                                                            void* workSpace, size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      "cudnnFindConvolutionBackwardFilterAlgorithmEx", handle, Dir::backward_filter, xDesc, dwDesc, convDesc, dyDesc, x,
      y, dw, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

// ---- the convolutions ----

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  return convolve("cudnnConvolutionForward", handle, Dir::forward, alpha, xDesc, wDesc, convDesc, yDesc, x, w, y,
                  static_cast<int>(algo), workSpace, workSpaceSizeInBytes, beta);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void* w, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return convolve("cudnnConvolutionBackwardData", handle, Dir::backward_data, alpha, dxDesc, wDesc, convDesc, dyDesc,
                  dy, w, dx, static_cast<int>(algo), workSpace, workSpaceSizeInBytes, beta);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return convolve("cudnnConvolutionBackwardFilter", handle, Dir::backward_filter, alpha, xDesc, dwDesc, convDesc,
                  dyDesc, x, dy, dw, static_cast<int>(algo), workSpace, workSpaceSizeInBytes, beta);
}

#endif  // EMBER_WITH_CUDNN
