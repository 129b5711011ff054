// The test cases of every op, kept out of the library: the generic op driver (tests/op_driver.h),
// the GPU suites, the autocast and autotune tests and the kernel model (bench/model/) read them
// from op_samples(id). One file per op file of kernels/ops/ (<op>_samples.cpp) defines
// samples_<name>() for each of its ops; op_samples.cpp builds the table from kernels/ops.def,
// declaring one function per entry, so an op with no samples fails to link (and one whose samples
// are empty fails the coverage test in tests/test_ops.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/registry.h"

namespace ember {

struct Tol {
  double rtol, atol;
};

// One test case of an op, drawn by the generic driver (tests/test_ops.cpp).
struct OpSample {
  std::string name;
  std::vector<Tensor> inputs;  // CPU tensors; floating ones in f64
  Attrs attrs;
  std::vector<int> grad_inputs;  // inputs to gradcheck; empty: every floating input
  bool gradcheck = true;
  bool parity = true;
  DTypeSet dtypes{DType::f32, DType::f16, DType::bf16};  // CPU-vs-CUDA parity dtypes
  std::vector<std::pair<DType, Tol>> tol;                // overrides of the default tolerances ...
  std::string tol_note;                                  // ... and why
  // false: the vendor variants (kVendor) are not held to the CPU reference on this sample, where
  // the library's semantics differ from ember's and PyTorch's (tol_note says how)
  bool vendor_parity = true;
  // overrides of `tol` for the vendor variants only, where a library's documented numerics are
  // looser than ember's kernels (tol_note says which and why)
  std::vector<std::pair<DType, Tol>> vendor_tol;
  // Indices of inputs that keep their dtype when the driver casts floating inputs (e.g. masks).
  std::vector<int> keep_dtype;
};
using SamplesFn = std::vector<OpSample> (*)();

// One per ops.def entry (the unary family's name_backward and the binary family's name_scalar
// included), defined in tests/op_samples/<op file>_samples.cpp.
#define EMBER_OP(name, devices) std::vector<OpSample> samples_##name();
#define EMBER_UNARY(name, Functor)        \
  std::vector<OpSample> samples_##name(); \
  std::vector<OpSample> samples_##name##_backward();
#define EMBER_BINARY(name, Functor)       \
  std::vector<OpSample> samples_##name(); \
  std::vector<OpSample> samples_##name##_scalar();
#include "kernels/ops.def"

// The samples of op `id` (never null).
SamplesFn op_samples(OpId id);

}  // namespace ember
