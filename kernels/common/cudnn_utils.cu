// cuDNN handles and dtype mapping (kernels/common/cudnn_utils.h).
#if EMBER_WITH_CUDNN

#include "kernels/common/cudnn_utils.h"

#include "core/cuda/device_guard.h"

#include <mutex>
#include <utility>
#include <vector>

namespace ember::cudnn {

namespace {

// ---- handles: per (thread, device), pooled across threads ----

struct HandlePool {
  std::mutex mu;
  std::vector<std::pair<int, cudnnHandle_t>> free;
};
HandlePool& handle_pool() {
  static auto* p = new HandlePool();  // outlives every thread's holder
  return *p;
}
struct ThreadHandles {
  std::vector<std::pair<int, cudnnHandle_t>> mine;
  ~ThreadHandles() {
    std::lock_guard<std::mutex> lock(handle_pool().mu);
    for (auto& h : mine) handle_pool().free.push_back(h);
  }
};

}  // namespace

cudnnHandle_t handle_for(int device, cudaStream_t stream) {
  thread_local ThreadHandles th;
  cudnnHandle_t h = nullptr;
  for (auto& [d, hh] : th.mine)
    if (d == device) h = hh;
  if (h == nullptr) {
    {
      std::lock_guard<std::mutex> lock(handle_pool().mu);
      auto& f = handle_pool().free;
      for (size_t i = 0; i < f.size(); ++i)
        if (f[i].first == device) {
          h = f[i].second;
          f.erase(f.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
    }
    if (h == nullptr) {
      cuda::RelaxedCapture relaxed;  // Note [vendor handles in a capture] in kernels/gemm/gemm_vendor.cu
      EMBER_CUDNN_CHECK(cudnnCreate(&h));
    }
    th.mine.push_back({device, h});
  }
  EMBER_CUDNN_CHECK(cudnnSetStream(h, stream));
  return h;
}

std::string last_error() {
#if CUDNN_MAJOR >= 9
  char buf[1024] = {};
  cudnnGetLastErrorString(buf, sizeof(buf));
  if (buf[0] != '\0') return std::string(" (") + buf + ")";
#endif
  return "";
}

cudnnDataType_t data_type(DType t, const char* what) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: EMBER_FAIL(what, ": unsupported dtype ", t);
  }
}

}  // namespace ember::cudnn

#endif  // EMBER_WITH_CUDNN
