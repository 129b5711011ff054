// The op registry: every op is data (an OpInfo) built from kernels/ops.def, and one runner
// (call()) executes any op: infer output shapes, allocate, pick a kernel variant, run it, record
// autograd.
//
// Note [op registry]: kernels/ops.def is the single list of ops. It expands into the OpId enum,
// the table of OpInfos, the generic tests (coverage, gradcheck, CPU-vs-CUDA parity) and bench_ops.
// Each op provides, in its own files:
//   define_op_<name>(OpInfo&)       (<op>.cpp) shape inference, backward, cost, CPU kernel
//   register_cuda_<name>(OpInfo&)   (<op>.cu)  its CUDA kernel variants
// registry.cpp calls them in ops.def order when the registry is first used: no static
// initialisers, so nothing is lost when the static library is linked. What the library does not
// need lives beside the code that uses it, expanded from the same list: the test samples
// (samples_<name>, tests/op_samples/op_samples.h) and the benchmark shapes (benches_<name>,
// bench/op_shapes/op_shapes.h). A missing one fails to link.
#pragma once

#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/autograd/node.h"
#include "core/tensor.h"
#include "kernels/autocast_policy.h"  // AutocastPolicy

namespace ember {

enum class OpId : uint16_t {
#define EMBER_OP(name, devices) name,
#define EMBER_UNARY(name, Functor) name, name##_backward,
#define EMBER_BINARY(name, Functor) name, name##_scalar,
#include "kernels/ops.def"
  kCount
};
inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

// Device flags used in ops.def.
inline constexpr uint32_t CPU = 1u << static_cast<unsigned>(DeviceType::cpu);
inline constexpr uint32_t CUDA = 1u << static_cast<unsigned>(DeviceType::cuda);

// An op's non-tensor arguments: any trivially copyable struct of up to 192 bytes, stored inline
// (no allocation per call). Attribute structs are value-initialised (`ConvAttrs a{}`) so their
// bytes, which key the autotune cache, are deterministic.
class Attrs {
 public:
  static constexpr size_t kCapacity = 192;
  Attrs() = default;
  template <class T, class = std::enable_if_t<!std::is_same_v<std::decay_t<T>, Attrs>>>
  Attrs(const T& value) {  // NOLINT: implicit, call(op, in, ConvAttrs{...})
    static_assert(std::is_trivially_copyable_v<T>, "op attributes must be trivially copyable");
    static_assert(sizeof(T) <= kCapacity, "op attributes are limited to 192 bytes");
    std::memcpy(buf_, &value, sizeof(T));
    tag_ = &type_tag<T>;
    size_ = sizeof(T);
  }
  template <class T>
  const T& get() const {
    EMBER_CHECK(tag_ == &type_tag<T>, "op attributes hold a different type than the kernel expects");
    return *reinterpret_cast<const T*>(buf_);
  }
  bool empty() const { return tag_ == nullptr; }
  // Bytes of the stored value (for cache keys).
  std::string_view bytes() const { return {reinterpret_cast<const char*>(buf_), size_}; }

 private:
  template <class T>
  static inline const char type_tag = 0;
  alignas(16) unsigned char buf_[kCapacity] = {};
  const char* tag_ = nullptr;
  size_t size_ = 0;
};

// Common attribute structs.
struct ScalarAttrs {
  double value = 0;
};

struct KernelCall {
  OpId op;
  std::span<const Tensor> in;
  std::span<Tensor> out;  // allocated by the runner (or aliases of inputs for in-place ops)
  const Attrs& attrs;
  template <class T>
  const T& attr() const {
    return attrs.get<T>();
  }
};
using KernelFn = void (*)(const KernelCall&);

enum VariantFlag : uint32_t {
  kVendor = 1u << 0,            // cuBLAS / cuDNN / oneDNN
  kNondeterministic = 1u << 1,  // e.g. float atomics: excluded in deterministic mode
  kReference = 1u << 2,         // kept to be compared with (the oracles, the lab's variants): tested,
                                // benchmarked, never picked by default nor by autotune
  kTf32 = 1u << 3,              // reads f32 operands as TF32 (10 mantissa bits): asked for by name;
                                // checked against its products' magnitudes (Note [TF32 parity] in
                                // tests/op_driver.cpp; bench_ops at f16's tolerance)
  kSimOnly = 1u << 4,           // has run only in the CUDA simulator, never on the GPU it is for:
                                // never a default; an autotune candidate once it agrees with the
                                // default on the call being tuned (Note [simulator-only
                                // candidates] in kernels/autotune.cpp)
};

struct Variant {
  std::string name;  // what it is: "cpu", "simt", "mma_sync", "multi_tensor", "cublas", ...
  DeviceType device = DeviceType::cpu;
  KernelFn fn = nullptr;
  DTypeSet dtypes = kAllTypes;
  uint32_t flags = 0;
  bool (*supports)(const KernelCall&) = nullptr;  // extra applicability check (shapes, alignment)
  std::string note;                               // one line: what this version does
  int index = -1;                                 // set by add_variant: its slot in variant_runs()
  bool accepts(const KernelCall& c) const;
};

// What infer() says about each output.
struct TensorSpec {
  Shape shape;
  DType dtype = kDefaultFloat;
  Strides strides;  // empty: contiguous
  int alias = -1;   // >= 0: the output is input `alias`, written in place
};
using InferFn = std::vector<TensorSpec> (*)(std::span<const Tensor> in, const Attrs& attrs);
using ViewFn = Tensor (*)(const Tensor& self, const Attrs& attrs);

enum class Save : uint8_t { nothing = 0, inputs = 1, outputs = 2, both = 3 };

struct BackwardCtx {
  std::vector<Tensor> inputs;   // saved inputs (undefined unless Save::inputs/both)
  std::vector<Tensor> outputs;  // saved outputs (undefined unless Save::outputs/both)
  std::vector<Tensor> grads;    // gradient of each output; undefined means zero
  std::vector<bool> needs;      // which inputs want a gradient
  std::vector<autograd::OutputMeta> input_meta;
  std::vector<autograd::OutputMeta> output_meta;
  const Attrs* attrs = nullptr;

  bool needs_grad(size_t i) const { return i < needs.size() && needs[i]; }
  // Gradient of output i (zeros when nothing flowed into it).
  Tensor grad(size_t i = 0) const;
  template <class T>
  const T& attr() const {
    return attrs->get<T>();
  }
};
// Returns one gradient per input (undefined where not needed or not differentiable).
using BackwardFn = std::vector<Tensor> (*)(const BackwardCtx& ctx);

struct Cost {
  double bytes = 0;  // fewest bytes the op must move through memory
  double flops = 0;
};
using CostFn = Cost (*)(const KernelCall& c);

struct OpInfo {
  OpId id{};
  const char* name = "";
  uint32_t devices = 0;  // from ops.def
  InferFn infer = nullptr;
  ViewFn view = nullptr;  // set for view ops (no kernel; the result shares storage)
  BackwardFn backward = nullptr;
  Save save = Save::nothing;
  // With Save::inputs / outputs / both: which ones are kept (bit i = input or output i); the others
  // reach the backward undefined. E.g. batch_norm must not save the running statistics it updates
  // in place (a second call before backward would fail the saved-version check).
  uint64_t save_inputs_mask = ~uint64_t{0};
  uint64_t save_outputs_mask = ~uint64_t{0};
  CostFn cost = nullptr;
  AutocastPolicy autocast = AutocastPolicy::none;
  bool contiguous_inputs = true;  // the runner makes inputs contiguous before the kernel
  // The input whose dtype a call is counted under (variant_runs), where the majority of floating
  // operands would name the wrong one (train_stats: f16 logits beside its f32 counters); -1: the
  // majority.
  int dtype_input = -1;
  std::vector<Variant> variants;
  std::string doc;  // one line for --list

  bool differentiable() const { return backward != nullptr; }
  void add_variant(Variant v);
  // The variant used when nothing else is asked for: the first variant registered for the device
  // that accepts the call and is neither kReference, kVendor nor kSimOnly.
  const Variant* default_variant(const KernelCall& c, DeviceType d) const;
};

const OpInfo& op_info(OpId id);
std::span<const OpInfo> all_ops();
const OpInfo* find_op(std::string_view name);

// ---- the runner ----

// Runs op `id` on `inputs` and returns its outputs, recording autograd when grad mode is on and an
// input requires grad.
std::vector<Tensor> call(OpId id, std::vector<Tensor> inputs, const Attrs& attrs = {});
Tensor call1(OpId id, std::vector<Tensor> inputs, const Attrs& attrs = {});
// Runs op `id` into given outputs (which must match what the op infers: shape and dtype), no
// autograd: the in-place forms (add_, mul_, fused optimizer steps) use it.
void call_into(OpId id, std::vector<Tensor> inputs, std::vector<Tensor> outputs, const Attrs& attrs = {});
// Runs one given variant of an op into freshly allocated outputs, no autograd (tests, bench).
std::vector<Tensor> call_variant(const Variant& v, OpId id, std::vector<Tensor> inputs, const Attrs& attrs = {});
// The same into given outputs, as call_into.
void call_variant_into(const Variant& v, OpId id, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
                       const Attrs& attrs = {});

// How often variant `v` has run in this process, per dtype of its call (the most common dtype of its
// floating operands, else its first operand's): the GPU suites use it to show that every kernel ran
// (tests/main_gpu.cpp).
uint64_t variant_runs(const Variant& v, DType dtype);

// ---- variant selection ----

// Per-op backend preference: "" or "default" (ember's default variant), "vendor" (cuBLAS/cuDNN,
// oneDNN on the CPU, where registered), "auto" (autotune: time the candidates once per shape), or
// a variant's name.
void set_backend(OpId id, const std::string& preference);
// The same for every op.
void set_backend_all(const std::string& preference);
std::string backend(OpId id);
// Deterministic mode: variants flagged kNondeterministic are never chosen.
void set_deterministic(bool on);
bool deterministic();
// Note [CPU defaults]: which CPU variant is fastest depends on the machine (its ISA, caches and
// cores): ember's own conv kernels win on one CPU, oneDNN's on another. With measured CPU defaults
// on (mnist_train's default; the library's is off), an op on the CPU that has no backend
// preference is tuned like "auto" on first use at its shape, among its non-reference variants
// (oneDNN's included), and the choice is kept in the autotune cache, whose keys name the CPU
// model, its ISA and the thread count (one machine's choices never apply on another). With it off,
// or in deterministic mode, the default is the first plain variant registered.
void set_measured_cpu_defaults(bool on);
bool measured_cpu_defaults();
// The variants of device type `d` that ran since the process started (each op's with runs, in
// registration order), for the ops with more than one plain or vendor variant there: what a run's
// choices were. "conv2d=dnnl, max_pool2d=cpu+planes".
std::string variants_run(DeviceType d);
// Picks the variant that will run `c` on device type `d`.
const Variant& select_variant(const OpInfo& info, const KernelCall& c, DeviceType d);
// The same as if `preference` (set_backend's syntax) were the op's backend preference.
const Variant& select_variant(const OpInfo& info, const KernelCall& c, DeviceType d, const std::string& preference);

// Autotune plugs in here: given the accepting candidates, returns the one to use (or nullptr to
// fall back to the default). Installed by kernels/autotune.cpp.
using AutotuneFn = const Variant* (*)(const OpInfo& info, const KernelCall& c,
                                      std::span<const Variant* const> candidates);
void set_autotune_hook(AutotuneFn fn);

// ---- helpers for op implementations ----

// Checks that every defined tensor is on the same device; names the op and the offending inputs.
Device common_device(const char* op, std::span<const Tensor> in);
// An undefined-safe zeros tensor with the given metadata.
Tensor zeros_meta(const autograd::OutputMeta& m);

}  // namespace ember
