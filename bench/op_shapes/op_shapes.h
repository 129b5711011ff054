// The shapes bench_ops times each op on, kept out of the library: bench/bench_ops.cpp and the
// kernel model (bench/model/kernel_model.cpp) read them from op_benches(id). One file per op file
// of kernels/ops/ (<op>_shapes.cpp) defines benches_<name>() for each of its ops; op_shapes.cpp
// builds the table from kernels/ops.def, declaring one function per entry, and defines the empty
// list of the ops bench_ops does not time. The cost model of each op (bytes and FLOPs) stays with
// the op (OpInfo::cost).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/registry.h"

namespace ember {

// A benchmark case: inputs are generated on the device (uniform in [-1, 1) unless integer).
struct BenchCase {
  std::string name;
  std::vector<TensorSpec> inputs;
  Attrs attrs;
  // Optional: makes the inputs (e.g. valid indices); gets the device.
  std::function<std::vector<Tensor>(Device)> make;
};
using BenchFn = std::vector<BenchCase> (*)();

// An input activation the layer ops (batch norm, pooling) are timed on.
struct LayerInput {
  const char* label;  // where in which model
  Shape x;
  bool cl;  // channels-last
  DType dt;
  // "<label> <shape> <dtype>[ channels-last]": the name of the cases on it.
  std::string name() const { return str(label, " ", x, " ", dt, cl ? " channels-last" : ""); }
};

// One per ops.def entry (the unary family's name_backward and the binary family's name_scalar
// included), defined in bench/op_shapes/<op file>_shapes.cpp or, for ops without benchmark
// cases, in op_shapes.cpp.
#define EMBER_OP(name, devices) std::vector<BenchCase> benches_##name();
#define EMBER_UNARY(name, Functor)         \
  std::vector<BenchCase> benches_##name(); \
  std::vector<BenchCase> benches_##name##_backward();
#define EMBER_BINARY(name, Functor)        \
  std::vector<BenchCase> benches_##name(); \
  std::vector<BenchCase> benches_##name##_scalar();
#include "kernels/ops.def"

// The benchmark cases of op `id` (never null; empty for an op bench_ops does not time).
BenchFn op_benches(OpId id);

}  // namespace ember
