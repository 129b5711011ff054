// The simulator's cuDNN (Note [simulated vendor libraries] in common.h): handles, tensor
// descriptors, status strings and the checks every cuDNN call shares. Convolutions are in
// cudnn.cpp, pooling, softmax and batch norm in cudnn_ops.cpp.
#if EMBER_WITH_CUDNN  // built where CMake found cudnn.h (CMakeLists.txt)

#include <cudnn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "sim/libs/cudnn_internal.h"

namespace ember::sim::libs::cudnn {

cudnnStatus_t fail(cudnnStatus_t st, const std::string& why) {
  set_last_error(why);
  return st;
}

cudnnStatus_t check_handle(cudnnHandle_t h, const char* what) {
  if (h == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": the handle is null");
  if (h->magic != kHandleMagic)
    return fail(CUDNN_STATUS_NOT_INITIALIZED,
                std::string(what) + ": the handle was not created by cudnnCreate or was destroyed");
  int dev = -1;
  cudaGetDevice(&dev);
  if (dev != h->device)
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(what) + ": the handle belongs to device " + std::to_string(h->device) + " but device " +
                    std::to_string(dev) + " is current (cuDNN handles are bound to the device current at cudnnCreate)");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_tensor(cudnnTensorDescriptor_t d, const char* what, const char* which) {
  if (d == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, std::string(what) + ": the " + which + " descriptor is null");
  if (d->magic != kTensorMagic)
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(what) + ": the " + which + " descriptor was destroyed or never created");
  if (!d->set)
    return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                std::string(what) + ": the " + which + " descriptor was never set");
  return CUDNN_STATUS_SUCCESS;
}

// Note [cuDNN layouts from strides]: cuDNN knows a tensor's layout only from its descriptor's
// strides, and its documentation defines the layouts by them: a tensor is XYZ-fully-packed when,
// in the letters' order, each stride is the next dimension's size times the next stride and the
// last stride is 1 (cuDNN's "Tensors and Layouts"). That definition binds a size-1 dimension's
// stride as well, although no element is ever reached through it, and cuDNN applies it as
// written: PyTorch rewrites those strides before every cuDNN call (fixSizeOneDimStride: "CuDNN has
// a much more stringent requirement on strides"), XLA (openxla/xla#17053) and MLX
// (ml-explore/mlx#2521) after cuDNN misread such tensors. So a descriptor of dense data whose
// strides are NCHW- or NHWC-fully-packed except at a size-1 dimension is refused here with
// NOT_SUPPORTED_LAYOUT, naming the stride the layout needs, rather than computed as if cuDNN had
// read it right. Strided tensors (gaps, other orders) are computed with their strides, as the
// documentation allows for the calls that take them.
cudnnStatus_t check_layout(const cudnnTensorStruct& d, const char* what, const char* which) {
  if (d.nb_dims != 4) return CUDNN_STATUS_SUCCESS;
  struct Packing {
    const char* name;
    int order[4];  // dimensions from the slowest to the fastest
  };
  static constexpr Packing kLayouts[2] = {{"NCHW", {0, 1, 2, 3}}, {"NHWC", {0, 2, 3, 1}}};
  int near_dim = -1;
  int64_t near_want = 0;
  const char* near_layout = nullptr;
  for (const Packing& l : kLayouts) {
    int64_t want = 1;
    int off_singleton = -1;
    int64_t off_want = 0;
    bool packed_elsewhere = true;
    for (int k = 3; k >= 0; --k) {
      const int i = l.order[k];
      if (d.strides[i] != want) {
        if (d.dims[i] != 1) packed_elsewhere = false;
        else if (off_singleton < 0) off_singleton = i, off_want = want;
      }
      want *= d.dims[i];
    }
    if (!packed_elsewhere) continue;
    if (off_singleton < 0) return CUDNN_STATUS_SUCCESS;  // fully packed in this layout
    if (near_layout == nullptr) near_dim = off_singleton, near_want = off_want, near_layout = l.name;
  }
  if (near_layout == nullptr) return CUDNN_STATUS_SUCCESS;
  std::string dims, strides;
  for (int i = 0; i < 4; ++i) {
    dims += (i ? "," : "") + std::to_string(d.dims[i]);
    strides += (i ? "," : "") + std::to_string(d.strides[i]);
  }
  return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT,
              std::string(what) + ": the " + which + " descriptor [" + dims + "] with strides (" + strides + ") is " +
                  near_layout + "-fully-packed except for the stride " + std::to_string(d.strides[near_dim]) +
                  " of its size-1 dimension " + std::to_string(near_dim) + ", which that layout needs to be " +
                  std::to_string(near_want) + " (cuDNN reads the layout from the strides)");
}

bool elem_of(cudnnDataType_t t, Elem& out) {
  switch (t) {
    case CUDNN_DATA_FLOAT: out = Elem::f32; return true;
    case CUDNN_DATA_DOUBLE: out = Elem::f64; return true;
    case CUDNN_DATA_HALF: out = Elem::f16; return true;
    case CUDNN_DATA_BFLOAT16: out = Elem::bf16; return true;
    default: return false;
  }
}

size_t span_bytes(const cudnnTensorStruct& d) {
  Elem e{};
  if (!elem_of(d.type, e)) return 0;
  int64_t last = 0;
  for (int i = 0; i < d.nb_dims; ++i) last += static_cast<int64_t>(d.dims[i] - 1) * d.strides[i];
  return static_cast<size_t>(last + 1) * elem_bytes(e);
}

}  // namespace ember::sim::libs::cudnn

using namespace ember::sim::libs;
using namespace ember::sim::libs::cudnn;

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
#define EMBER_CUDNN_NAME(x) \
  case x: return #x;
    EMBER_CUDNN_NAME(CUDNN_STATUS_SUCCESS)
    EMBER_CUDNN_NAME(CUDNN_STATUS_NOT_INITIALIZED)
    EMBER_CUDNN_NAME(CUDNN_STATUS_BAD_PARAM)
    EMBER_CUDNN_NAME(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    EMBER_CUDNN_NAME(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    EMBER_CUDNN_NAME(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    EMBER_CUDNN_NAME(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    EMBER_CUDNN_NAME(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    EMBER_CUDNN_NAME(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    EMBER_CUDNN_NAME(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    EMBER_CUDNN_NAME(CUDNN_STATUS_NOT_SUPPORTED)
    EMBER_CUDNN_NAME(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    EMBER_CUDNN_NAME(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    EMBER_CUDNN_NAME(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
    EMBER_CUDNN_NAME(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
    EMBER_CUDNN_NAME(CUDNN_STATUS_INTERNAL_ERROR)
    EMBER_CUDNN_NAME(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    EMBER_CUDNN_NAME(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    EMBER_CUDNN_NAME(CUDNN_STATUS_EXECUTION_FAILED)
    EMBER_CUDNN_NAME(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
#undef EMBER_CUDNN_NAME
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  std::snprintf(message, max_size, "%s", last_error().c_str());
}

size_t cudnnGetVersion() { return CUDNN_VERSION; }

// cuDNN allocates device memory for a handle, so cudnnCreate is one of the calls a stream capture
// refuses (the simulated cudaMalloc fails then, and the capture is invalidated as on a GPU).
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreate: handle is null");
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return fail(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: no CUDA device");
  void* scratch = nullptr;
  if (cudaError_t e = cudaMalloc(&scratch, 4096); e != cudaSuccess) {
    return fail(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
                std::string("cudnnCreate: allocating the handle's device memory failed: ") + cudaGetErrorString(e));
  }
  cudnnContext* h = revive<cudnnContext>();
  h->magic = kHandleMagic;
  h->device = dev;
  h->scratch = scratch;
  *handle = h;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (cudnnStatus_t st = check_handle(handle, "cudnnDestroy"); st != CUDNN_STATUS_SUCCESS) return st;
  cudaFree(handle->scratch);
  bury(handle);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (cudnnStatus_t st = check_handle(handle, "cudnnSetStream"); st != CUDNN_STATUS_SUCCESS) return st;
  // the stream must belong to the handle's device
  if (stream != nullptr) {
    int dev = -1;
    if (cudaStreamGetDevice(stream, &dev) != cudaSuccess)
      return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a valid stream");
    if (dev != handle->device)
      return fail(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, "cudnnSetStream: the stream belongs to device " +
                                                              std::to_string(dev) + ", the handle to device " +
                                                              std::to_string(handle->device));
  }
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (cudnnStatus_t st = check_handle(handle, "cudnnGetStream"); st != CUDNN_STATUS_SUCCESS) return st;
  if (stream == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnGetStream: stream is null");
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

// ---- tensor descriptors ----

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreateTensorDescriptor: null");
  *d = revive<cudnnTensorStruct>();
  (*d)->magic = kTensorMagic;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  if (d == nullptr) return CUDNN_STATUS_SUCCESS;  // documented: destroying null is a no-op
  if (d->magic != kTensorMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroyTensorDescriptor: not a live descriptor");
  bury(d);
  return CUDNN_STATUS_SUCCESS;
}

// Documented: BAD_PARAM when a dimension or stride is not positive or the data type is invalid;
// NOT_SUPPORTED when the tensor is larger than 2 GiB elements.
cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t d, cudnnDataType_t type, int n, int c, int h, int w,
                                           int ns, int cs, int hs, int ws) {
  const char* what = "cudnnSetTensor4dDescriptorEx";
  if (d == nullptr || d->magic != kTensorMagic)
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": not a live descriptor");
  Elem e{};
  if (!elem_of(type, e))
    return fail(CUDNN_STATUS_BAD_PARAM,
                std::string(what) + ": data type " + std::to_string(type) + " is not one the legacy API computes with");
  const int dims[4] = {n, c, h, w}, strides[4] = {ns, cs, hs, ws};
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (dims[i] <= 0)
      return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": dimension " + std::to_string(i) + " is " +
                                              std::to_string(dims[i]) + " (must be positive)");
    if (strides[i] <= 0)
      return fail(CUDNN_STATUS_BAD_PARAM, std::string(what) + ": stride " + std::to_string(i) + " is " +
                                              std::to_string(strides[i]) + " (must be positive)");
    last += static_cast<int64_t>(dims[i] - 1) * strides[i];
  }
  if (last >= (int64_t{1} << 31))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, std::string(what) + ": the tensor spans more than 2^31 elements");
  d->type = type;
  d->nb_dims = 4;
  for (int i = 0; i < 4; ++i) {
    d->dims[i] = dims[i];
    d->strides[i] = strides[i];
  }
  d->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format, cudnnDataType_t type,
                                         int n, int c, int h, int w) {
  if (format == CUDNN_TENSOR_NCHW) return cudnnSetTensor4dDescriptorEx(d, type, n, c, h, w, c * h * w, h * w, w, 1);
  if (format == CUDNN_TENSOR_NHWC) return cudnnSetTensor4dDescriptorEx(d, type, n, c, h, w, h * w * c, 1, w * c, c);
  return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: format must be NCHW or NHWC");
}

cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t d, cudnnDataType_t* type, int* n, int* c, int* h,
                                         int* w, int* ns, int* cs, int* hs, int* ws) {
  if (cudnnStatus_t st = check_tensor(d, "cudnnGetTensor4dDescriptor", "tensor"); st != CUDNN_STATUS_SUCCESS) return st;
  if (d->nb_dims != 4) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetTensor4dDescriptor: not a 4-d descriptor");
  *type = d->type;
  *n = d->dims[0];
  *c = d->dims[1];
  *h = d->dims[2];
  *w = d->dims[3];
  *ns = d->strides[0];
  *cs = d->strides[1];
  *hs = d->strides[2];
  *ws = d->strides[3];
  return CUDNN_STATUS_SUCCESS;
}

#endif  // EMBER_WITH_CUDNN
