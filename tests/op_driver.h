// The generic op driver: every op in kernels/ops.def is checked from its samples alone
// (op_samples(id), tests/op_samples/op_samples.h).
//
//   gradcheck(op)      f64 on the CPU: analytic gradients (autograd) against central differences
//                      (eps 1e-6, atol 1e-5, rtol 1e-3) of L = sum(w * out) with random w; every
//                      input element for small inputs, a random direction for large ones
//   variant_parity(op, device)
//                      each registered variant of `device` against the op's CPU reference
//                      variant, per sample dtype, with PyTorch's default tolerances
//   backward_parity(op, device)
//                      gradients through autograd on `device` against the CPU's
#pragma once

#include <string>

#include "core/tensor.h"
#include "kernels/registry.h"
#include "tests/op_samples/op_samples.h"

namespace ember::testing {

// True in the simulator build (-DEMBER_CUDA_SIM=ON), where the GPU suites run on the CPU: tests
// whose sizes serve a GPU (waves of blocks, memory ratios at scale) use smaller ones there that
// still reach every tile and edge path, and tests of vendor libraries say they are skipped.
#if defined(EMBER_CUDA_SIM) && EMBER_CUDA_SIM
inline constexpr bool kSimulator = true;
#else
inline constexpr bool kSimulator = false;
#endif

// Default tolerances (PyTorch's): f64 1e-7/1e-7, f32 1.3e-6/1e-5, f16 1e-3/1e-5, bf16 1.6e-2/1e-5;
// integers and bool exact.
Tol default_tol(DType t);
Tol sample_tol(const OpSample& s, DType t);

// Empty string when `got` matches `want` (same shape and dtype, allclose with equal NaNs);
// otherwise a message naming the worst element.
// `scale` (optional, want's shape): each element's error allowed is atol + rtol * scale[i] instead
// of atol + rtol * |want[i]|.
std::string compare(const Tensor& got, const Tensor& want, Tol tol, const Tensor& scale = Tensor());

// The variant of `op` named `name` on device `d`, or nullptr.
const Variant* find_variant(OpId op, DeviceType d, const std::string& name);

// A copy of t on `device` with the same shape, strides and offset (so non-contiguous layouts
// reach the kernels as they are).
Tensor to_device_same_layout(const Tensor& t, Device device);

// Casts the floating inputs of a sample to dtype (except s.keep_dtype), keeping their layouts.
std::vector<Tensor> inputs_as(const OpSample& s, DType dtype);

// Each returns a list of failure messages (empty when everything passed).
std::vector<std::string> gradcheck(const OpInfo& info, const OpSample& s);
std::vector<std::string> variant_parity(const OpInfo& info, const OpSample& s, DeviceType device);
std::vector<std::string> backward_parity(const OpInfo& info, const OpSample& s, DeviceType device);

}  // namespace ember::testing
