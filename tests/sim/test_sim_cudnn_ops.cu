// The simulator's cuDNN pooling, softmax and batch norm (sim/libs/cudnn_ops.cpp,
// ops.cu), called through cudnn.h as ember's cuDNN variants call them: one refused call per
// contract rule with the status cuDNN documents; every mode against a double-precision host loop
// (NCHW, NHWC and padded strides; f64, f32, f16); alpha/beta blending; a call captured in a CUDA
// graph and replayed. Simulator build with cuDNN's header only.
#include <catch2/catch.hpp>

#if EMBER_WITH_CUDNN

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "sim/libs/common.h"
#include "sim/libs/cudnn_internal.h"
#include "tests/sim/cudnn_objects.h"

namespace {

using ember::sim::libs::Elem;
using ember::sim::libs::elem_bytes;
using ember::sim::libs::load_elem;
using ember::sim::libs::round_to;
using ember::sim::libs::store_elem;
using ember::testing::cudnn::DevBuf;
using ember::testing::cudnn::Handle;
using ember::testing::cudnn::PDesc;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- tensors: logical NCHW host data in double, any layout on the device ----

enum class Layout { nchw, nhwc, padded };

struct Shape {
  int n = 1, c = 1, h = 1, w = 1;
  int sn = 0, sc = 0, sh = 0, sw = 0;
  int64_t numel() const { return int64_t{n} * c * h * w; }
  int64_t off(int64_t i) const {  // the offset of logical (NCHW-order) element i
    const int64_t x = i % w, y = (i / w) % h, ch = (i / (int64_t{w} * h)) % c, b = i / (int64_t{w} * h * c);
    return b * sn + ch * sc + y * sh + x * sw;
  }
  int64_t span() const {
    return int64_t{n - 1} * sn + int64_t{c - 1} * sc + int64_t{h - 1} * sh + int64_t{w - 1} * sw + 1;
  }
};
Shape shape(int n, int c, int h, int w, Layout l = Layout::nchw) {
  Shape s{n, c, h, w};
  switch (l) {
    case Layout::nchw: s.sw = 1, s.sh = w, s.sc = h * w, s.sn = c * h * w; break;
    case Layout::nhwc: s.sc = 1, s.sw = c, s.sh = w * c, s.sn = h * w * c; break;
    case Layout::padded: s.sw = 1, s.sh = w + 1, s.sc = (w + 1) * h + 2, s.sn = ((w + 1) * h + 2) * c + 3; break;
  }
  return s;
}
int64_t idx(const Shape& s, int64_t n, int64_t c, int64_t h, int64_t w) { return ((n * s.c + c) * s.h + h) * s.w + w; }

cudnnDataType_t type_of(Elem e) {
  switch (e) {
    case Elem::f16: return CUDNN_DATA_HALF;
    case Elem::bf16: return CUDNN_DATA_BFLOAT16;
    case Elem::f64: return CUDNN_DATA_DOUBLE;
    default: return CUDNN_DATA_FLOAT;
  }
}

// Device memory for `s` holding v (rounded to e); without v left as allocated (NaN everywhere).
struct DevTensor {
  Shape s;
  Elem e;
  DevBuf mem;
  DevTensor(const Shape& sh, Elem el) : s(sh), e(el), mem(static_cast<size_t>(sh.span()) * elem_bytes(el)) {}
  DevTensor(const Shape& sh, Elem el, const std::vector<double>& v) : DevTensor(sh, el) { upload(v); }
  void upload(const std::vector<double>& v) {
    std::vector<unsigned char> host(mem.bytes, 0);
    for (int64_t i = 0; i < s.numel(); ++i) store_elem(host.data(), s.off(i), e, v[static_cast<size_t>(i)]);
    REQUIRE(cudaMemcpy(mem.p, host.data(), mem.bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<double> download() const {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<unsigned char> host(mem.bytes);
    REQUIRE(cudaMemcpy(host.data(), mem.p, mem.bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    std::vector<double> v(static_cast<size_t>(s.numel()));
    for (int64_t i = 0; i < s.numel(); ++i) v[static_cast<size_t>(i)] = load_elem(host.data(), s.off(i), e);
    return v;
  }
  void* p() const { return mem.p; }
};

std::vector<double> uniform(int64_t n, uint64_t seed, double lo = -3, double hi = 3) {
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
  for (double& x : v) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(z >> 11) / 9007199254740992.0;
  }
  return v;
}
std::vector<double> rounded(std::vector<double> v, Elem e) {
  for (double& x : v) x = round_to(x, e);
  return v;
}

// got vs want: NaN where NaN is wanted, else within atol + rtol |want|.
void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok =
        std::isnan(want[i]) ? std::isnan(got[i]) : std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
    if (!ok && ++bad <= 3) FAIL_CHECK(what << ": element " << i << " is " << got[i] << ", want " << want[i]);
  }
  CHECK(bad == 0);
}
// The tolerance of a result computed in the compute type and rounded once to e.
double rtol_of(Elem e) { return e == Elem::f64 ? 1e-12 : e == Elem::f32 ? 2e-5 : 2e-3; }

// ---- RAII cuDNN objects (tests/sim/cudnn_objects.h) ----

struct TDesc : ember::testing::cudnn::TensorDesc {
  TDesc() = default;
  TDesc(const Shape& s, Elem e) { set(s, e); }
  void set(const Shape& s, Elem e) {
    REQUIRE(cudnnSetTensor4dDescriptorEx(d, type_of(e), s.n, s.c, s.h, s.w, s.sn, s.sc, s.sh, s.sw) ==
            CUDNN_STATUS_SUCCESS);
  }
};

// Scaling factors in the type cuDNN reads for e (double for f64 data, float otherwise).
struct Scale {
  double d;
  float f;
  Elem e;
  Scale(double v, Elem el) : d(v), f(static_cast<float>(v)), e(el) {}
  const void* p() const { return e == Elem::f64 ? static_cast<const void*>(&d) : static_cast<const void*>(&f); }
};

std::string last_error() {
  char buf[512];
  cudnnGetLastErrorString(buf, sizeof buf);
  return buf;
}

// ---- host references (double) ----

struct Pool {
  cudnnPoolingMode_t mode;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  int wh = 3, ww = 2, ph = 1, pw = 1, sh = 2, sw = 2;
};
int out_dim(int in, int win, int pad, int stride) { return (in + 2 * pad - win) / stride + 1; }

// y = pool(x) and dx for the given dy; max pooling picks the first maximum (the first NaN when
// propagating NaNs).
struct PoolRef {
  std::vector<double> y, dx;
};
PoolRef pool_ref(const Pool& p, const Shape& xs, const Shape& ys, const std::vector<double>& x,
                 const std::vector<double>& dy) {
  PoolRef r{std::vector<double>(static_cast<size_t>(ys.numel())),
            std::vector<double>(static_cast<size_t>(xs.numel()), 0)};
  const bool is_max = p.mode == CUDNN_POOLING_MAX || p.mode == CUDNN_POOLING_MAX_DETERMINISTIC;
  for (int n = 0; n < ys.n; ++n)
    for (int c = 0; c < ys.c; ++c)
      for (int oh = 0; oh < ys.h; ++oh)
        for (int ow = 0; ow < ys.w; ++ow) {
          const int64_t o = idx(ys, n, c, oh, ow);
          double sum = 0, best = -INFINITY;
          int64_t arg = -1, count = 0;
          bool nan = false;
          for (int h = oh * p.sh - p.ph; h < oh * p.sh - p.ph + p.wh; ++h)
            for (int w = ow * p.sw - p.pw; w < ow * p.sw - p.pw + p.ww; ++w) {
              if (h < 0 || h >= xs.h || w < 0 || w >= xs.w) continue;
              const int64_t i = idx(xs, n, c, h, w);
              ++count;
              sum += x[static_cast<size_t>(i)];
              if (std::isnan(x[static_cast<size_t>(i)])) {
                if (p.nan == CUDNN_PROPAGATE_NAN && !nan) nan = true, arg = i;
                continue;
              }
              if (!nan && (arg < 0 || x[static_cast<size_t>(i)] > best)) best = x[static_cast<size_t>(i)], arg = i;
            }
          const double cnt =
              p.mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? p.wh * p.ww : static_cast<double>(count);
          r.y[static_cast<size_t>(o)] = is_max ? (nan ? kNaN : best) : sum / cnt;
          if (is_max) {
            if (arg >= 0) r.dx[static_cast<size_t>(arg)] += dy[static_cast<size_t>(o)];
          } else {
            for (int h = std::max(0, oh * p.sh - p.ph); h < std::min(xs.h, oh * p.sh - p.ph + p.wh); ++h)
              for (int w = std::max(0, ow * p.sw - p.pw); w < std::min(xs.w, ow * p.sw - p.pw + p.ww); ++w)
                r.dx[static_cast<size_t>(idx(xs, n, c, h, w))] += dy[static_cast<size_t>(o)] / cnt;
          }
        }
  return r;
}

// Softmax rows: CHANNEL over c per (n, h, w), INSTANCE over (c, h, w) per n.
template <class F>
void for_rows(const Shape& s, bool channel, F&& row) {
  std::vector<int64_t> ids;
  if (channel) {
    for (int n = 0; n < s.n; ++n)
      for (int h = 0; h < s.h; ++h)
        for (int w = 0; w < s.w; ++w) {
          ids.clear();
          for (int c = 0; c < s.c; ++c) ids.push_back(idx(s, n, c, h, w));
          row(ids);
        }
  } else {
    for (int n = 0; n < s.n; ++n) {
      ids.clear();
      for (int64_t k = 0; k < int64_t{s.c} * s.h * s.w; ++k) ids.push_back(n * int64_t{s.c} * s.h * s.w + k);
      row(ids);
    }
  }
}
std::vector<double> softmax_ref(const Shape& s, bool channel, bool log, const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for_rows(s, channel, [&](const std::vector<int64_t>& ids) {
    double m = -INFINITY, sum = 0;
    for (int64_t i : ids) m = std::max(m, x[static_cast<size_t>(i)]);
    for (int64_t i : ids) sum += std::exp(x[static_cast<size_t>(i)] - m);
    for (int64_t i : ids)
      y[static_cast<size_t>(i)] =
          log ? x[static_cast<size_t>(i)] - m - std::log(sum) : std::exp(x[static_cast<size_t>(i)] - m) / sum;
  });
  return y;
}
std::vector<double> softmax_backward_ref(const Shape& s, bool channel, bool log, const std::vector<double>& y,
                                         const std::vector<double>& dy) {
  std::vector<double> dx(y.size());
  for_rows(s, channel, [&](const std::vector<int64_t>& ids) {
    double sum = 0;
    for (int64_t i : ids)
      sum += log ? dy[static_cast<size_t>(i)] : dy[static_cast<size_t>(i)] * y[static_cast<size_t>(i)];
    for (int64_t i : ids) {
      const size_t k = static_cast<size_t>(i);
      dx[k] = log ? dy[k] - std::exp(y[k]) * sum : y[k] * (dy[k] - sum);
    }
  });
  return dx;
}

// Batch norm: feature f of x (SPATIAL: channel; PER_ACTIVATION: (c, h, w)) and its elements.
std::vector<std::vector<int64_t>> bn_features(const Shape& s, bool per_act) {
  std::vector<std::vector<int64_t>> f(static_cast<size_t>(per_act ? int64_t{s.c} * s.h * s.w : s.c));
  for (int n = 0; n < s.n; ++n)
    for (int c = 0; c < s.c; ++c)
      for (int h = 0; h < s.h; ++h)
        for (int w = 0; w < s.w; ++w) {
          const size_t k = per_act ? static_cast<size_t>((c * s.h + h) * s.w + w) : static_cast<size_t>(c);
          f[k].push_back(idx(s, n, c, h, w));
        }
  return f;
}
struct BnStats {
  std::vector<double> mean, var;  // biased
};
BnStats bn_stats(const std::vector<std::vector<int64_t>>& feats, const std::vector<double>& x) {
  BnStats st;
  for (const auto& ids : feats) {
    double m = 0, v = 0;
    for (int64_t i : ids) m += x[static_cast<size_t>(i)];
    m /= static_cast<double>(ids.size());
    for (int64_t i : ids) v += (x[static_cast<size_t>(i)] - m) * (x[static_cast<size_t>(i)] - m);
    st.mean.push_back(m);
    st.var.push_back(v / static_cast<double>(ids.size()));
  }
  return st;
}

// Runs `call` and checks its status and, for a refusal, that it recorded why.
#define CHECK_REFUSED(call, status)                                     \
  do {                                                                  \
    ember::sim::libs::set_last_error("");                               \
    cudnnStatus_t st_ = (call);                                         \
    CHECK(std::string(cudnnGetErrorString(st_)) == #status);            \
    if (st_ != CUDNN_STATUS_SUCCESS) CHECK_FALSE(last_error().empty()); \
  } while (0)

}  // namespace

TEST_CASE("simulated cuDNN: each broken pooling, softmax or batch-norm call gets cuDNN's documented status",
          "[gpu][sim][vendor-sim]") {
  Handle h;
  const Elem f32 = Elem::f32;
  const Scale one(1, f32), zero(0, f32);
  const Shape xs = shape(2, 3, 7, 6), ys = shape(2, 3, 4, 4);
  DevTensor x(xs, f32, uniform(xs.numel(), 1)), y(ys, f32);
  TDesc xd(xs, f32), yd(ys, f32);
  std::vector<float> host(static_cast<size_t>(xs.numel()), 1.0f);

  SECTION("pooling") {
    PDesc p;
    // a created but never set descriptor, then the set rules (invalid enumerants are checked too,
    // but every value of these enums' ranges is an enumerant: C++ cannot pass another without UB)
    CHECK_REFUSED(cudnnPoolingForward(h.h, p.d, one.p(), xd.d, x.p(), zero.p(), yd.d, y.p()),
                  CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    const cudnnPoolingMode_t avg = CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    const cudnnNanPropagation_t prop = CUDNN_PROPAGATE_NAN;
    CHECK_REFUSED(cudnnSetPooling2dDescriptor(p.d, avg, prop, 0, 2, 1, 1, 2, 2), CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(cudnnSetPooling2dDescriptor(p.d, avg, prop, 3, 2, 1, 1, 0, 2), CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(cudnnSetPooling2dDescriptor(p.d, avg, prop, 3, 2, -1, 1, 2, 2), CUDNN_STATUS_BAD_PARAM);
    // padding as large as the window: accepted by the descriptor, not supported by the call
    REQUIRE(cudnnSetPooling2dDescriptor(p.d, avg, prop, 3, 2, 1, 2, 2, 2) == CUDNN_STATUS_SUCCESS);
    CHECK_REFUSED(cudnnPoolingForward(h.h, p.d, one.p(), xd.d, x.p(), zero.p(), yd.d, y.p()),
                  CUDNN_STATUS_NOT_SUPPORTED);
    REQUIRE(cudnnSetPooling2dDescriptor(p.d, avg, prop, 3, 2, 1, 1, 2, 2) == CUDNN_STATUS_SUCCESS);
    // the descriptor reads back; the output dims follow the formula
    cudnnPoolingMode_t m{};
    cudnnNanPropagation_t np{};
    int v[6] = {};
    REQUIRE(cudnnGetPooling2dDescriptor(p.d, &m, &np, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) ==
            CUDNN_STATUS_SUCCESS);
    CHECK((m == avg && np == prop && v[0] == 3 && v[1] == 2 && v[2] == 1 && v[3] == 1 && v[4] == 2 && v[5] == 2));
    int on = 0, oc = 0, oh = 0, ow = 0;
    REQUIRE(cudnnGetPooling2dForwardOutputDim(p.d, xd.d, &on, &oc, &oh, &ow) == CUDNN_STATUS_SUCCESS);
    CHECK((on == 2 && oc == 3 && oh == 4 && ow == 4));
    {
      PDesc big;
      REQUIRE(cudnnSetPooling2dDescriptor(big.d, avg, prop, 9, 2, 0, 0, 1, 1) == CUDNN_STATUS_SUCCESS);
      CHECK_REFUSED(cudnnGetPooling2dForwardOutputDim(big.d, xd.d, &on, &oc, &oh, &ow), CUDNN_STATUS_BAD_PARAM);
    }
    CHECK(cudnnPoolingForward(h.h, p.d, one.p(), xd.d, x.p(), zero.p(), yd.d, y.p()) == CUDNN_STATUS_SUCCESS);
    // y dims not x pooled; data types differ
    TDesc wrong(shape(2, 3, 4, 3), f32), half(ys, Elem::f16);
    CHECK_REFUSED(cudnnPoolingForward(h.h, p.d, one.p(), xd.d, x.p(), zero.p(), wrong.d, y.p()),
                  CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(cudnnPoolingForward(h.h, p.d, one.p(), xd.d, x.p(), zero.p(), half.d, y.p()), CUDNN_STATUS_BAD_PARAM);
    // scaling factors, host and too-small buffers
    CHECK_REFUSED(cudnnPoolingForward(h.h, p.d, nullptr, xd.d, x.p(), zero.p(), yd.d, y.p()),
                  CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    CHECK_REFUSED(cudnnPoolingForward(h.h, p.d, one.p(), xd.d, host.data(), zero.p(), yd.d, y.p()),
                  CUDNN_STATUS_BAD_PARAM);
    DevBuf small(16);
    CHECK_REFUSED(cudnnPoolingForward(h.h, p.d, one.p(), xd.d, x.p(), zero.p(), yd.d, small.p), CUDNN_STATUS_BAD_PARAM);
    // backward: dy strides must be y's
    TDesc dyd(shape(2, 3, 4, 4, Layout::nhwc), f32);
    DevTensor dx(xs, f32);
    CHECK_REFUSED(
        cudnnPoolingBackward(h.h, p.d, one.p(), yd.d, y.p(), dyd.d, y.p(), xd.d, x.p(), zero.p(), xd.d, dx.p()),
        CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnPoolingBackward(h.h, p.d, one.p(), yd.d, y.p(), yd.d, y.p(), xd.d, x.p(), zero.p(), xd.d, dx.p()) ==
          CUDNN_STATUS_SUCCESS);
    // a destroyed descriptor
    cudnnPoolingDescriptor_t gone = nullptr;
    REQUIRE(cudnnCreatePoolingDescriptor(&gone) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetPooling2dDescriptor(gone, avg, prop, 3, 2, 1, 1, 2, 2) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnDestroyPoolingDescriptor(gone) == CUDNN_STATUS_SUCCESS);
    CHECK_REFUSED(cudnnPoolingForward(h.h, gone, one.p(), xd.d, x.p(), zero.p(), yd.d, y.p()), CUDNN_STATUS_BAD_PARAM);
    // a tensor descriptor never set
    TDesc unset;
    CHECK_REFUSED(cudnnPoolingForward(h.h, p.d, one.p(), unset.d, x.p(), zero.p(), yd.d, y.p()),
                  CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
  }

  SECTION("softmax") {
    DevTensor y2(xs, f32);
    TDesc y2d(xs, f32), other(shape(2, 3, 6, 7), f32), nhwc(shape(2, 3, 7, 6, Layout::nhwc), f32), dbl(xs, Elem::f64);
    const auto acc = CUDNN_SOFTMAX_ACCURATE;
    const auto ch = CUDNN_SOFTMAX_MODE_CHANNEL;
    CHECK(cudnnSoftmaxForward(h.h, acc, ch, one.p(), xd.d, x.p(), zero.p(), y2d.d, y2.p()) == CUDNN_STATUS_SUCCESS);
    CHECK_REFUSED(cudnnSoftmaxForward(h.h, acc, ch, one.p(), xd.d, x.p(), zero.p(), other.d, y2.p()),
                  CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(cudnnSoftmaxForward(h.h, acc, ch, one.p(), xd.d, x.p(), zero.p(), dbl.d, y2.p()),
                  CUDNN_STATUS_BAD_PARAM);
    // 3: in the enum's range (0..3), not an algorithm
    CHECK_REFUSED(cudnnSoftmaxForward(h.h, static_cast<cudnnSoftmaxAlgorithm_t>(3), ch, one.p(), xd.d, x.p(), zero.p(),
                                      y2d.d, y2.p()),
                  CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(cudnnSoftmaxForward(h.h, acc, ch, one.p(), xd.d, x.p(), nullptr, y2d.d, y2.p()),
                  CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    // backward: dy and dx must share strides
    CHECK_REFUSED(cudnnSoftmaxBackward(h.h, acc, ch, one.p(), y2d.d, y2.p(), xd.d, x.p(), zero.p(), nhwc.d, y2.p()),
                  CUDNN_STATUS_BAD_PARAM);
  }

  SECTION("batch norm") {
    const Shape bs = shape(3, 4, 2, 3);
    DevTensor bx(bs, f32, uniform(bs.numel(), 2)), by(bs, f32);
    TDesc bxd(bs, f32), byd(bs, f32), pd;
    const std::vector<double> ones(4, 1.0);
    DevTensor w(shape(1, 4, 1, 1), f32, ones), b(shape(1, 4, 1, 1), f32, ones), rm(shape(1, 4, 1, 1), f32, ones),
        rv(shape(1, 4, 1, 1), f32, ones), sm(shape(1, 4, 1, 1), f32), si(shape(1, 4, 1, 1), f32);
    CHECK_REFUSED(cudnnDeriveBNTensorDescriptor(pd.d, bxd.d, static_cast<cudnnBatchNormMode_t>(3)),
                  CUDNN_STATUS_BAD_PARAM);
    REQUIRE(cudnnDeriveBNTensorDescriptor(pd.d, bxd.d, CUDNN_BATCHNORM_SPATIAL) == CUDNN_STATUS_SUCCESS);
    CHECK((pd.d->type == CUDNN_DATA_FLOAT && pd.d->dims[0] == 1 && pd.d->dims[1] == 4 && pd.d->dims[2] == 1 &&
           pd.d->dims[3] == 1));
    const auto sp = CUDNN_BATCHNORM_SPATIAL;
    auto train = [&](cudnnBatchNormMode_t mode, cudnnTensorDescriptor_t xdesc, cudnnTensorDescriptor_t pdesc,
                     double eps, void* rmp, void* rvp, void* smp, void* sip, const void* beta = nullptr) {
      return cudnnBatchNormalizationForwardTraining(h.h, mode, one.p(), beta ? beta : zero.p(), xdesc, bx.p(), byd.d,
                                                    by.p(), pdesc, w.p(), b.p(), 0.1, rmp, rvp, eps, smp, sip);
    };
    CHECK(train(sp, bxd.d, pd.d, 1e-5, rm.p(), rv.p(), sm.p(), si.p()) == CUDNN_STATUS_SUCCESS);
    CHECK_REFUSED(train(sp, bxd.d, pd.d, -1e-5, rm.p(), rv.p(), sm.p(), si.p()), CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(train(sp, bxd.d, pd.d, 1e-5, rm.p(), nullptr, sm.p(), si.p()), CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(train(sp, bxd.d, pd.d, 1e-5, rm.p(), rv.p(), nullptr, si.p()), CUDNN_STATUS_BAD_PARAM);
    // the parameter descriptor: another C, another type, the spatial shape in per-activation mode
    TDesc pc(shape(1, 5, 1, 1), f32), pdbl(shape(1, 4, 1, 1), Elem::f64);
    CHECK_REFUSED(train(sp, bxd.d, pc.d, 1e-5, rm.p(), rv.p(), sm.p(), si.p()), CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(train(sp, bxd.d, pdbl.d, 1e-5, rm.p(), rv.p(), sm.p(), si.p()), CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(train(CUDNN_BATCHNORM_PER_ACTIVATION, bxd.d, pd.d, 1e-5, nullptr, nullptr, nullptr, nullptr),
                  CUDNN_STATUS_BAD_PARAM);
    // x and y dims differ
    TDesc bx2(shape(3, 4, 3, 2), f32);
    CHECK_REFUSED(train(sp, bx2.d, pd.d, 1e-5, nullptr, nullptr, nullptr, nullptr), CUDNN_STATUS_BAD_PARAM);
    // int8 data (set as float, then retyped: the descriptor setter refuses int8 itself)
    TDesc i8(bs, f32), i8y(bs, f32);
    i8.d->type = CUDNN_DATA_INT8;
    i8y.d->type = CUDNN_DATA_INT8;
    CHECK_REFUSED(cudnnBatchNormalizationForwardTraining(h.h, sp, one.p(), zero.p(), i8.d, bx.p(), i8y.d, by.p(), pd.d,
                                                         w.p(), b.p(), 0.1, nullptr, nullptr, 1e-5, nullptr, nullptr),
                  CUDNN_STATUS_NOT_SUPPORTED);
    // host memory for the scale; a null beta
    CHECK_REFUSED(
        cudnnBatchNormalizationForwardTraining(h.h, sp, one.p(), zero.p(), bxd.d, bx.p(), byd.d, by.p(), pd.d,
                                               host.data(), b.p(), 0.1, nullptr, nullptr, 1e-5, nullptr, nullptr),
        CUDNN_STATUS_BAD_PARAM);
    CHECK_REFUSED(cudnnBatchNormalizationForwardInference(h.h, sp, one.p(), nullptr, bxd.d, bx.p(), byd.d, by.p(), pd.d,
                                                          w.p(), b.p(), rm.p(), rv.p(), 1e-5),
                  CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    CHECK(cudnnBatchNormalizationForwardInference(h.h, sp, one.p(), zero.p(), bxd.d, bx.p(), byd.d, by.p(), pd.d, w.p(),
                                                  b.p(), rm.p(), rv.p(), 1e-5) == CUDNN_STATUS_SUCCESS);
    // backward: only one saved statistic
    DevTensor dx(bs, f32), dw(shape(1, 4, 1, 1), f32), db(shape(1, 4, 1, 1), f32);
    CHECK_REFUSED(
        cudnnBatchNormalizationBackward(h.h, sp, one.p(), zero.p(), one.p(), zero.p(), bxd.d, bx.p(), byd.d, by.p(),
                                        bxd.d, dx.p(), pd.d, w.p(), dw.p(), db.p(), 1e-5, sm.p(), nullptr),
        CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnBatchNormalizationBackward(h.h, sp, one.p(), zero.p(), one.p(), zero.p(), bxd.d, bx.p(), byd.d, by.p(),
                                          bxd.d, dx.p(), pd.d, w.p(), dw.p(), db.p(), 1e-5, sm.p(),
                                          si.p()) == CUDNN_STATUS_SUCCESS);
    CHECK_FALSE(std::isnan(dx.download()[0]));
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("simulated cuDNN: a size-1 dimension's stride must fit the layout the other strides pack",
          "[gpu][sim][vendor-sim]") {
  // channels-last [3,4,2,3] data described as [N, C, H*W, 1] (what ember's batch-norm variant
  // passes): NHWC-fully-packed only with the size-1 w's stride = C
  // (Note [cuDNN layouts from strides] in sim/libs/cudnn_common.cpp)
  Handle h;
  const Elem f32 = Elem::f32;
  const Scale one(1, f32), zero(0, f32);
  const Shape cl = shape(3, 4, 2, 3, Layout::nhwc);
  Shape flat{3, 4, 6, 1, 24, 1, 4, 4};
  Shape flat_w1 = flat;
  flat_w1.sw = 1;
  DevTensor x(cl, f32, uniform(cl.numel(), 7)), y(cl, f32), dx(cl, f32);
  const std::vector<double> ones(4, 1.0), zeros(4, 0.0);
  const Shape ps = shape(1, 4, 1, 1);
  DevTensor w(ps, f32, ones), b(ps, f32, zeros), sm(ps, f32), si(ps, f32), dw(ps, f32), db(ps, f32);
  TDesc cld(cl, f32), flatd(flat, f32), oddd(flat_w1, f32), pd;
  const auto sp = CUDNN_BATCHNORM_SPATIAL;
  REQUIRE(cudnnDeriveBNTensorDescriptor(pd.d, cld.d, sp) == CUDNN_STATUS_SUCCESS);
  auto train = [&](cudnnTensorDescriptor_t d) {
    return cudnnBatchNormalizationForwardTraining(h.h, sp, one.p(), zero.p(), d, x.p(), d, y.p(), pd.d, w.p(), b.p(),
                                                  0.1, nullptr, nullptr, 1e-5, sm.p(), si.p());
  };
  // the 4-d descriptor and its packed [N, C, L, 1] form read the same elements
  REQUIRE(train(cld.d) == CUDNN_STATUS_SUCCESS);
  const std::vector<double> want = y.download();
  REQUIRE(train(flatd.d) == CUDNN_STATUS_SUCCESS);
  check_close(y.download(), want, 1e-6, 1e-6, "[N, C, L, 1] NHWC-packed");
  // w's stride 1 (NCHW's): dense data, but neither layout's packing: refused, naming the stride
  CHECK_REFUSED(train(oddd.d), CUDNN_STATUS_NOT_SUPPORTED_LAYOUT);
  CHECK_THAT(last_error(), Catch::Matchers::Contains("NHWC-fully-packed except for the stride 1 of its size-1 "
                                                     "dimension 3, which that layout needs to be 4"));
  CHECK_REFUSED(cudnnBatchNormalizationForwardInference(h.h, sp, one.p(), zero.p(), oddd.d, x.p(), oddd.d, y.p(), pd.d,
                                                        w.p(), b.p(), sm.p(), si.p(), 1e-5),
                CUDNN_STATUS_NOT_SUPPORTED_LAYOUT);
  CHECK_REFUSED(
      cudnnBatchNormalizationBackward(h.h, sp, one.p(), zero.p(), one.p(), zero.p(), cld.d, x.p(), cld.d, y.p(), oddd.d,
                                      dx.p(), pd.d, w.p(), dw.p(), db.p(), 1e-5, sm.p(), si.p()),
      CUDNN_STATUS_NOT_SUPPORTED_LAYOUT);
  // the same for the other calls that read a layout
  CHECK_REFUSED(cudnnSoftmaxForward(h.h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, one.p(), oddd.d, x.p(),
                                    zero.p(), oddd.d, y.p()),
                CUDNN_STATUS_NOT_SUPPORTED_LAYOUT);
  // 2-d data [5, 4] as [5, 4, 1, 1]: strides (4,1,1,1) are NCHW-packed, (4,1,4,4) NHWC-packed, and
  // (4,1,4,1) (h as NHWC, w as NCHW) neither
  const Shape rows_nchw{5, 4, 1, 1, 4, 1, 1, 1}, rows_nhwc{5, 4, 1, 1, 4, 1, 4, 4}, rows_odd{5, 4, 1, 1, 4, 1, 4, 1};
  DevTensor r(rows_nchw, f32, uniform(rows_nchw.numel(), 8)), ry(rows_nchw, f32);
  auto train_rows = [&](const Shape& s) {
    TDesc d(s, f32);
    return cudnnBatchNormalizationForwardTraining(h.h, sp, one.p(), zero.p(), d.d, r.p(), d.d, ry.p(), pd.d, w.p(),
                                                  b.p(), 0.1, nullptr, nullptr, 1e-5, sm.p(), si.p());
  };
  CHECK(train_rows(rows_nchw) == CUDNN_STATUS_SUCCESS);
  CHECK(train_rows(rows_nhwc) == CUDNN_STATUS_SUCCESS);
  CHECK_REFUSED(train_rows(rows_odd), CUDNN_STATUS_NOT_SUPPORTED_LAYOUT);
  // strided data (gaps between rows and planes) is no packed layout to misread: computed
  const Shape padded = shape(3, 4, 2, 3, Layout::padded);
  DevTensor px(padded, f32, uniform(padded.numel(), 9)), py(padded, f32);
  TDesc pdd(padded, f32);
  CHECK(cudnnBatchNormalizationForwardTraining(h.h, sp, one.p(), zero.p(), pdd.d, px.p(), pdd.d, py.p(), pd.d, w.p(),
                                               b.p(), 0.1, nullptr, nullptr, 1e-5, sm.p(),
                                               si.p()) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("simulated cuDNN: pooling forward and backward match a double host loop", "[gpu][sim][vendor-sim]") {
  Handle h;
  const cudnnPoolingMode_t modes[] = {CUDNN_POOLING_MAX, CUDNN_POOLING_MAX_DETERMINISTIC,
                                      CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                      CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING};
  struct Case {
    Elem e;
    Layout l;
  };
  const Case cases[] = {
      {Elem::f64, Layout::nchw}, {Elem::f32, Layout::nhwc}, {Elem::f32, Layout::padded}, {Elem::f16, Layout::nchw}};
  for (const Case& k : cases)
    for (cudnnPoolingMode_t mode : modes) {
      INFO("mode " << mode << ", " << ember::sim::libs::elem_name(k.e) << ", layout " << static_cast<int>(k.l));
      Pool p{mode};
      const Shape xs = shape(2, 3, 7, 6, k.l),
                  ys = shape(2, 3, out_dim(7, p.wh, p.ph, p.sh), out_dim(6, p.ww, p.pw, p.sw), k.l);
      const std::vector<double> x = rounded(uniform(xs.numel(), 10), k.e), dy = rounded(uniform(ys.numel(), 11), k.e);
      const PoolRef want = pool_ref(p, xs, ys, x, dy);
      PDesc pd;
      REQUIRE(cudnnSetPooling2dDescriptor(pd.d, mode, p.nan, p.wh, p.ww, p.ph, p.pw, p.sh, p.sw) ==
              CUDNN_STATUS_SUCCESS);
      TDesc xd(xs, k.e), yd(ys, k.e);
      DevTensor dx_(xs, k.e, x), dy_(ys, k.e, dy), y_(ys, k.e), dxo(xs, k.e);
      const Scale one(1, k.e), zero(0, k.e);
      REQUIRE(cudnnPoolingForward(h.h, pd.d, one.p(), xd.d, dx_.p(), zero.p(), yd.d, y_.p()) == CUDNN_STATUS_SUCCESS);
      check_close(y_.download(), want.y, rtol_of(k.e), k.e == Elem::f16 ? 2e-3 : 1e-6, "y");
      REQUIRE(cudnnPoolingBackward(h.h, pd.d, one.p(), yd.d, y_.p(), yd.d, dy_.p(), xd.d, dx_.p(), zero.p(), xd.d,
                                   dxo.p()) == CUDNN_STATUS_SUCCESS);
      check_close(dxo.download(), want.dx, rtol_of(k.e), k.e == Elem::f16 ? 2e-3 : 1e-6, "dx");
    }

  SECTION("max pooling NaNs: propagated or skipped as the descriptor says; beta blends") {
    for (cudnnNanPropagation_t nan : {CUDNN_PROPAGATE_NAN, CUDNN_NOT_PROPAGATE_NAN}) {
      Pool p{CUDNN_POOLING_MAX, nan};
      const Shape xs = shape(1, 2, 7, 6), ys = shape(1, 2, 4, 4);
      std::vector<double> x = rounded(uniform(xs.numel(), 12), Elem::f32);
      x[static_cast<size_t>(idx(xs, 0, 1, 2, 3))] = kNaN;
      const PoolRef want = pool_ref(p, xs, ys, x, std::vector<double>(static_cast<size_t>(ys.numel()), 1.0));
      int nans = 0;
      for (double v : want.y) nans += std::isnan(v) ? 1 : 0;
      CHECK(nans == (nan == CUDNN_PROPAGATE_NAN ? 1 : 0));  // the one window covering (2, 3)
      PDesc pd;
      REQUIRE(cudnnSetPooling2dDescriptor(pd.d, p.mode, nan, p.wh, p.ww, p.ph, p.pw, p.sh, p.sw) ==
              CUDNN_STATUS_SUCCESS);
      TDesc xd(xs, Elem::f32), yd(ys, Elem::f32);
      const std::vector<double> y0 = uniform(ys.numel(), 13);
      DevTensor xt(xs, Elem::f32, x), yt(ys, Elem::f32, y0);
      // y = 2 pool(x) - 0.5 y
      const Scale two(2, Elem::f32), mhalf(-0.5, Elem::f32);
      REQUIRE(cudnnPoolingForward(h.h, pd.d, two.p(), xd.d, xt.p(), mhalf.p(), yd.d, yt.p()) == CUDNN_STATUS_SUCCESS);
      std::vector<double> blended(want.y.size());
      for (size_t i = 0; i < blended.size(); ++i) blended[i] = 2 * want.y[i] - 0.5 * static_cast<float>(y0[i]);
      check_close(yt.download(), blended, 2e-6, 1e-6, "blended y");
    }
  }
}

TEST_CASE("simulated cuDNN: softmax and log-softmax forward and backward match a double host loop",
          "[gpu][sim][vendor-sim]") {
  Handle h;
  struct Case {
    Elem e;
    Layout l;
  };
  const Case cases[] = {{Elem::f64, Layout::nchw}, {Elem::f32, Layout::nhwc}, {Elem::f16, Layout::padded}};
  for (const Case& k : cases)
    for (cudnnSoftmaxAlgorithm_t algo : {CUDNN_SOFTMAX_FAST, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_LOG})
      for (cudnnSoftmaxMode_t mode : {CUDNN_SOFTMAX_MODE_CHANNEL, CUDNN_SOFTMAX_MODE_INSTANCE}) {
        INFO("algo " << algo << ", mode " << mode << ", " << ember::sim::libs::elem_name(k.e) << ", layout "
                     << static_cast<int>(k.l));
        const bool channel = mode == CUDNN_SOFTMAX_MODE_CHANNEL, log = algo == CUDNN_SOFTMAX_LOG;
        const Shape s = shape(2, 5, 3, 2, k.l);
        const std::vector<double> x = rounded(uniform(s.numel(), 20), k.e), dy = rounded(uniform(s.numel(), 21), k.e);
        TDesc d(s, k.e);
        DevTensor xt(s, k.e, x), yt(s, k.e), dyt(s, k.e, dy), dxt(s, k.e);
        const Scale one(1, k.e), zero(0, k.e);
        REQUIRE(cudnnSoftmaxForward(h.h, algo, mode, one.p(), d.d, xt.p(), zero.p(), d.d, yt.p()) ==
                CUDNN_STATUS_SUCCESS);
        const std::vector<double> y = yt.download();
        const double atol = k.e == Elem::f16 ? 2e-3 : 1e-6;
        check_close(y, softmax_ref(s, channel, log, x), rtol_of(k.e), atol, "y");
        // the gradient of the y the call returned (each side from the same rounded y)
        REQUIRE(cudnnSoftmaxBackward(h.h, algo, mode, one.p(), d.d, yt.p(), d.d, dyt.p(), zero.p(), d.d, dxt.p()) ==
                CUDNN_STATUS_SUCCESS);
        check_close(dxt.download(), softmax_backward_ref(s, channel, log, y, dy), rtol_of(k.e), atol * 4, "dx");
      }

  SECTION("a softmax captured in a CUDA graph computes the replay's inputs") {
    cudaStream_t st = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudnnSetStream(h.h, st) == CUDNN_STATUS_SUCCESS);
    const Shape s = shape(3, 6, 2, 2);
    TDesc d(s, Elem::f32);
    DevTensor xt(s, Elem::f32), yt(s, Elem::f32), y0(s, Elem::f32, uniform(s.numel(), 30));
    const Scale one(1, Elem::f32), half(0.5, Elem::f32);
    REQUIRE(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    // y = softmax(x) + 0.5 y: beta reads y at replay time, not at capture
    const cudnnStatus_t captured = cudnnSoftmaxForward(h.h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                                                       one.p(), d.d, xt.p(), half.p(), d.d, yt.p());
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(st, &graph) == cudaSuccess);
    CHECK(captured == CUDNN_STATUS_SUCCESS);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (uint64_t seed : {31u, 32u}) {
      const std::vector<double> x = rounded(uniform(s.numel(), seed), Elem::f32);
      const std::vector<double> prior = rounded(uniform(s.numel(), seed + 100), Elem::f32);
      xt.upload(x);
      yt.upload(prior);
      REQUIRE(cudaGraphLaunch(exec, st) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(st) == cudaSuccess);
      std::vector<double> want = softmax_ref(s, false, false, x);
      for (size_t i = 0; i < want.size(); ++i) want[i] += 0.5 * prior[i];
      check_close(yt.download(), want, 2e-6, 1e-7, "replayed y");
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    REQUIRE(cudnnSetStream(h.h, nullptr) == CUDNN_STATUS_SUCCESS);
    cudaStreamDestroy(st);
  }
}

TEST_CASE("simulated cuDNN: batch norm training, inference and backward match a double host loop",
          "[gpu][sim][vendor-sim]") {
  Handle h;
  struct Case {
    Elem e;
    Layout l;
    cudnnBatchNormMode_t mode;
  };
  const Case cases[] = {{Elem::f64, Layout::nchw, CUDNN_BATCHNORM_SPATIAL},
                        {Elem::f32, Layout::nhwc, CUDNN_BATCHNORM_SPATIAL},
                        {Elem::f16, Layout::padded, CUDNN_BATCHNORM_SPATIAL_PERSISTENT},
                        {Elem::f32, Layout::nchw, CUDNN_BATCHNORM_PER_ACTIVATION}};
  const double eps = 1e-3, factor = 0.25;
  for (const Case& k : cases) {
    INFO("mode " << k.mode << ", " << ember::sim::libs::elem_name(k.e) << ", layout " << static_cast<int>(k.l));
    const bool per_act = k.mode == CUDNN_BATCHNORM_PER_ACTIVATION;
    const Shape xs = shape(3, 4, 3, 5, k.l);
    TDesc xd(xs, k.e), pd;
    REQUIRE(cudnnDeriveBNTensorDescriptor(pd.d, xd.d, k.mode) == CUDNN_STATUS_SUCCESS);
    const Elem pe = k.e == Elem::f64 ? Elem::f64 : Elem::f32;
    REQUIRE(pd.d->type == (pe == Elem::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    const Shape ps = shape(1, 4, per_act ? 3 : 1, per_act ? 5 : 1);
    const size_t F = static_cast<size_t>(ps.numel());
    const auto feats = bn_features(xs, per_act);
    const std::vector<double> x = rounded(uniform(xs.numel(), 40, -2, 3), k.e),
                              dy = rounded(uniform(xs.numel(), 41), k.e);
    const std::vector<double> w = rounded(uniform(ps.numel(), 42, 0.5, 1.5), pe),
                              b = rounded(uniform(ps.numel(), 43), pe);
    const std::vector<double> rm0 = rounded(uniform(ps.numel(), 44, -0.5, 0.5), pe),
                              rv0 = rounded(uniform(ps.numel(), 45, 0.5, 2), pe);
    DevTensor xt(xs, k.e, x), yt(xs, k.e), dyt(xs, k.e, dy), dxt(xs, k.e);
    DevTensor wt(ps, pe, w), bt(ps, pe, b), rm(ps, pe, rm0), rv(ps, pe, rv0), sm(ps, pe), si(ps, pe), dw(ps, pe),
        db(ps, pe);
    const Scale one(1, k.e), zero(0, k.e);
    const BnStats st = bn_stats(feats, x);
    const double rtol = rtol_of(k.e), atol = k.e == Elem::f16 ? 4e-3 : k.e == Elem::f32 ? 2e-5 : 1e-12;
    const double prtol = pe == Elem::f64 ? 1e-12 : 2e-5;

    // training: y, saved statistics, running statistics (unbiased variance)
    REQUIRE(cudnnBatchNormalizationForwardTraining(h.h, k.mode, one.p(), zero.p(), xd.d, xt.p(), xd.d, yt.p(), pd.d,
                                                   wt.p(), bt.p(), factor, rm.p(), rv.p(), eps, sm.p(),
                                                   si.p()) == CUDNN_STATUS_SUCCESS);
    std::vector<double> y(x.size()), invstd(F), want_rm(F), want_rv(F);
    for (size_t f = 0; f < F; ++f) {
      invstd[f] = 1 / std::sqrt(st.var[f] + eps);
      const double m = static_cast<double>(feats[f].size());
      want_rm[f] = (1 - factor) * rm0[f] + factor * st.mean[f];
      want_rv[f] = (1 - factor) * rv0[f] + factor * st.var[f] * m / (m - 1);
      for (int64_t i : feats[f])
        y[static_cast<size_t>(i)] = w[f] * (x[static_cast<size_t>(i)] - st.mean[f]) * invstd[f] + b[f];
    }
    check_close(yt.download(), y, rtol, atol, "training y");
    check_close(sm.download(), st.mean, prtol, 1e-6, "saved mean");
    check_close(si.download(), invstd, prtol, 1e-6, "saved inverse std");
    check_close(rm.download(), want_rm, prtol, 1e-6, "running mean");
    check_close(rv.download(), want_rv, prtol, 1e-6, "running variance (unbiased)");

    // inference from the (updated) running statistics, blended: y = 2 bn(x) + 0.5 y
    const std::vector<double> rm1 = rm.download(), rv1 = rv.download(), y_prior = yt.download();
    const Scale two(2, k.e), half(0.5, k.e);
    REQUIRE(cudnnBatchNormalizationForwardInference(h.h, k.mode, two.p(), half.p(), xd.d, xt.p(), xd.d, yt.p(), pd.d,
                                                    wt.p(), bt.p(), rm.p(), rv.p(), eps) == CUDNN_STATUS_SUCCESS);
    std::vector<double> yi(x.size());
    for (size_t f = 0; f < F; ++f)
      for (int64_t i : feats[f]) {
        const size_t j = static_cast<size_t>(i);
        yi[j] = 2 * (w[f] * (x[j] - rm1[f]) / std::sqrt(rv1[f] + eps) + b[f]) + 0.5 * y_prior[j];
      }
    check_close(yt.download(), yi, rtol, atol * 4, "inference y");

    // backward with the saved statistics and with none (recomputed); the second blends the
    // parameter gradients into the first's: dScale = 1 * new + 1 * old
    std::vector<double> dx(x.size()), dscale(F), dbias(F);
    for (size_t f = 0; f < F; ++f) {
      const double m = static_cast<double>(feats[f].size());
      for (int64_t i : feats[f]) {
        const size_t j = static_cast<size_t>(i);
        dbias[f] += dy[j];
        dscale[f] += dy[j] * (x[j] - st.mean[f]) * invstd[f];
      }
      for (int64_t i : feats[f]) {
        const size_t j = static_cast<size_t>(i);
        const double xhat = (x[j] - st.mean[f]) * invstd[f];
        dx[j] = w[f] * invstd[f] * (dy[j] - dbias[f] / m - xhat * dscale[f] / m);
      }
    }
    REQUIRE(cudnnBatchNormalizationBackward(h.h, k.mode, one.p(), zero.p(), one.p(), zero.p(), xd.d, xt.p(), xd.d,
                                            dyt.p(), xd.d, dxt.p(), pd.d, wt.p(), dw.p(), db.p(), eps, sm.p(),
                                            si.p()) == CUDNN_STATUS_SUCCESS);
    check_close(dxt.download(), dx, rtol * 4, atol * 4, "dx (saved statistics)");
    check_close(dw.download(), dscale, prtol * 4, 1e-5, "dScale");
    check_close(db.download(), dbias, prtol * 4, 1e-5, "dBias");
    REQUIRE(cudnnBatchNormalizationBackward(h.h, k.mode, one.p(), zero.p(), one.p(), one.p(), xd.d, xt.p(), xd.d,
                                            dyt.p(), xd.d, dxt.p(), pd.d, wt.p(), dw.p(), db.p(), eps, nullptr,
                                            nullptr) == CUDNN_STATUS_SUCCESS);
    check_close(dxt.download(), dx, rtol * 4, atol * 4, "dx (recomputed statistics)");
    for (size_t f = 0; f < F; ++f) dscale[f] *= 2, dbias[f] *= 2;
    check_close(dw.download(), dscale, prtol * 4, 1e-5, "dScale blended");
    check_close(db.download(), dbias, prtol * 4, 1e-5, "dBias blended");
  }
}

#endif  // EMBER_WITH_CUDNN
