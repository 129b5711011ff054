// The simulator's cuDNN pooling, softmax and batch norm (Note [simulated vendor libraries] in
// common.h): pooling descriptors and every call of these families that ember's cuDNN variants
// make (kernels/ops/pool.cu, softmax.cu, batch_norm.cu), plus their backward and query siblings.
// Each call checks its arguments against cuDNN's documented contract and returns the documented
// status (the reason goes to cudnnGetLastErrorString), then enqueues the kernels of ops.cu on the
// handle's stream. Handles and tensor descriptors are in cudnn_common.cpp, convolutions in
// cudnn.cpp. Simulator build only.
//
// Statuses: cuDNN 9 refines CUDNN_STATUS_BAD_PARAM into sub-codes; a null pointer where one is
// required is CUDNN_STATUS_BAD_PARAM_NULL_POINTER (as cudnn_common.cpp's checks give it), a
// descriptor created but never set CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED; everything else the
// documentation lists under BAD_PARAM is BAD_PARAM, and configurations it lists as unsupported
// are NOT_SUPPORTED.
#if EMBER_WITH_CUDNN  // built where CMake found cudnn.h (CMakeLists.txt)

#include <cudnn.h>

#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "sim/libs/cudnn_internal.h"
#include "sim/libs/ops.h"

namespace ember::sim::libs::cudnn {

namespace {

using Status = cudnnStatus_t;
constexpr Status kOk = CUDNN_STATUS_SUCCESS;

std::string dims_of(const cudnnTensorStruct& d) {
  std::string s = "[";
  for (int i = 0; i < d.nb_dims; ++i) {
    if (i > 0) s += ',';
    s += std::to_string(d.dims[i]);
  }
  return s + "]";
}
std::string strides_of(const cudnnTensorStruct& d) {
  std::string s = "(";
  for (int i = 0; i < d.nb_dims; ++i) {
    if (i > 0) s += ',';
    s += std::to_string(d.strides[i]);
  }
  return s + ")";
}
bool same_dims(const cudnnTensorStruct& a, const cudnnTensorStruct& b) {
  if (a.nb_dims != b.nb_dims) return false;
  for (int i = 0; i < a.nb_dims; ++i)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}
bool same_strides(const cudnnTensorStruct& a, const cudnnTensorStruct& b) {
  for (int i = 0; i < a.nb_dims; ++i)
    if (a.strides[i] != b.strides[i]) return false;
  return true;
}

dnn::View4 view_of(const cudnnTensorStruct& d) {
  return {d.dims[0], d.dims[1], d.dims[2], d.dims[3], d.strides[0], d.strides[1], d.strides[2], d.strides[3]};
}

// A set tensor descriptor of four dims (the calls here take 4-d tensors; cuDNN also takes 5-d ones
// for some, which ember never passes: NOT_SUPPORTED here, and said so).
Status check_tensor4(cudnnTensorDescriptor_t d, const char* what, const char* which) {
  if (Status st = check_tensor(d, what, which); st != kOk) return st;
  if (d->nb_dims != 4)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, std::string(what) + ": the " + which + " descriptor has " +
                                                std::to_string(d->nb_dims) + " dims; the simulator's cuDNN takes 4");
  return check_layout(*d, what, which);
}

// The data's element type: a type the legacy API computes with, else NOT_SUPPORTED (int8 and the
// vectorised types take other paths in cuDNN, which the simulator does not emulate).
Status data_elem(const cudnnTensorStruct& d, const char* what, const char* which, Elem& e) {
  if (!elem_of(d.type, e))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, std::string(what) + ": the " + which + " data type " +
                                                std::to_string(d.type) + " is not supported (f16, bf16, f32, f64)");
  return kOk;
}

Status same_type(const cudnnTensorStruct& a, const cudnnTensorStruct& b, const char* what, const char* an,
                 const char* bn) {
  if (a.type != b.type)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the " + an + " and " + bn + " data types differ (" +
                                            std::to_string(a.type) + " and " + std::to_string(b.type) + ")");
  return kOk;
}

Status same_shape(const cudnnTensorStruct& a, const cudnnTensorStruct& b, const char* what, const char* an,
                  const char* bn) {
  if (!same_dims(a, b))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the " + an + " dims " + dims_of(a) + " and " + bn +
                                            " dims " + dims_of(b) + " differ");
  return kOk;
}

// Host-memory scaling factors, required (cuDNN reads them at the call).
Status check_scaling(const void* p, const char* what, const char* which) {
  if (p == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": " + which + " is null");
  return kOk;
}
// cuDNN reads a scaling factor as double for double data, as float otherwise.
double scaling(const void* p, Elem e) {
  return e == Elem::f64 ? *static_cast<const double*>(p) : static_cast<double>(*static_cast<const float*>(p));
}

// A data pointer: device memory of the handle's device holding `bytes`.
Status check_data(const void* p, size_t bytes, const char* what, const char* which) {
  if (p == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": " + which + " is null");
  if (!device_span_ok(p, bytes))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": " + which +
                                            " is not device memory of the current device holding " +
                                            std::to_string(bytes) + " bytes");
  return kOk;
}

// Runs the launches; a launch error (enqueue throws: sim/libs/launch.h) is EXECUTION_FAILED.
template <class F>
Status run(const char* what, F&& launch) {
  try {
    launch();
  } catch (const std::exception& e) {
    return fail(CUDNN_STATUS_EXECUTION_FAILED, std::string(what) + ": the kernel launch failed: " + e.what());
  }
  return kOk;
}

// The integer a caller passed for an enumerant, read through its representation: C callers may pass
// any int, and in C++ merely loading an enum object that holds a value outside the enum's range is
// undefined (UBSan's enum check), so arguments are validated this way before they are used.
template <class E>
int raw_of(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// ---- pooling descriptors ----

Status check_pool(cudnnPoolingDescriptor_t p, const char* what) {
  if (p == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": the pooling descriptor is null");
  if (p->magic != kPoolMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the pooling descriptor was destroyed or never created");
  if (!p->set)
    return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, std::string(what) + ": the pooling descriptor was never set");
  return kOk;
}

// The pooled size of one spatial dim: 1 + (in + 2 pad - win) / stride (documented), or 0 when the
// window does not fit the padded input.
int64_t pooled(int64_t in, int win, int pad, int stride) {
  const int64_t span = in + 2 * int64_t{pad} - win;
  return span < 0 ? 0 : 1 + span / stride;
}

// Padding as large as the window would let a window lie wholly in the padding (no element to take
// the maximum of, none to average with exclude-padding). cuDNN's documentation lists only negative
// values as BAD_PARAM for the descriptor and nothing for this case, and old releases computed such
// windows as -FLT_MAX; the simulator takes pad < window as the supported configuration and refuses
// the rest when the descriptor is used, with the status cuDNN gives a configuration it does not
// support (NOT_SUPPORTED). ember's pooling keeps pad <= window / 2.
Status check_pool_padding(const cudnnPoolingStruct& p, const char* what) {
  if (p.pad_h >= p.win_h || p.pad_w >= p.win_w)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, std::string(what) + ": padding " + std::to_string(p.pad_h) + "x" +
                                                std::to_string(p.pad_w) + " is not smaller than the window " +
                                                std::to_string(p.win_h) + "x" + std::to_string(p.win_w));
  return kOk;
}

// y's dims are x's pooled by p (BAD_PARAM otherwise: n, c must agree, h, w follow the formula).
Status check_pooled_dims(const cudnnPoolingStruct& p, const cudnnTensorStruct& x, const cudnnTensorStruct& y,
                         const char* what, const char* xn, const char* yn) {
  const int64_t oh = pooled(x.dims[2], p.win_h, p.pad_h, p.stride_h),
                ow = pooled(x.dims[3], p.win_w, p.pad_w, p.stride_w);
  if (oh < 1 || ow < 1)
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(what) + ": the window does not fit the padded " + xn + " " + dims_of(x));
  if (y.dims[0] != x.dims[0] || y.dims[1] != x.dims[1] || y.dims[2] != oh || y.dims[3] != ow)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": " + yn + " dims " + dims_of(y) + " are not " + xn + " " +
                                            dims_of(x) + " pooled: [" + std::to_string(x.dims[0]) + "," +
                                            std::to_string(x.dims[1]) + "," + std::to_string(oh) + "," +
                                            std::to_string(ow) + "]");
  return kOk;
}

dnn::PoolGeom geom_of(const cudnnPoolingStruct& p) {
  dnn::PoolGeom g;
  g.mode = p.mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING   ? dnn::PoolMode::avg_include_pad
           : p.mode == CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING ? dnn::PoolMode::avg_exclude_pad
                                                                   : dnn::PoolMode::max;
  g.propagate_nan = p.nan == CUDNN_PROPAGATE_NAN;
  g.deterministic = p.mode != CUDNN_POOLING_MAX;
  g.win_h = p.win_h;
  g.win_w = p.win_w;
  g.pad_h = p.pad_h;
  g.pad_w = p.pad_w;
  g.stride_h = p.stride_h;
  g.stride_w = p.stride_w;
  return g;
}

// ---- softmax ----

Status check_softmax_enums(const cudnnSoftmaxAlgorithm_t& algo, const cudnnSoftmaxMode_t& mode, const char* what) {
  const int a = raw_of(algo), m = raw_of(mode);
  if (a != CUDNN_SOFTMAX_FAST && a != CUDNN_SOFTMAX_ACCURATE && a != CUDNN_SOFTMAX_LOG)
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(what) + ": algorithm " + std::to_string(a) + " is not one of cuDNN's");
  if (m != CUDNN_SOFTMAX_MODE_INSTANCE && m != CUDNN_SOFTMAX_MODE_CHANNEL)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": mode " + std::to_string(m) + " is not one of cuDNN's");
  return kOk;
}
dnn::SoftmaxAlgo algo_of(cudnnSoftmaxAlgorithm_t a) {
  return a == CUDNN_SOFTMAX_FAST  ? dnn::SoftmaxAlgo::fast
         : a == CUDNN_SOFTMAX_LOG ? dnn::SoftmaxAlgo::log
                                  : dnn::SoftmaxAlgo::accurate;
}

// ---- batch norm ----

Status check_bn_mode(const cudnnBatchNormMode_t& mode, const char* what) {
  const int m = raw_of(mode);
  if (m != CUDNN_BATCHNORM_PER_ACTIVATION && m != CUDNN_BATCHNORM_SPATIAL && m != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": mode " + std::to_string(m) + " is not one of cuDNN's");
  return kOk;
}

// The type cudnnDeriveBNTensorDescriptor gives the parameters of `x` data: double for double data,
// float for half, bfloat16 and float.
cudnnDataType_t bn_param_type(cudnnDataType_t x) {
  return x == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

// The parameter/statistics descriptor must be what cudnnDeriveBNTensorDescriptor derives from x:
// [1, C, 1, 1] (spatial) or [1, C, H, W] (per activation), of the derived type.
Status check_bn_param_desc(const cudnnTensorStruct& p, const cudnnTensorStruct& x, cudnnBatchNormMode_t mode,
                           const char* what) {
  const bool per_act = mode == CUDNN_BATCHNORM_PER_ACTIVATION;
  const int want[4] = {1, x.dims[1], per_act ? x.dims[2] : 1, per_act ? x.dims[3] : 1};
  bool ok = p.nb_dims == 4;
  for (int i = 0; ok && i < 4; ++i) ok = p.dims[i] == want[i];
  if (!ok)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the scale/bias/mean/variance descriptor is " +
                                            dims_of(p) + ", not [1," + std::to_string(want[1]) + "," +
                                            std::to_string(want[2]) + "," + std::to_string(want[3]) + "] for x " +
                                            dims_of(x) + (per_act ? " (per activation)" : " (spatial)"));
  if (p.type != bn_param_type(x.type))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the scale/bias/mean/variance data type " +
                                            std::to_string(p.type) + " is not the derived one (" +
                                            std::to_string(bn_param_type(x.type)) +
                                            ": double for double data, "
                                            "float otherwise)");
  return kOk;
}

Status check_epsilon(double eps, const char* what) {
  if (!(eps >= CUDNN_BN_MIN_EPSILON))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": epsilon " + std::to_string(eps) +
                                            " is below CUDNN_BN_MIN_EPSILON (" + std::to_string(CUDNN_BN_MIN_EPSILON) +
                                            ")");
  return kOk;
}

Status both_or_neither(const void* a, const void* b, const char* what, const char* an, const char* bn) {
  if ((a == nullptr) != (b == nullptr))
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(what) + ": exactly one of " + an + " and " + bn + " is null (both or neither)");
  return kOk;
}

dnn::BnShape bn_shape(cudnnBatchNormMode_t mode, const cudnnTensorStruct& x, const cudnnTensorStruct& p, double eps) {
  dnn::BnShape s;
  s.per_activation = mode == CUDNN_BATCHNORM_PER_ACTIVATION;
  elem_of(x.type, s.e);
  elem_of(p.type, s.pe);
  s.pv = view_of(p);
  s.eps = eps;
  return s;
}

// The common checks of the three batch-norm calls: the mode, x and the second data tensor (y or
// dy) of the same type and dims, the parameter descriptor, epsilon.
Status check_bn_common(const cudnnBatchNormMode_t& mode, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y,
                       const char* yn, cudnnTensorDescriptor_t p, double eps, const char* what) {
  if (Status st = check_bn_mode(mode, what); st != kOk) return st;
  if (Status st = check_tensor4(x, what, "x"); st != kOk) return st;
  if (Status st = check_tensor4(y, what, yn); st != kOk) return st;
  if (Status st = check_tensor4(p, what, "scale/bias/mean/variance"); st != kOk) return st;
  Elem e{};
  if (Status st = data_elem(*x, what, "x", e); st != kOk) return st;
  if (Status st = same_type(*x, *y, what, "x", yn); st != kOk) return st;
  if (Status st = same_shape(*x, *y, what, "x", yn); st != kOk) return st;
  if (Status st = check_bn_param_desc(*p, *x, mode, what); st != kOk) return st;
  return check_epsilon(eps, what);
}

}  // namespace

}  // namespace ember::sim::libs::cudnn

using namespace ember::sim::libs;
using namespace ember::sim::libs::cudnn;

// ---- pooling ----

cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* poolingDesc) {
  if (poolingDesc == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreatePoolingDescriptor: poolingDesc is null");
  cudnnPoolingStruct* p = revive<cudnnPoolingStruct>();
  p->magic = kPoolMagic;
  *poolingDesc = p;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t poolingDesc) {
  if (poolingDesc == nullptr) return CUDNN_STATUS_SUCCESS;  // as for tensor descriptors: a no-op
  if (poolingDesc->magic != kPoolMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroyPoolingDescriptor: not a live pooling descriptor");
  bury(poolingDesc);
  return CUDNN_STATUS_SUCCESS;
}

// Documented: BAD_PARAM when a window, padding or stride value is negative or an enumerant is
// invalid. A zero window or stride has no meaning (the output formula divides by the stride) and is
// refused the same way. Padding >= window is accepted here and refused when used (see
// check_pool_padding).
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t poolingDesc, cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t maxpoolingNanOpt, int windowHeight, int windowWidth,
                                          int verticalPadding, int horizontalPadding, int verticalStride,
                                          int horizontalStride) {
  const char* what = "cudnnSetPooling2dDescriptor";
  if (poolingDesc == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": poolingDesc is null");
  if (poolingDesc->magic != kPoolMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the pooling descriptor was destroyed or never created");
  const int m = raw_of(mode), nan = raw_of(maxpoolingNanOpt);
  if (m != CUDNN_POOLING_MAX && m != CUDNN_POOLING_MAX_DETERMINISTIC &&
      m != CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING && m != CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": mode " + std::to_string(m) + " is not one of cuDNN's");
  if (nan != CUDNN_NOT_PROPAGATE_NAN && nan != CUDNN_PROPAGATE_NAN)
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(what) + ": NaN option " + std::to_string(nan) + " is not one of cuDNN's");
  if (windowHeight <= 0 || windowWidth <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": window " + std::to_string(windowHeight) + "x" +
                                            std::to_string(windowWidth) + " (must be positive)");
  if (verticalPadding < 0 || horizontalPadding < 0)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": padding " + std::to_string(verticalPadding) + "x" +
                                            std::to_string(horizontalPadding) + " (must not be negative)");
  if (verticalStride <= 0 || horizontalStride <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": stride " + std::to_string(verticalStride) + "x" +
                                            std::to_string(horizontalStride) + " (must be positive)");
  cudnnPoolingStruct& p = *poolingDesc;
  p.mode = mode;
  p.nan = maxpoolingNanOpt;
  p.win_h = windowHeight;
  p.win_w = windowWidth;
  p.pad_h = verticalPadding;
  p.pad_w = horizontalPadding;
  p.stride_h = verticalStride;
  p.stride_w = horizontalStride;
  p.set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPooling2dDescriptor(const cudnnPoolingDescriptor_t poolingDesc, cudnnPoolingMode_t* mode,
                                          cudnnNanPropagation_t* maxpoolingNanOpt, int* windowHeight, int* windowWidth,
                                          int* verticalPadding, int* horizontalPadding, int* verticalStride,
                                          int* horizontalStride) {
  const char* what = "cudnnGetPooling2dDescriptor";
  if (Status st = check_pool(poolingDesc, what); st != kOk) return st;
  if (mode == nullptr || maxpoolingNanOpt == nullptr || windowHeight == nullptr || windowWidth == nullptr ||
      verticalPadding == nullptr || horizontalPadding == nullptr || verticalStride == nullptr ||
      horizontalStride == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": an output pointer is null");
  const cudnnPoolingStruct& p = *poolingDesc;
  *mode = p.mode;
  *maxpoolingNanOpt = p.nan;
  *windowHeight = p.win_h;
  *windowWidth = p.win_w;
  *verticalPadding = p.pad_h;
  *horizontalPadding = p.pad_w;
  *verticalStride = p.stride_h;
  *horizontalStride = p.stride_w;
  return CUDNN_STATUS_SUCCESS;
}

// Documented: each spatial output dim is 1 + (in + 2 pad - window) / stride; n and c are the
// input's. A window that does not fit the padded input has no output: BAD_PARAM.
cudnnStatus_t cudnnGetPooling2dForwardOutputDim(const cudnnPoolingDescriptor_t poolingDesc,
                                                const cudnnTensorDescriptor_t inputTensorDesc, int* n, int* c, int* h,
                                                int* w) {
  const char* what = "cudnnGetPooling2dForwardOutputDim";
  if (Status st = check_pool(poolingDesc, what); st != kOk) return st;
  if (Status st = check_tensor(inputTensorDesc, what, "input"); st != kOk) return st;
  if (inputTensorDesc->nb_dims != 4)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the input descriptor is not 4-d");
  if (n == nullptr || c == nullptr || h == nullptr || w == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": an output pointer is null");
  const cudnnPoolingStruct& p = *poolingDesc;
  const cudnnTensorStruct& x = *inputTensorDesc;
  const int64_t oh = pooled(x.dims[2], p.win_h, p.pad_h, p.stride_h),
                ow = pooled(x.dims[3], p.win_w, p.pad_w, p.stride_w);
  if (oh < 1 || ow < 1)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the window does not fit the padded input " + dims_of(x));
  *n = x.dims[0];
  *c = x.dims[1];
  *h = static_cast<int>(oh);
  *w = static_cast<int>(ow);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc, const void* alpha,
                                  const cudnnTensorDescriptor_t xDesc, const void* x, const void* beta,
                                  const cudnnTensorDescriptor_t yDesc, void* y) {
  const char* what = "cudnnPoolingForward";
  if (Status st = check_handle(handle, what); st != kOk) return st;
  if (Status st = check_pool(poolingDesc, what); st != kOk) return st;
  if (Status st = check_tensor4(xDesc, what, "x"); st != kOk) return st;
  if (Status st = check_tensor4(yDesc, what, "y"); st != kOk) return st;
  Elem e{};
  if (Status st = data_elem(*xDesc, what, "x", e); st != kOk) return st;
  if (Status st = same_type(*xDesc, *yDesc, what, "x", "y"); st != kOk) return st;
  if (Status st = check_pool_padding(*poolingDesc, what); st != kOk) return st;
  if (Status st = check_pooled_dims(*poolingDesc, *xDesc, *yDesc, what, "x", "y"); st != kOk) return st;
  if (Status st = check_scaling(alpha, what, "alpha"); st != kOk) return st;
  if (Status st = check_scaling(beta, what, "beta"); st != kOk) return st;
  if (Status st = check_data(x, span_bytes(*xDesc), what, "x"); st != kOk) return st;
  if (Status st = check_data(y, span_bytes(*yDesc), what, "y"); st != kOk) return st;
  const double a = scaling(alpha, e), b = scaling(beta, e);
  return run(what, [&] {
    dnn::pool_forward(geom_of(*poolingDesc), e, view_of(*xDesc), x, view_of(*yDesc), y, a, b, handle->stream);
  });
}

// Documented BAD_PARAM: y and dy differ in dims or strides, x and dx differ in dims or strides, the
// four data types differ. y is checked as the forward output but not read: the maximum's position
// is found again in x (the same element cuDNN's y points at for y = pool(x)).
cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc, const void* alpha,
                                   const cudnnTensorDescriptor_t yDesc, const void* y,
                                   const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                   const cudnnTensorDescriptor_t xDesc, const void* x, const void* beta,
                                   const cudnnTensorDescriptor_t dxDesc, void* dx) {
  const char* what = "cudnnPoolingBackward";
  if (Status st = check_handle(handle, what); st != kOk) return st;
  if (Status st = check_pool(poolingDesc, what); st != kOk) return st;
  if (Status st = check_tensor4(yDesc, what, "y"); st != kOk) return st;
  if (Status st = check_tensor4(dyDesc, what, "dy"); st != kOk) return st;
  if (Status st = check_tensor4(xDesc, what, "x"); st != kOk) return st;
  if (Status st = check_tensor4(dxDesc, what, "dx"); st != kOk) return st;
  Elem e{};
  if (Status st = data_elem(*xDesc, what, "x", e); st != kOk) return st;
  if (Status st = same_type(*xDesc, *yDesc, what, "x", "y"); st != kOk) return st;
  if (Status st = same_type(*xDesc, *dyDesc, what, "x", "dy"); st != kOk) return st;
  if (Status st = same_type(*xDesc, *dxDesc, what, "x", "dx"); st != kOk) return st;
  if (Status st = same_shape(*yDesc, *dyDesc, what, "y", "dy"); st != kOk) return st;
  if (Status st = same_shape(*xDesc, *dxDesc, what, "x", "dx"); st != kOk) return st;
  if (!same_strides(*yDesc, *dyDesc))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the y strides " + strides_of(*yDesc) +
                                            " and dy strides " + strides_of(*dyDesc) + " differ");
  if (!same_strides(*xDesc, *dxDesc))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the x strides " + strides_of(*xDesc) +
                                            " and dx strides " + strides_of(*dxDesc) + " differ");
  if (Status st = check_pool_padding(*poolingDesc, what); st != kOk) return st;
  if (Status st = check_pooled_dims(*poolingDesc, *xDesc, *yDesc, what, "x", "y"); st != kOk) return st;
  if (Status st = check_scaling(alpha, what, "alpha"); st != kOk) return st;
  if (Status st = check_scaling(beta, what, "beta"); st != kOk) return st;
  if (Status st = check_data(y, span_bytes(*yDesc), what, "y"); st != kOk) return st;
  if (Status st = check_data(dy, span_bytes(*dyDesc), what, "dy"); st != kOk) return st;
  if (Status st = check_data(x, span_bytes(*xDesc), what, "x"); st != kOk) return st;
  if (Status st = check_data(dx, span_bytes(*dxDesc), what, "dx"); st != kOk) return st;
  const double a = scaling(alpha, e), b = scaling(beta, e);
  return run(what, [&] {
    dnn::pool_backward(geom_of(*poolingDesc), e, view_of(*dyDesc), dy, view_of(*xDesc), x, view_of(*dxDesc), dx, a, b,
                       handle->stream);
  });
}

// ---- softmax ----

// Documented BAD_PARAM: x and y differ in dims or data type, algo or mode is not a valid enumerant.
// There is no NaN option: NaNs follow the arithmetic (a NaN in a row makes the row NaN).
cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                  const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,
                                  const void* beta, const cudnnTensorDescriptor_t yDesc, void* y) {
  const char* what = "cudnnSoftmaxForward";
  if (Status st = check_handle(handle, what); st != kOk) return st;
  if (Status st = check_softmax_enums(algo, mode, what); st != kOk) return st;
  if (Status st = check_tensor4(xDesc, what, "x"); st != kOk) return st;
  if (Status st = check_tensor4(yDesc, what, "y"); st != kOk) return st;
  Elem e{};
  if (Status st = data_elem(*xDesc, what, "x", e); st != kOk) return st;
  if (Status st = same_type(*xDesc, *yDesc, what, "x", "y"); st != kOk) return st;
  if (Status st = same_shape(*xDesc, *yDesc, what, "x", "y"); st != kOk) return st;
  if (Status st = check_scaling(alpha, what, "alpha"); st != kOk) return st;
  if (Status st = check_scaling(beta, what, "beta"); st != kOk) return st;
  if (Status st = check_data(x, span_bytes(*xDesc), what, "x"); st != kOk) return st;
  if (Status st = check_data(y, span_bytes(*yDesc), what, "y"); st != kOk) return st;
  const double a = scaling(alpha, e), b = scaling(beta, e);
  return run(what, [&] {
    dnn::softmax_forward(algo_of(algo), mode == CUDNN_SOFTMAX_MODE_CHANNEL, e, view_of(*xDesc), x, view_of(*yDesc), y,
                         a, b, handle->stream);
  });
}

// Documented BAD_PARAM: y, dy and dx differ in dims or data type, dy and dx differ in strides, algo
// or mode is not a valid enumerant. FAST and ACCURATE share the softmax gradient, LOG has its own.
cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                   const void* alpha, const cudnnTensorDescriptor_t yDesc, const void* y,
                                   const cudnnTensorDescriptor_t dyDesc, const void* dy, const void* beta,
                                   const cudnnTensorDescriptor_t dxDesc, void* dx) {
  const char* what = "cudnnSoftmaxBackward";
  if (Status st = check_handle(handle, what); st != kOk) return st;
  if (Status st = check_softmax_enums(algo, mode, what); st != kOk) return st;
  if (Status st = check_tensor4(yDesc, what, "y"); st != kOk) return st;
  if (Status st = check_tensor4(dyDesc, what, "dy"); st != kOk) return st;
  if (Status st = check_tensor4(dxDesc, what, "dx"); st != kOk) return st;
  Elem e{};
  if (Status st = data_elem(*yDesc, what, "y", e); st != kOk) return st;
  if (Status st = same_type(*yDesc, *dyDesc, what, "y", "dy"); st != kOk) return st;
  if (Status st = same_type(*yDesc, *dxDesc, what, "y", "dx"); st != kOk) return st;
  if (Status st = same_shape(*yDesc, *dyDesc, what, "y", "dy"); st != kOk) return st;
  if (Status st = same_shape(*yDesc, *dxDesc, what, "y", "dx"); st != kOk) return st;
  if (!same_strides(*dyDesc, *dxDesc))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": the dy strides " + strides_of(*dyDesc) +
                                            " and dx strides " + strides_of(*dxDesc) + " differ");
  if (Status st = check_scaling(alpha, what, "alpha"); st != kOk) return st;
  if (Status st = check_scaling(beta, what, "beta"); st != kOk) return st;
  if (Status st = check_data(y, span_bytes(*yDesc), what, "y"); st != kOk) return st;
  if (Status st = check_data(dy, span_bytes(*dyDesc), what, "dy"); st != kOk) return st;
  if (Status st = check_data(dx, span_bytes(*dxDesc), what, "dx"); st != kOk) return st;
  const double a = scaling(alpha, e), b = scaling(beta, e);
  return run(what, [&] {
    dnn::softmax_backward(algo_of(algo), mode == CUDNN_SOFTMAX_MODE_CHANNEL, e, view_of(*yDesc), y, view_of(*dyDesc),
                          dy, view_of(*dxDesc), dx, a, b, handle->stream);
  });
}

// ---- batch norm ----

// Documented: [1, C, 1, 1] (spatial modes) or [1, C, H, W] (per activation), packed, of type double
// for double data and float for half, bfloat16 and float; BAD_PARAM for an invalid mode.
cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc, const cudnnTensorDescriptor_t xDesc,
                                            cudnnBatchNormMode_t mode) {
  const char* what = "cudnnDeriveBNTensorDescriptor";
  if (derivedBnDesc == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": derivedBnDesc is null");
  if (derivedBnDesc->magic != kTensorMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": derivedBnDesc was destroyed or never created");
  if (Status st = check_bn_mode(mode, what); st != kOk) return st;
  if (Status st = check_tensor4(xDesc, what, "x"); st != kOk) return st;
  Elem e{};
  if (Status st = data_elem(*xDesc, what, "x", e); st != kOk) return st;
  const bool per_act = mode == CUDNN_BATCHNORM_PER_ACTIVATION;
  const int c = xDesc->dims[1], h = per_act ? xDesc->dims[2] : 1, w = per_act ? xDesc->dims[3] : 1;
  if (int64_t{c} * h * w > 0x7fffffff)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                std::string(what) + ": the derived tensor would hold more than 2^31 elements");
  cudnnTensorStruct& d = *derivedBnDesc;
  d.type = bn_param_type(xDesc->type);
  d.nb_dims = 4;
  const int dims[4] = {1, c, h, w}, strides[4] = {c * h * w, h * w, w, 1};
  for (int i = 0; i < 4; ++i) {
    d.dims[i] = dims[i];
    d.strides[i] = strides[i];
  }
  d.set = true;
  return CUDNN_STATUS_SUCCESS;
}

// Documented BAD_PARAM: a null alpha, beta, x, y, bnScale or bnBias; x/y dims or types differ; the
// parameter descriptor not the derived shape; exactly one of the running mean/variance or of the
// saved mean/inverse variance null; epsilon below CUDNN_BN_MIN_EPSILON.
cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha,
                                                     const void* beta, const cudnnTensorDescriptor_t xDesc,
                                                     const void* x, const cudnnTensorDescriptor_t yDesc, void* y,
                                                     const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
                                                     const void* bnScale, const void* bnBias,
                                                     double exponentialAverageFactor, void* resultRunningMean,
                                                     void* resultRunningVariance, double epsilon, void* resultSaveMean,
                                                     void* resultSaveInvVariance) {
  const char* what = "cudnnBatchNormalizationForwardTraining";
  if (Status st = check_handle(handle, what); st != kOk) return st;
  if (Status st = check_bn_common(mode, xDesc, yDesc, "y", bnScaleBiasMeanVarDesc, epsilon, what); st != kOk) return st;
  if (Status st = check_scaling(alpha, what, "alpha"); st != kOk) return st;
  if (Status st = check_scaling(beta, what, "beta"); st != kOk) return st;
  if (Status st =
          both_or_neither(resultRunningMean, resultRunningVariance, what, "resultRunningMean", "resultRunningVariance");
      st != kOk)
    return st;
  if (Status st =
          both_or_neither(resultSaveMean, resultSaveInvVariance, what, "resultSaveMean", "resultSaveInvVariance");
      st != kOk)
    return st;
  const size_t pb = span_bytes(*bnScaleBiasMeanVarDesc);
  if (Status st = check_data(x, span_bytes(*xDesc), what, "x"); st != kOk) return st;
  if (Status st = check_data(y, span_bytes(*yDesc), what, "y"); st != kOk) return st;
  if (Status st = check_data(bnScale, pb, what, "bnScale"); st != kOk) return st;
  if (Status st = check_data(bnBias, pb, what, "bnBias"); st != kOk) return st;
  if (resultRunningMean != nullptr) {
    if (Status st = check_data(resultRunningMean, pb, what, "resultRunningMean"); st != kOk) return st;
    if (Status st = check_data(resultRunningVariance, pb, what, "resultRunningVariance"); st != kOk) return st;
  }
  if (resultSaveMean != nullptr) {
    if (Status st = check_data(resultSaveMean, pb, what, "resultSaveMean"); st != kOk) return st;
    if (Status st = check_data(resultSaveInvVariance, pb, what, "resultSaveInvVariance"); st != kOk) return st;
  }
  const dnn::BnShape s = bn_shape(mode, *xDesc, *bnScaleBiasMeanVarDesc, epsilon);
  const double a = scaling(alpha, s.e), b = scaling(beta, s.e);
  return run(what, [&] {
    dnn::bn_forward_training(s, view_of(*xDesc), x, view_of(*yDesc), y, bnScale, bnBias, exponentialAverageFactor,
                             resultRunningMean, resultRunningVariance, resultSaveMean, resultSaveInvVariance, a, b,
                             handle->stream);
  });
}

// Documented BAD_PARAM: a null alpha, beta, x, y, bnScale, bnBias, estimatedMean or
// estimatedVariance; x/y dims or types differ; the parameter descriptor not the derived shape;
// epsilon below CUDNN_BN_MIN_EPSILON.
cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc, void* y,
    const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale, const void* bnBias,
    const void* estimatedMean, const void* estimatedVariance, double epsilon) {
  const char* what = "cudnnBatchNormalizationForwardInference";
  if (Status st = check_handle(handle, what); st != kOk) return st;
  if (Status st = check_bn_common(mode, xDesc, yDesc, "y", bnScaleBiasMeanVarDesc, epsilon, what); st != kOk) return st;
  if (Status st = check_scaling(alpha, what, "alpha"); st != kOk) return st;
  if (Status st = check_scaling(beta, what, "beta"); st != kOk) return st;
  const size_t pb = span_bytes(*bnScaleBiasMeanVarDesc);
  if (Status st = check_data(x, span_bytes(*xDesc), what, "x"); st != kOk) return st;
  if (Status st = check_data(y, span_bytes(*yDesc), what, "y"); st != kOk) return st;
  if (Status st = check_data(bnScale, pb, what, "bnScale"); st != kOk) return st;
  if (Status st = check_data(bnBias, pb, what, "bnBias"); st != kOk) return st;
  if (Status st = check_data(estimatedMean, pb, what, "estimatedMean"); st != kOk) return st;
  if (Status st = check_data(estimatedVariance, pb, what, "estimatedVariance"); st != kOk) return st;
  const dnn::BnShape s = bn_shape(mode, *xDesc, *bnScaleBiasMeanVarDesc, epsilon);
  const double a = scaling(alpha, s.e), b = scaling(beta, s.e);
  return run(what, [&] {
    dnn::bn_forward_inference(s, view_of(*xDesc), x, view_of(*yDesc), y, bnScale, bnBias, estimatedMean,
                              estimatedVariance, a, b, handle->stream);
  });
}

// Documented BAD_PARAM: a null scaling factor, x, dy, dx, bnScale, dBnScaleResult or
// dBnBiasResult; x, dy and dx differ in dims or types; the parameter descriptor not the derived
// shape; exactly one of savedMean and savedInvVariance null; epsilon below CUDNN_BN_MIN_EPSILON.
cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alphaDataDiff, const void* betaDataDiff,
    const void* alphaParamDiff, const void* betaParamDiff, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnTensorDescriptor_t dyDesc, const void* dy, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void* bnScale, void* dBnScaleResult, void* dBnBiasResult,
    double epsilon, const void* savedMean, const void* savedInvVariance) {
  const char* what = "cudnnBatchNormalizationBackward";
  if (Status st = check_handle(handle, what); st != kOk) return st;
  if (Status st = check_bn_common(mode, xDesc, dyDesc, "dy", dBnScaleBiasDesc, epsilon, what); st != kOk) return st;
  if (Status st = check_tensor4(dxDesc, what, "dx"); st != kOk) return st;
  if (Status st = same_type(*xDesc, *dxDesc, what, "x", "dx"); st != kOk) return st;
  if (Status st = same_shape(*xDesc, *dxDesc, what, "x", "dx"); st != kOk) return st;
  if (Status st = check_scaling(alphaDataDiff, what, "alphaDataDiff"); st != kOk) return st;
  if (Status st = check_scaling(betaDataDiff, what, "betaDataDiff"); st != kOk) return st;
  if (Status st = check_scaling(alphaParamDiff, what, "alphaParamDiff"); st != kOk) return st;
  if (Status st = check_scaling(betaParamDiff, what, "betaParamDiff"); st != kOk) return st;
  if (Status st = both_or_neither(savedMean, savedInvVariance, what, "savedMean", "savedInvVariance"); st != kOk)
    return st;
  const size_t pb = span_bytes(*dBnScaleBiasDesc);
  if (Status st = check_data(x, span_bytes(*xDesc), what, "x"); st != kOk) return st;
  if (Status st = check_data(dy, span_bytes(*dyDesc), what, "dy"); st != kOk) return st;
  if (Status st = check_data(dx, span_bytes(*dxDesc), what, "dx"); st != kOk) return st;
  if (Status st = check_data(bnScale, pb, what, "bnScale"); st != kOk) return st;
  if (Status st = check_data(dBnScaleResult, pb, what, "dBnScaleResult"); st != kOk) return st;
  if (Status st = check_data(dBnBiasResult, pb, what, "dBnBiasResult"); st != kOk) return st;
  if (savedMean != nullptr) {
    if (Status st = check_data(savedMean, pb, what, "savedMean"); st != kOk) return st;
    if (Status st = check_data(savedInvVariance, pb, what, "savedInvVariance"); st != kOk) return st;
  }
  const dnn::BnShape s = bn_shape(mode, *xDesc, *dBnScaleBiasDesc, epsilon);
  const double ad = scaling(alphaDataDiff, s.e), bd = scaling(betaDataDiff, s.e), ap = scaling(alphaParamDiff, s.e),
               bp = scaling(betaParamDiff, s.e);
  return run(what, [&] {
    dnn::bn_backward(s, view_of(*xDesc), x, view_of(*dyDesc), dy, view_of(*dxDesc), dx, bnScale, dBnScaleResult,
                     dBnBiasResult, savedMean, savedInvVariance, ad, bd, ap, bp, handle->stream);
  });
}

#endif  // EMBER_WITH_CUDNN
