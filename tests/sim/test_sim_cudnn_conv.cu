// The simulator's cuDNN convolutions (sim/libs/cudnn.cpp, conv.cu), called through
// cudnn.h as ember's cuDNN variants call them: one refused call per contract rule with the status
// cuDNN documents; the three directions against a double-precision host loop (NCHW and NHWC,
// groups, stride, padding, dilation, convolution mode, f64/f32/f16, alpha and beta); the numerics
// the emulation models (TF32 under default math, nondeterministic reduction orders, the FFT-like
// error); the algorithm lists and Find; graph capture. Simulator build only.
#if EMBER_WITH_CUDNN  // built where CMake found cudnn.h (CMakeLists.txt)

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sim/libs/common.h"
#include "tests/sim/cudnn_objects.h"

namespace {

using ember::sim::libs::Elem;
using ember::sim::libs::load_elem;
using ember::sim::libs::round_to;
using ember::sim::libs::store_elem;

enum Dir { kFwd, kBwdData, kBwdFilter };

struct Cfg {
  int N = 2, C = 3, H = 5, W = 5, K = 4, R = 3, S = 3, G = 1;
  int ph = 1, pw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  bool nhwc = false;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int P() const { return (H + 2 * ph - dh * (R - 1) - 1) / sh + 1; }
  int Q() const { return (W + 2 * pw - dw * (S - 1) - 1) / sw + 1; }
  int Cg() const { return C / G; }
  Elem elem() const {
    switch (type) {
      case CUDNN_DATA_DOUBLE: return Elem::f64;
      case CUDNN_DATA_HALF: return Elem::f16;
      case CUDNN_DATA_BFLOAT16: return Elem::bf16;
      default: return Elem::f32;
    }
  }
  cudnnDataType_t compute() const { return type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }
};

// ---- RAII wrappers (tests/sim/cudnn_objects.h) and the descriptors of a problem ----

using ember::testing::cudnn::CDesc;
using ember::testing::cudnn::DevBuf;
using ember::testing::cudnn::FDesc;
using ember::testing::cudnn::Handle;

struct TDesc : ember::testing::cudnn::TensorDesc {
  cudnnStatus_t set(cudnnDataType_t t, int n, int c, int h, int w, bool nhwc) {
    return nhwc ? cudnnSetTensor4dDescriptorEx(d, t, n, c, h, w, h * w * c, 1, w * c, c)
                : cudnnSetTensor4dDescriptorEx(d, t, n, c, h, w, c * h * w, h * w, w, 1);
  }
};
struct Descs {
  TDesc x, y;
  FDesc w;
  CDesc conv;
  explicit Descs(const Cfg& c, cudnnMathType_t math = CUDNN_FMA_MATH) {
    REQUIRE(x.set(c.type, c.N, c.C, c.H, c.W, c.nhwc) == CUDNN_STATUS_SUCCESS);
    REQUIRE(y.set(c.type, c.N, c.K, c.P(), c.Q(), c.nhwc) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(w.d, c.type, c.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, c.K, c.Cg(), c.R,
                                       c.S) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(conv.d, c.ph, c.pw, c.sh, c.sw, c.dh, c.dw, c.mode, c.compute()) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionGroupCount(conv.d, c.G) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionMathType(conv.d, math) == CUDNN_STATUS_SUCCESS);
  }
};

// ---- tensors: logical [a, b, c, d] values in double, stored NCHW-like or NHWC-like ----

struct Layout {
  int d[4];
  bool last;  // channels (dimension 1) innermost
  size_t count() const { return static_cast<size_t>(d[0]) * d[1] * d[2] * d[3]; }
  int64_t offset(int64_t i) const {  // logical (row-major) index -> storage offset
    const int64_t w = i % d[3], h = (i / d[3]) % d[2], c = (i / (int64_t{d[3]} * d[2])) % d[1],
                  n = i / (int64_t{d[3]} * d[2] * d[1]);
    return last ? ((n * d[2] + h) * d[3] + w) * d[1] + c : ((n * d[1] + c) * d[2] + h) * d[3] + w;
  }
};
Layout x_layout(const Cfg& c) { return {{c.N, c.C, c.H, c.W}, c.nhwc}; }
Layout w_layout(const Cfg& c) { return {{c.K, c.Cg(), c.R, c.S}, c.nhwc}; }
Layout y_layout(const Cfg& c) { return {{c.N, c.K, c.P(), c.Q()}, c.nhwc}; }

std::vector<double> random_values(size_t n, uint64_t seed, Elem e) {
  std::vector<double> v(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (double& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = round_to(static_cast<double>(s >> 11) * 0x1p-53 * 2 - 1, e);  // exactly representable
  }
  return v;
}

void upload(void* dev, const std::vector<double>& v, const Layout& l, Elem e) {
  std::vector<unsigned char> buf(l.count() * ember::sim::libs::elem_bytes(e));
  for (size_t i = 0; i < v.size(); ++i) store_elem(buf.data(), l.offset(static_cast<int64_t>(i)), e, v[i]);
  REQUIRE(cudaMemcpy(dev, buf.data(), buf.size(), cudaMemcpyHostToDevice) == cudaSuccess);
}
std::vector<double> download(const void* dev, const Layout& l, Elem e) {
  std::vector<unsigned char> buf(l.count() * ember::sim::libs::elem_bytes(e));
  REQUIRE(cudaMemcpy(buf.data(), dev, buf.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  std::vector<double> v(l.count());
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_elem(buf.data(), l.offset(static_cast<int64_t>(i)), e);
  return v;
}

// ---- the reference: every tap of the forward convolution, accumulated in double ----

struct Ref {
  std::vector<double> y, dx, dw;              // results
  std::vector<double> y_mag, dx_mag, dw_mag;  // sums of |products|
};
Ref reference(const Cfg& c, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy) {
  const int P = c.P(), Q = c.Q(), Cg = c.Cg(), Kg = c.K / c.G;
  Ref r;
  r.y.assign(y_layout(c).count(), 0), r.y_mag = r.y;
  r.dx.assign(x_layout(c).count(), 0), r.dx_mag = r.dx;
  r.dw.assign(w_layout(c).count(), 0), r.dw_mag = r.dw;
  for (int n = 0; n < c.N; ++n)
    for (int k = 0; k < c.K; ++k)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q)
          for (int ci = 0; ci < Cg; ++ci)
            for (int fr = 0; fr < c.R; ++fr)
              for (int fs = 0; fs < c.S; ++fs) {
                const int h = p * c.sh - c.ph + fr * c.dh, wi = q * c.sw - c.pw + fs * c.dw;
                if (h < 0 || h >= c.H || wi < 0 || wi >= c.W) continue;
                const int cc = (k / Kg) * Cg + ci;
                // convolution mode applies the filter rotated by 180 degrees
                const int wr = c.mode == CUDNN_CONVOLUTION ? c.R - 1 - fr : fr;
                const int ws = c.mode == CUDNN_CONVOLUTION ? c.S - 1 - fs : fs;
                const size_t xi = ((size_t(n) * c.C + cc) * c.H + h) * c.W + wi;
                const size_t wj = ((size_t(k) * Cg + ci) * c.R + wr) * c.S + ws;
                const size_t yi = ((size_t(n) * c.K + k) * P + p) * Q + q;
                r.y[yi] += x[xi] * w[wj];
                r.y_mag[yi] += std::fabs(x[xi] * w[wj]);
                r.dx[xi] += dy[yi] * w[wj];
                r.dx_mag[xi] += std::fabs(dy[yi] * w[wj]);
                r.dw[wj] += x[xi] * dy[yi];
                r.dw_mag[wj] += std::fabs(x[xi] * dy[yi]);
              }
  return r;
}

// The inputs of one configuration, random, and its reference.
struct Problem {
  Cfg c;
  std::vector<double> x, w, dy;
  Ref ref;
  explicit Problem(const Cfg& cfg, uint64_t seed = 1) : c(cfg) {
    x = random_values(x_layout(c).count(), seed, c.elem());
    w = random_values(w_layout(c).count(), seed + 1, c.elem());
    dy = random_values(y_layout(c).count(), seed + 2, c.elem());
    ref = reference(c, x, w, dy);
  }
};

struct Run {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::vector<double> out;
};

// Runs one direction with `algo` and `math` on the handle's stream: out = alpha * op + beta * old
// (`old` uploaded first when beta is not 0), the workspace cudnnGet*WorkspaceSize asks for.
Run run(Handle& h, const Problem& pb, Dir dir, int algo, cudnnMathType_t math, double alpha = 1, double beta = 0,
        const std::vector<double>* old = nullptr) {
  const Cfg& c = pb.c;
  const Elem e = c.elem();
  const size_t eb = ember::sim::libs::elem_bytes(e);
  Descs d(c, math);
  DevBuf x(x_layout(c).count() * eb), w(w_layout(c).count() * eb), y(y_layout(c).count() * eb);
  size_t need = 0;
  Run r;
  const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
  const void* pa = e == Elem::f64 ? static_cast<const void*>(&alpha) : &fa;
  const void* pb_ = e == Elem::f64 ? static_cast<const void*>(&beta) : &fb;
  switch (dir) {
    case kFwd:
      r.status = cudnnGetConvolutionForwardWorkspaceSize(h.h, d.x.d, d.w.d, d.conv.d, d.y.d,
                                                         static_cast<cudnnConvolutionFwdAlgo_t>(algo), &need);
      break;
    case kBwdData:
      r.status = cudnnGetConvolutionBackwardDataWorkspaceSize(h.h, d.w.d, d.y.d, d.conv.d, d.x.d,
                                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &need);
      break;
    case kBwdFilter:
      r.status = cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h.h, d.x.d, d.y.d, d.conv.d, d.w.d, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &need);
      break;
  }
  if (r.status != CUDNN_STATUS_SUCCESS) return r;
  DevBuf ws(need);
  void* wsp = need > 0 ? ws.p : nullptr;
  // The direction's two operands and its output: forward x * w -> y, backward-data dy * w -> dx,
  // backward-filter x * dy -> dw.
  struct Operand {
    void* p;
    const std::vector<double>* v;
    Layout l;
  };
  const Operand xo{x.p, &pb.x, x_layout(c)}, wo{w.p, &pb.w, w_layout(c)}, yo{y.p, &pb.dy, y_layout(c)};
  const Operand a = dir == kBwdData ? yo : xo, b = dir == kBwdFilter ? yo : wo;
  const Operand out = dir == kFwd ? yo : dir == kBwdData ? xo : wo;
  upload(a.p, *a.v, a.l, e);
  upload(b.p, *b.v, b.l, e);
  if (old != nullptr) upload(out.p, *old, out.l, e);
  switch (dir) {
    case kFwd:
      r.status = cudnnConvolutionForward(h.h, pa, d.x.d, x.p, d.w.d, w.p, d.conv.d,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(algo), wsp, need, pb_, d.y.d, y.p);
      break;
    case kBwdData:
      r.status =
          cudnnConvolutionBackwardData(h.h, pa, d.w.d, w.p, d.y.d, y.p, d.conv.d,
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), wsp, need, pb_, d.x.d, x.p);
      break;
    case kBwdFilter:
      r.status = cudnnConvolutionBackwardFilter(h.h, pa, d.x.d, x.p, d.y.d, y.p, d.conv.d,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), wsp, need, pb_,
                                                d.w.d, w.p);
      break;
  }
  if (r.status != CUDNN_STATUS_SUCCESS) return r;
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  r.out = download(out.p, out.l, e);
  return r;
}

const std::vector<double>& ref_of(const Problem& pb, Dir dir) {
  return dir == kFwd ? pb.ref.y : dir == kBwdData ? pb.ref.dx : pb.ref.dw;
}
const std::vector<double>& mag_of(const Problem& pb, Dir dir) {
  return dir == kFwd ? pb.ref.y_mag : dir == kBwdData ? pb.ref.dx_mag : pb.ref.dw_mag;
}

// The largest |got - want| / (sum of |products| + tiny) over the elements.
double worst_error(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& mag) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]) / (mag[i] + 1e-30));
  return worst;
}

const char* dir_name(Dir d) { return d == kFwd ? "forward" : d == kBwdData ? "backward-data" : "backward-filter"; }

// A deterministic implicit-GEMM algorithm of each direction (no workspace, every configuration).
int plain_algo(Dir d) {
  if (d == kFwd) return CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  return d == kBwdData ? static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1)
                       : static_cast<int>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
}

std::string last_error() {
  char buf[512];
  cudnnGetLastErrorString(buf, sizeof buf);
  return buf;
}

}  // namespace

TEST_CASE("simulated cuDNN convolutions: every contract rule refuses with the documented status",
          "[gpu][sim][vendor-sim]") {
  Handle h;
  const Cfg c;  // f32 [2,3,5,5] * [4,3,3,3], pad 1
  Descs d(c);
  DevBuf x(x_layout(c).count() * 4), w(w_layout(c).count() * 4), y(y_layout(c).count() * 4);
  REQUIRE(cudaMemset(x.p, 0, x_layout(c).count() * 4) == cudaSuccess);
  REQUIRE(cudaMemset(w.p, 0, w_layout(c).count() * 4) == cudaSuccess);
  const float one = 1, zero = 0;
  const auto fwd_with = [&](cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd,
                            cudnnTensorDescriptor_t yd, int algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                            const void* xp = nullptr, void* ws = nullptr, size_t wss = 0) {
    return cudnnConvolutionForward(h.h, &one, xd, xp != nullptr ? xp : x.p, wd, w.p, cd,
                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, wss, &zero, yd, y.p);
  };
  CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d) == CUDNN_STATUS_SUCCESS);

  SECTION("descriptors never set or destroyed") {
    FDesc unset;
    CHECK(fwd_with(d.x.d, unset.d, d.conv.d, d.y.d) == CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    CDesc unset_conv;
    CHECK(fwd_with(d.x.d, d.w.d, unset_conv.d, d.y.d) == CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    cudnnFilterDescriptor_t gone = nullptr;
    REQUIRE(cudnnCreateFilterDescriptor(&gone) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(gone, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, 3, 3) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnDestroyFilterDescriptor(gone) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(d.x.d, gone, d.conv.d, d.y.d) == CUDNN_STATUS_BAD_PARAM);
    CHECK_THAT(last_error(), Catch::Contains("destroyed"));
  }
  SECTION("descriptor values: sizes, padding, stride, dilation, groups, math type, mode") {
    FDesc f;
    CHECK(cudnnSetFilter4dDescriptor(f.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 0, 3, 3, 3) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnSetFilter4dDescriptor(f.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, -1, 3) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnSetFilter4dDescriptor(f.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW_VECT_C, 4, 3, 3, 3) ==
          CUDNN_STATUS_BAD_PARAM);
    CDesc cv;
    CHECK(cudnnSetConvolution2dDescriptor(cv.d, -1, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
          CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnSetConvolution2dDescriptor(cv.d, 0, 0, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
          CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnSetConvolution2dDescriptor(cv.d, 0, 0, 1, 1, 1, 0, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
          CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnSetConvolution2dDescriptor(cv.d, 0, 0, 1, 1, 1, 1, static_cast<cudnnConvolutionMode_t>(7),
                                          CUDNN_DATA_FLOAT) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnSetConvolutionGroupCount(cv.d, 0) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnSetConvolutionMathType(cv.d, static_cast<cudnnMathType_t>(9)) == CUDNN_STATUS_BAD_PARAM);
    cudnnMathType_t m{};
    REQUIRE(cudnnSetConvolutionMathType(cv.d, CUDNN_TENSOR_OP_MATH) == CUDNN_STATUS_SUCCESS);
    CHECK((cudnnGetConvolutionMathType(cv.d, &m) == CUDNN_STATUS_SUCCESS && m == CUDNN_TENSOR_OP_MATH));
    int n = 0, k = 0, oh = 0, ow = 0;
    CHECK(cudnnGetConvolution2dForwardOutputDim(d.conv.d, d.x.d, d.w.d, &n, &k, &oh, &ow) == CUDNN_STATUS_SUCCESS);
    CHECK((n == 2 && k == 4 && oh == 5 && ow == 5));
    cudnnDataType_t t{};
    cudnnTensorFormat_t fmt{};
    int fk = 0, fc = 0, fh = 0, fw = 0;
    CHECK(cudnnGetFilter4dDescriptor(d.w.d, &t, &fmt, &fk, &fc, &fh, &fw) == CUDNN_STATUS_SUCCESS);
    CHECK((t == CUDNN_DATA_FLOAT && fmt == CUDNN_TENSOR_NCHW && fk == 4 && fc == 3 && fh == 3 && fw == 3));
  }
  SECTION("channels and groups: C != c * groups, K not divisible by groups") {
    FDesc f;
    REQUIRE(cudnnSetFilter4dDescriptor(f.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 2, 3, 3) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(d.x.d, f.d, d.conv.d, d.y.d) == CUDNN_STATUS_BAD_PARAM);
    CHECK_THAT(last_error(), Catch::Contains("channels"));
    // C = 4, groups 2, c = 2, but K = 3
    TDesc x4, y3;
    REQUIRE(x4.set(CUDNN_DATA_FLOAT, 1, 4, 5, 5, false) == CUDNN_STATUS_SUCCESS);
    REQUIRE(y3.set(CUDNN_DATA_FLOAT, 1, 3, 5, 5, false) == CUDNN_STATUS_SUCCESS);
    FDesc f3;
    REQUIRE(cudnnSetFilter4dDescriptor(f3.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 2, 3, 3) == CUDNN_STATUS_SUCCESS);
    CDesc g2;
    REQUIRE(cudnnSetConvolution2dDescriptor(g2.d, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionGroupCount(g2.d, 2) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(x4.d, f3.d, g2.d, y3.d) == CUDNN_STATUS_BAD_PARAM);
    CHECK_THAT(last_error(), Catch::Contains("divisible"));
  }
  SECTION("data types differ; compute type not allowed for the data type") {
    TDesc xh;
    REQUIRE(xh.set(CUDNN_DATA_HALF, 2, 3, 5, 5, false) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(xh.d, d.w.d, d.conv.d, d.y.d) == CUDNN_STATUS_BAD_PARAM);
    CDesc dbl;
    REQUIRE(cudnnSetConvolution2dDescriptor(dbl.d, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(d.x.d, d.w.d, dbl.d, d.y.d) == CUDNN_STATUS_NOT_SUPPORTED);  // f32 data, double compute
    CDesc half;
    REQUIRE(cudnnSetConvolution2dDescriptor(half.d, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_HALF) ==
            CUDNN_STATUS_SUCCESS);
    TDesc xb, yb;
    FDesc wb;
    REQUIRE(xb.set(CUDNN_DATA_BFLOAT16, 2, 3, 5, 5, false) == CUDNN_STATUS_SUCCESS);
    REQUIRE(yb.set(CUDNN_DATA_BFLOAT16, 2, 4, 5, 5, false) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(wb.d, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NCHW, 4, 3, 3, 3) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(xb.d, wb.d, half.d, yb.d) == CUDNN_STATUS_NOT_SUPPORTED);  // bf16 data, half compute
  }
  SECTION("y's shape: batch, channels, spatial size") {
    TDesc bad;
    REQUIRE(bad.set(CUDNN_DATA_FLOAT, 2, 4, 4, 5, false) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, bad.d) == CUDNN_STATUS_BAD_PARAM);
    REQUIRE(bad.set(CUDNN_DATA_FLOAT, 1, 4, 5, 5, false) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, bad.d) == CUDNN_STATUS_BAD_PARAM);
    REQUIRE(bad.set(CUDNN_DATA_FLOAT, 2, 5, 5, 5, false) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, bad.d) == CUDNN_STATUS_BAD_PARAM);
  }
  SECTION("layouts: an NHWC filter needs NHWC x and y; an NCHW filter takes any") {
    FDesc krsc;
    REQUIRE(cudnnSetFilter4dDescriptor(krsc.d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 4, 3, 3, 3) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(d.x.d, krsc.d, d.conv.d, d.y.d) == CUDNN_STATUS_NOT_SUPPORTED);
    TDesc xl, yl;
    REQUIRE(xl.set(CUDNN_DATA_FLOAT, 2, 3, 5, 5, true) == CUDNN_STATUS_SUCCESS);
    REQUIRE(yl.set(CUDNN_DATA_FLOAT, 2, 4, 5, 5, true) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(xl.d, krsc.d, d.conv.d, yl.d) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(xl.d, d.w.d, d.conv.d, yl.d) == CUDNN_STATUS_SUCCESS);
  }
  SECTION("algorithms: unknown, not supporting the configuration") {
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, 99) == CUDNN_STATUS_BAD_PARAM);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT) == CUDNN_STATUS_NOT_SUPPORTED);
    size_t need = 0;
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h.h, d.x.d, d.w.d, d.conv.d, d.y.d, CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                                                  &need) == CUDNN_STATUS_SUCCESS);
    Cfg s2 = c;
    s2.sh = s2.sw = 2;
    Descs d2(s2);
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h.h, d2.x.d, d2.w.d, d2.conv.d, d2.y.d,
                                                  CUDNN_CONVOLUTION_FWD_ALGO_FFT, &need) == CUDNN_STATUS_NOT_SUPPORTED);
    CHECK_THAT(last_error(), Catch::Contains("stride 1"));
    Cfg k5 = c;
    k5.R = k5.S = 5;
    k5.ph = k5.pw = 2;
    Descs d5(k5);
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h.h, d5.x.d, d5.w.d, d5.conv.d, d5.y.d,
                                                  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
                                                  &need) == CUDNN_STATUS_NOT_SUPPORTED);
    Cfg dil = c;
    dil.dh = 2;
    dil.ph = 2;
    Descs dd(dil);
    CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h.h, dd.x.d, dd.y.d, dd.conv.d, dd.w.d,
                                                         CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
                                                         &need) == CUDNN_STATUS_NOT_SUPPORTED);
  }
  SECTION("workspace: null with a size, smaller than the algorithm needs") {
    size_t need = 0;
    REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(h.h, d.x.d, d.w.d, d.conv.d, d.y.d, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                                    &need) == CUDNN_STATUS_SUCCESS);
    REQUIRE(need > 0);
    DevBuf ws(need);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, nullptr, nullptr, need) ==
          CUDNN_STATUS_BAD_PARAM);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, nullptr, ws.p, need - 1) ==
          CUDNN_STATUS_BAD_PARAM);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, nullptr, ws.p, need) ==
          CUDNN_STATUS_SUCCESS);
  }
  SECTION("workspace: the size is the math type's; another math type's is refused") {
    // cuDNN's kernels differ by math type and its size queries read the descriptor's: the
    // simulator's FMA kernels need more than the TF32-permitting ones, so running FMA math on a
    // size listed for default math is caught (workspace_bytes in sim/libs/cudnn.cpp)
    Descs dflt(c, CUDNN_DEFAULT_MATH);
    const int algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    size_t fma = 0, tf32 = 0;
    REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(h.h, d.x.d, d.w.d, d.conv.d, d.y.d,
                                                    static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                                    &fma) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(h.h, dflt.x.d, dflt.w.d, dflt.conv.d, dflt.y.d,
                                                    static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                                    &tf32) == CUDNN_STATUS_SUCCESS);
    REQUIRE(tf32 > 0);
    CHECK(fma > tf32);
    // the list gives each entry the size of its own math type
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int n = 0;
    REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(h.h, d.x.d, d.w.d, d.conv.d, d.y.d, 16, &n, perf) ==
            CUDNN_STATUS_SUCCESS);
    int seen = 0;
    for (int i = 0; i < n; ++i) {
      if (perf[i].algo != algo) continue;
      ++seen;
      CHECK(perf[i].memory == (perf[i].mathType == CUDNN_FMA_MATH ? fma : tf32));
    }
    CHECK(seen == 2);
    DevBuf ws(fma);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, algo, nullptr, ws.p, tf32) == CUDNN_STATUS_BAD_PARAM);
    CHECK_THAT(last_error(), Catch::Contains("needs " + std::to_string(fma)));
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, algo, nullptr, ws.p, fma) == CUDNN_STATUS_SUCCESS);
    CHECK(fwd_with(dflt.x.d, dflt.w.d, dflt.conv.d, dflt.y.d, algo, nullptr, ws.p, tf32) == CUDNN_STATUS_SUCCESS);
  }
  SECTION("layouts: a size-1 dimension's stride must fit the packing of the others") {
    // x [2,3,1,5] NHWC-packed needs h's stride W * C = 15 (Note [cuDNN layouts from strides])
    Cfg flat = c;
    flat.H = 1;
    flat.R = 1;
    flat.ph = 0;
    flat.nhwc = true;
    Descs df(flat);
    TDesc odd;
    REQUIRE(cudnnSetTensor4dDescriptorEx(odd.d, CUDNN_DATA_FLOAT, 2, 3, 1, 5, 15, 1, 1, 3) == CUDNN_STATUS_SUCCESS);
    size_t need = 0;
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h.h, df.x.d, df.w.d, df.conv.d, df.y.d,
                                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                  &need) == CUDNN_STATUS_SUCCESS);
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h.h, odd.d, df.w.d, df.conv.d, df.y.d,
                                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                                  &need) == CUDNN_STATUS_NOT_SUPPORTED_LAYOUT);
    CHECK_THAT(last_error(), Catch::Contains("size-1 dimension 2"));
  }
  SECTION("pointers: host memory, too small a buffer, null; alpha and beta null") {
    std::vector<float> host(x_layout(c).count());
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, 0, host.data()) == CUDNN_STATUS_BAD_PARAM);
    DevBuf small(16);
    CHECK(fwd_with(d.x.d, d.w.d, d.conv.d, d.y.d, 0, small.p) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnConvolutionForward(h.h, &one, d.x.d, x.p, d.w.d, nullptr, d.conv.d,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d.y.d,
                                  y.p) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    CHECK(cudnnConvolutionForward(h.h, nullptr, d.x.d, x.p, d.w.d, w.p, d.conv.d,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d.y.d,
                                  y.p) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    CHECK(cudnnConvolutionBackwardData(h.h, &one, d.w.d, w.p, d.y.d, y.p, d.conv.d, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                       nullptr, 0, nullptr, d.x.d, x.p) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  }
  SECTION("algorithm lists: requested count, null outputs") {
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int n = -1;
    CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h.h, d.x.d, d.w.d, d.conv.d, d.y.d, 0, &n, perf) ==
          CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h.h, d.x.d, d.w.d, d.conv.d, d.y.d, 16, nullptr, perf) ==
          CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("simulated cuDNN convolutions: the three directions match a double-precision reference",
          "[gpu][sim][vendor-sim]") {
  Handle h;
  struct Case {
    const char* name;
    Cfg c;
  };
  std::vector<Case> cases;
  {
    Cfg c;
    cases.push_back({"3x3 pad 1", c});
    c.nhwc = true;
    cases.push_back({"3x3 pad 1 NHWC", c});
  }
  {
    Cfg c;
    c.N = 1, c.C = 4, c.H = 7, c.W = 6, c.K = 6, c.G = 2, c.sh = 2, c.sw = 1, c.ph = 1, c.pw = 0;
    cases.push_back({"groups 2, stride (2,1), pad (1,0)", c});
    c.nhwc = true;
    cases.push_back({"groups 2, stride (2,1), pad (1,0), NHWC", c});
  }
  {
    Cfg c;
    c.N = 2, c.C = 2, c.H = 7, c.W = 7, c.K = 3, c.ph = c.pw = 2, c.dh = c.dw = 2;
    cases.push_back({"dilation 2", c});
    c.mode = CUDNN_CONVOLUTION;
    c.R = 2;
    c.ph = 1;
    cases.push_back({"convolution mode, 2x3 filter, dilation 2", c});
  }
  {
    Cfg c;
    c.N = 1, c.C = 4, c.H = 6, c.W = 5, c.K = 8, c.G = 4, c.sh = c.sw = 3, c.ph = c.pw = 0;
    cases.push_back({"depthwise, stride 3 > filter", c});
  }
  for (const Case& cs : cases)
    for (cudnnDataType_t t : {CUDNN_DATA_DOUBLE, CUDNN_DATA_FLOAT, CUDNN_DATA_HALF}) {
      Cfg c = cs.c;
      c.type = t;
      const Problem pb(c, 7);
      // f64 and f32 (FMA math): sums in the accumulator; f16 (tensor-op math): f16 partial sums
      // and one f16 rounding of the result
      const cudnnMathType_t math = t == CUDNN_DATA_HALF ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
      const double tol = t == CUDNN_DATA_DOUBLE ? 1e-14 : t == CUDNN_DATA_FLOAT ? 2e-6 : 2e-3;
      for (Dir dir : {kFwd, kBwdData, kBwdFilter}) {
        INFO(cs.name << ", " << dir_name(dir) << ", data type " << t);
        const Run r = run(h, pb, dir, plain_algo(dir), math);
        REQUIRE(r.status == CUDNN_STATUS_SUCCESS);
        CHECK(worst_error(r.out, ref_of(pb, dir), mag_of(pb, dir)) <= tol);
      }
    }

  SECTION("alpha and beta blend with the old output") {
    Cfg c;
    c.type = CUDNN_DATA_DOUBLE;
    const Problem pb(c, 11);
    for (Dir dir : {kFwd, kBwdData, kBwdFilter}) {
      INFO(dir_name(dir));
      const std::vector<double> old = random_values(ref_of(pb, dir).size(), 99, Elem::f64);
      const Run r = run(h, pb, dir, plain_algo(dir), CUDNN_DEFAULT_MATH, 0.5, -2.0, &old);
      REQUIRE(r.status == CUDNN_STATUS_SUCCESS);
      std::vector<double> want = ref_of(pb, dir);
      for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] - 2.0 * old[i];
      CHECK(worst_error(r.out, want, mag_of(pb, dir)) <= 1e-13);
    }
  }
}

TEST_CASE("simulated cuDNN convolutions: TF32, nondeterministic orders and transform errors as permitted",
          "[gpu][sim][vendor-sim]") {
  Handle h;
  SECTION("f32: default math rounds operands to TF32, FMA math does not") {
    Cfg c;
    c.C = 8;
    const Problem pb(c, 3);
    for (Dir dir : {kFwd, kBwdData, kBwdFilter}) {
      INFO(dir_name(dir));
      const Run tf32 = run(h, pb, dir, plain_algo(dir), CUDNN_DEFAULT_MATH);
      const Run fma = run(h, pb, dir, plain_algo(dir), CUDNN_FMA_MATH);
      REQUIRE((tf32.status == CUDNN_STATUS_SUCCESS && fma.status == CUDNN_STATUS_SUCCESS));
      const double e_tf32 = worst_error(tf32.out, ref_of(pb, dir), mag_of(pb, dir));
      const double e_fma = worst_error(fma.out, ref_of(pb, dir), mag_of(pb, dir));
      CHECK(e_tf32 > 1e-5);  // 10-bit mantissas: about 2^-11 relative per operand
      CHECK(e_tf32 < 2e-3);
      CHECK(e_fma < 2e-6);
    }
  }
  SECTION("nondeterministic algorithms differ between identical calls, deterministic ones do not") {
    Cfg c;
    c.N = 4, c.C = 8, c.H = c.W = 8, c.K = 8;
    const Problem pb(c, 5);
    struct A {
      Dir dir;
      int nondet, det;
    };
    for (A a : {A{kBwdData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1},
                A{kBwdFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1},
                A{kBwdFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1}}) {
      INFO(dir_name(a.dir) << " algorithm " << a.nondet);
      const Run n1 = run(h, pb, a.dir, a.nondet, CUDNN_FMA_MATH), n2 = run(h, pb, a.dir, a.nondet, CUDNN_FMA_MATH);
      const Run d1 = run(h, pb, a.dir, a.det, CUDNN_FMA_MATH), d2 = run(h, pb, a.dir, a.det, CUDNN_FMA_MATH);
      REQUIRE((n1.status == CUDNN_STATUS_SUCCESS && n2.status == CUDNN_STATUS_SUCCESS));
      REQUIRE((d1.status == CUDNN_STATUS_SUCCESS && d2.status == CUDNN_STATUS_SUCCESS));
      CHECK(n1.out != n2.out);
      CHECK(d1.out == d2.out);
      CHECK(worst_error(n1.out, ref_of(pb, a.dir), mag_of(pb, a.dir)) < 4e-6);  // still f32-accurate
    }
  }
  SECTION("FFT and nonfused Winograd: an error that grows with the inputs") {
    Cfg c;
    c.C = 8;
    const Problem pb(c, 9);
    struct A {
      Dir dir;
      int algo;
    };
    for (A a : {A{kFwd, CUDNN_CONVOLUTION_FWD_ALGO_FFT}, A{kFwd, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED},
                A{kBwdData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING},
                A{kBwdFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT}}) {
      INFO(dir_name(a.dir) << " algorithm " << a.algo);
      const Run r = run(h, pb, a.dir, a.algo, CUDNN_FMA_MATH);
      REQUIRE(r.status == CUDNN_STATUS_SUCCESS);
      const double e = worst_error(r.out, ref_of(pb, a.dir), mag_of(pb, a.dir));
      CHECK(e > 1e-5);
      CHECK(e < 1e-3);
    }
  }
  SECTION("f16 backward data: tensor-op math rounds partial sums to f16, FMA math one f32 sum") {
    Cfg c;
    c.type = CUDNN_DATA_HALF;
    c.N = 2, c.C = 4, c.H = c.W = 8, c.K = 32;  // backward data: 288 products per element, 9 partial sums
    const Problem pb(c, 13);
    const Run tc = run(h, pb, kBwdData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_TENSOR_OP_MATH);
    const Run fma = run(h, pb, kBwdData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_FMA_MATH);
    REQUIRE((tc.status == CUDNN_STATUS_SUCCESS && fma.status == CUDNN_STATUS_SUCCESS));
    // FMA math: within half an f16 ulp of the exact value (plus f32 noise) everywhere
    int beyond_half_ulp_fma = 0, beyond_half_ulp_tc = 0;
    for (size_t i = 0; i < tc.out.size(); ++i) {
      const double want = pb.ref.dx[i];
      const double half_ulp =
          std::ldexp(1.0, std::ilogb(std::max(std::fabs(want), 0x1p-14)) - 11) + 1e-6 * pb.ref.dx_mag[i];
      beyond_half_ulp_fma += std::fabs(fma.out[i] - want) > half_ulp;
      beyond_half_ulp_tc += std::fabs(tc.out[i] - want) > half_ulp;
    }
    CHECK(beyond_half_ulp_fma == 0);
    CHECK(beyond_half_ulp_tc > 0);
  }
}

TEST_CASE("simulated cuDNN convolutions: algorithm lists, Find, and graph capture", "[gpu][sim][vendor-sim]") {
  Handle h;
  Cfg c;  // 3x3 stride 1: every algorithm family fits
  const Problem pb(c, 21);
  Descs d(c);
  const size_t eb = 4;
  DevBuf x(x_layout(c).count() * eb), w(w_layout(c).count() * eb), y(y_layout(c).count() * eb);
  upload(x.p, pb.x, x_layout(c), Elem::f32);
  upload(w.p, pb.w, w_layout(c), Elem::f32);

  SECTION("Get_v7 lists TF32-permitting entries, lossy and nondeterministic ones early, unsupported ones last") {
    cudnnConvolutionFwdAlgoPerf_t fwd[16];
    int n = 0;
    REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(h.h, d.x.d, d.w.d, d.conv.d, d.y.d, 16, &n, fwd) ==
            CUDNN_STATUS_SUCCESS);
    REQUIRE(n == 16);
    CHECK(fwd[0].algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
    CHECK(fwd[0].mathType == CUDNN_DEFAULT_MATH);
    CHECK((fwd[1].algo == fwd[0].algo && fwd[1].mathType == CUDNN_FMA_MATH));
    CHECK(fwd[n - 1].status == CUDNN_STATUS_NOT_SUPPORTED);  // DIRECT
    for (int i = 0; i < n; ++i) {
      CHECK(fwd[i].time == -1);
      if (fwd[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) CHECK(fwd[i].memory == 0);
      if (fwd[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM) CHECK(fwd[i].memory > 0);
    }
    cudnnConvolutionBwdFilterAlgoPerf_t bwf[16];
    REQUIRE(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h.h, d.x.d, d.y.d, d.conv.d, d.w.d, 16, &n, bwf) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(bwf[0].determinism == CUDNN_NON_DETERMINISTIC);
    CHECK(bwf[2].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT);
    cudnnConvolutionBwdDataAlgoPerf_t bwd[3];
    REQUIRE(cudnnGetConvolutionBackwardDataAlgorithm_v7(h.h, d.w.d, d.y.d, d.conv.d, d.x.d, 3, &n, bwd) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(n == 3);
    // f16: tensor-op math first; channels-last: FFT and Winograd not supported
    Cfg hl = c;
    hl.type = CUDNN_DATA_HALF;
    hl.nhwc = true;
    Descs dh(hl);
    REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(h.h, dh.x.d, dh.w.d, dh.conv.d, dh.y.d, 16, &n, fwd) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(fwd[0].mathType == CUDNN_TENSOR_OP_MATH);
    for (int i = 0; i < n; ++i)
      if (fwd[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT) CHECK(fwd[i].status == CUDNN_STATUS_NOT_SUPPORTED);
  }
  SECTION("Find runs the candidates, fastest first, and refuses those needing more workspace") {
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int n = 0;
    REQUIRE(cudnnFindConvolutionForwardAlgorithmEx(h.h, d.x.d, x.p, d.w.d, w.p, d.conv.d, d.y.d, y.p, 16, &n, perf,
                                                   nullptr, 0) == CUDNN_STATUS_SUCCESS);
    REQUIRE(n == 16);
    bool saw_alloc_failed = false, saw_success = false;
    float last = 0;
    bool sorted = true, failures_last = true, after_failure = false;
    for (int i = 0; i < n; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS) {
        saw_success = true;
        sorted = sorted && perf[i].time >= last;
        last = perf[i].time;
        failures_last = failures_last && !after_failure;
        CHECK(perf[i].memory == 0);
      } else {
        after_failure = true;
      }
      if (perf[i].status == CUDNN_STATUS_ALLOC_FAILED) saw_alloc_failed = perf[i].memory > 0;
    }
    CHECK(saw_success);
    CHECK(saw_alloc_failed);
    CHECK(sorted);
    CHECK(failures_last);
    // the backward directions' Find, with enough workspace for every candidate
    DevBuf ws(size_t{1} << 20);
    DevBuf dy(y_layout(c).count() * eb), dx(x_layout(c).count() * eb);
    upload(dy.p, pb.dy, y_layout(c), Elem::f32);
    cudnnConvolutionBwdDataAlgoPerf_t bd[16];
    REQUIRE(cudnnFindConvolutionBackwardDataAlgorithmEx(h.h, d.w.d, w.p, d.y.d, dy.p, d.conv.d, d.x.d, dx.p, 16, &n, bd,
                                                        ws.p, size_t{1} << 20) == CUDNN_STATUS_SUCCESS);
    CHECK(bd[0].status == CUDNN_STATUS_SUCCESS);
    CHECK(bd[0].time >= 0);
    cudnnConvolutionBwdFilterAlgoPerf_t bf[16];
    REQUIRE(cudnnFindConvolutionBackwardFilterAlgorithmEx(h.h, d.x.d, x.p, d.y.d, dy.p, d.conv.d, d.w.d, w.p, 16, &n,
                                                          bf, ws.p, size_t{1} << 20) == CUDNN_STATUS_SUCCESS);
    CHECK(bf[0].status == CUDNN_STATUS_SUCCESS);
  }
  SECTION("Find during a stream capture fails (it synchronises); a captured convolution replays") {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudnnSetStream(h.h, s) == CUDNN_STATUS_SUCCESS);
    const float one = 1, zero = 0;

    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int n = 0;
    CHECK(cudnnFindConvolutionForwardAlgorithmEx(h.h, d.x.d, x.p, d.w.d, w.p, d.conv.d, d.y.d, y.p, 16, &n, perf,
                                                 nullptr, 0) == CUDNN_STATUS_EXECUTION_FAILED_CUDART);
    cudaGraph_t broken = nullptr;
    CHECK(cudaStreamEndCapture(s, &broken) != cudaSuccess);  // the refused synchronisation invalidated it
    CHECK(broken == nullptr);
    cudaGetLastError();

    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(cudnnConvolutionForward(h.h, &one, d.x.d, x.p, d.w.d, w.p, d.conv.d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                  nullptr, 0, &zero, d.y.d, y.p) == CUDNN_STATUS_SUCCESS);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaMemset(y.p, 0xff, y_layout(c).count() * eb) == cudaSuccess);  // NaN until the replay writes
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(worst_error(download(y.p, y_layout(c), Elem::f32), pb.ref.y, pb.ref.y_mag) < 1e-6);
    // a replay reads the buffers' current contents
    const Problem pb2(c, 22);
    upload(x.p, pb2.x, x_layout(c), Elem::f32);
    upload(w.p, pb2.w, w_layout(c), Elem::f32);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(worst_error(download(y.p, y_layout(c), Elem::f32), pb2.ref.y, pb2.ref.y_mag) < 1e-6);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    REQUIRE(cudnnSetStream(h.h, nullptr) == CUDNN_STATUS_SUCCESS);
    cudaStreamDestroy(s);
  }
}

#endif  // EMBER_WITH_CUDNN
