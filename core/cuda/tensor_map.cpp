// make_tensor_map: cuTensorMapEncodeTiled through the runtime's driver entry point (tensor_map.h).
#include "core/cuda/tensor_map.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <sstream>

#include "core/error.h"

namespace ember::cuda {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {
  static EncodeTiled fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  });
  return fn;
}

CUtensorMapDataType map_type(DType dt) {
  switch (dt) {
    case DType::u8: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case DType::f16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::f32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::f64: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case DType::i32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case DType::i64: return CU_TENSOR_MAP_DATA_TYPE_INT64;
    default: EMBER_FAIL("make_tensor_map: no tensor-map type for ", dt);
  }
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

}  // namespace

CUtensorMap make_tensor_map(const TensorMapSpec& s) {
  const size_t rank = s.dims.size();
  EMBER_CHECK(rank >= 1 && rank <= 5 && s.box.size() == rank && s.strides_bytes.size() + 1 == rank,
              "make_tensor_map: ", rank, " dims need ", rank, " box sizes and ", rank == 0 ? 0 : rank - 1,
              " strides, got ", s.box.size(), " and ", s.strides_bytes.size());
  EncodeTiled fn = encode_fn();
  EMBER_CHECK(fn != nullptr,
              "make_tensor_map: the CUDA driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12 and sm_90)");
  const std::vector<cuuint32_t> estr(rank, 1);
  const CUtensorMapSwizzle sw = s.swizzle == TensorMapSwizzle::b32    ? CU_TENSOR_MAP_SWIZZLE_32B
                                : s.swizzle == TensorMapSwizzle::b64  ? CU_TENSOR_MAP_SWIZZLE_64B
                                : s.swizzle == TensorMapSwizzle::b128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                                                      : CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMap map{};
  const CUresult r =
      fn(&map, map_type(s.dtype), static_cast<cuuint32_t>(rank), const_cast<void*>(s.base), s.dims.data(),
         s.strides_bytes.data(), s.box.data(), estr.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
         CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
         s.nan_fill ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  EMBER_CHECK(r == CUDA_SUCCESS, "make_tensor_map: cuTensorMapEncodeTiled refused the map (CUresult ",
              static_cast<int>(r), r == CUDA_ERROR_NOT_SUPPORTED ? ", not supported" : "", "): ", s.dtype, " at ",
              s.base, ", dims ", list(s.dims), " (innermost first), byte strides ", list(s.strides_bytes), ", box ",
              list(s.box), ", swizzle ", static_cast<int>(s.swizzle),
              " (the base 16-byte aligned, strides multiples of 16, box ",
              "sizes 1-256 with the inner one a multiple of 16 bytes and at most the swizzle's span)");
  return map;
}

}  // namespace ember::cuda
