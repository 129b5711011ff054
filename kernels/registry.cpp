#include "kernels/registry.h"

#include <array>
#include <atomic>
#include <mutex>
#include <utility>

#include "core/autograd/engine.h"
#include "core/cuda/runtime.h"
#include "core/autocast.h"
#include "core/profiler.h"
#include "core/runtime.h"
#include "kernels/functional.h"
#include "kernels/lab_variants.h"

namespace ember {

// Every op's definition functions (see Note [op registry]).
#define EMBER_OP(name, devices)        \
  void define_op_##name(OpInfo& info); \
  void register_cuda_##name(OpInfo& info);
#define EMBER_UNARY(name, Functor)                \
  void define_op_##name(OpInfo& info);            \
  void define_op_##name##_backward(OpInfo& info); \
  void register_cuda_##name(OpInfo& info);        \
  void register_cuda_##name##_backward(OpInfo& info);
#define EMBER_BINARY(name, Functor)             \
  void define_op_##name(OpInfo& info);          \
  void define_op_##name##_scalar(OpInfo& info); \
  void register_cuda_##name(OpInfo& info);      \
  void register_cuda_##name##_scalar(OpInfo& info);
#include "kernels/ops.def"

namespace autotune {
void install();  // kernels/autotune.cpp: the hook behind set_backend(op, "auto")
}  // namespace autotune

namespace {

struct Registry {
  std::array<OpInfo, kNumOps> ops;
};

void define(Registry& r, OpId id, const char* name, uint32_t devices, void (*def)(OpInfo&), void (*cuda)(OpInfo&)) {
  OpInfo& info = r.ops[static_cast<size_t>(id)];
  info.id = id;
  info.name = name;
  info.devices = devices;
  def(info);
  if (cuda != nullptr) cuda(info);
  EMBER_CHECK(info.view != nullptr || info.infer != nullptr, "op ", name, " defines neither infer nor view");
}

// The CUDA registration function of an op, or nullptr in a build without CUDA or for an op whose
// ops.def entry has no CUDA flag. The generic lambda keeps the function unreferenced (so it need not
// exist) when the condition is false.
#define EMBER_CUDA_REGISTER(fn, devices)                                                          \
  [](auto tag) -> void (*)(OpInfo&) {                                                             \
    if constexpr (decltype(tag)::value && EMBER_WITH_CUDA && (((devices)&CUDA) != 0)) return &fn; \
    else return nullptr;                                                                          \
  }(std::true_type{})

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry();
#define EMBER_OP(name, devices) \
  define(*reg, OpId::name, #name, devices, define_op_##name, EMBER_CUDA_REGISTER(register_cuda_##name, devices));
#define EMBER_UNARY(name, Functor)                                                                                \
  define(*reg, OpId::name, #name, CPU | CUDA, define_op_##name, EMBER_CUDA_REGISTER(register_cuda_##name, CUDA)); \
  define(*reg, OpId::name##_backward, #name "_backward", CPU | CUDA, define_op_##name##_backward,                 \
         EMBER_CUDA_REGISTER(register_cuda_##name##_backward, CUDA));
#define EMBER_BINARY(name, Functor)                                                                               \
  define(*reg, OpId::name, #name, CPU | CUDA, define_op_##name, EMBER_CUDA_REGISTER(register_cuda_##name, CUDA)); \
  define(*reg, OpId::name##_scalar, #name "_scalar", CPU | CUDA, define_op_##name##_scalar,                       \
         EMBER_CUDA_REGISTER(register_cuda_##name##_scalar, CUDA));
#include "kernels/ops.def"
    autotune::install();
    cuda::set_device_error_describer([](int code) -> std::string {
      int id = code - 1;
      const char* name = id >= 0 && id < kNumOps ? op_info(static_cast<OpId>(id)).name : "?";
      return std::string(name) + ": an index was out of range (found by the CUDA kernel and reported at this sync)";
    });
    return reg;
  }();
  return *r;
}

// ---- backend preferences ----

std::mutex g_pref_mu;
std::array<std::string, kNumOps> g_pref;
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_measured_cpu{false};  // Note [CPU defaults]
std::atomic<AutotuneFn> g_autotune{nullptr};

}  // namespace

bool Variant::accepts(const KernelCall& c) const {
  // Every floating operand must be a supported dtype; ops without floating operands (integer
  // math, fill of an int tensor) are judged by their first operand.
  bool any_float = false;
  const Tensor* first = nullptr;
  auto ok = [&](const Tensor& t) {
    if (!t.defined()) return true;
    if (first == nullptr) first = &t;
    if (!is_floating(t.dtype())) return true;
    any_float = true;
    return dtypes.has(t.dtype());
  };
  for (const Tensor& t : c.in)
    if (!ok(t)) return false;
  for (const Tensor& t : c.out)
    if (!ok(t)) return false;
  if (!any_float && first != nullptr && !dtypes.has(first->dtype())) return false;
  return supports == nullptr || supports(c);
}

namespace {
constexpr int kMaxVariants = 1024;
std::atomic<int> g_next_variant{0};
std::atomic<uint64_t> g_variant_runs[kMaxVariants][kNumDTypes];

// The dtype a call is counted under: its op's dtype_input's, else the most common dtype among its
// floating operands (an optimizer step's f16 params and grads, not its f64 hyper-parameters), else
// its first operand's.
DType call_dtype(const KernelCall& c) {
  if (const int d = op_info(c.op).dtype_input; d >= 0) return c.in[static_cast<size_t>(d)].dtype();
  int count[kNumDTypes] = {};
  const Tensor* first = nullptr;
  for (std::span<const Tensor> ts : {c.in, std::span<const Tensor>(c.out)})
    for (const Tensor& t : ts) {
      if (!t.defined()) continue;
      if (first == nullptr) first = &t;
      if (is_floating(t.dtype())) ++count[static_cast<int>(t.dtype())];
    }
  int best = -1;
  for (int d = 0; d < kNumDTypes; ++d)
    if (count[d] > 0 && (best < 0 || count[d] > count[best])) best = d;
  if (best >= 0) return static_cast<DType>(best);
  return first != nullptr ? first->dtype() : DType::f32;
}
}  // namespace

void OpInfo::add_variant(Variant v) {
  for (const Variant& o : variants)
    EMBER_CHECK(!(o.name == v.name && o.device == v.device), "op ", name, ": variant ", v.name, " registered twice");
  v.index = g_next_variant.fetch_add(1);
  EMBER_CHECK(v.index < kMaxVariants, "op registry: more than ", kMaxVariants, " variants");
  variants.push_back(std::move(v));
}

void add_lab_variant(OpId id, Variant v) {
  const OpInfo& info = op_info(id);
  EMBER_CHECK(v.flags & kReference, "add_lab_variant: ", info.name, "/", v.name,
              " is not flagged kReference; a lab variant is never a default nor an autotune candidate (Note [lab "
              "variants])");
  for (const auto& runs : g_variant_runs)
    for (const auto& n : runs)
      EMBER_CHECK(n.load(std::memory_order_relaxed) == 0, "add_lab_variant: ", info.name, "/", v.name,
                  " added after a kernel ran; register the lab variants at the start of main (Note [lab variants])");
  const_cast<OpInfo&>(info).add_variant(std::move(v));
}

uint64_t variant_runs(const Variant& v, DType dtype) {
  if (v.index < 0) return 0;
  return g_variant_runs[v.index][static_cast<int>(dtype)].load(std::memory_order_relaxed);
}

const Variant* OpInfo::default_variant(const KernelCall& c, DeviceType d) const {
  for (const Variant& v : variants)
    if (v.device == d && !(v.flags & (kReference | kVendor | kSimOnly)) && v.accepts(c) &&
        !(deterministic() && (v.flags & kNondeterministic)))
      return &v;
  return nullptr;
}

const OpInfo& op_info(OpId id) { return registry().ops[static_cast<size_t>(id)]; }
std::span<const OpInfo> all_ops() { return registry().ops; }
const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& o : all_ops())
    if (name == o.name) return &o;
  return nullptr;
}

void set_backend(OpId id, const std::string& preference) {
  std::lock_guard<std::mutex> lock(g_pref_mu);
  g_pref[static_cast<size_t>(id)] = preference == "default" ? "" : preference;
}
void set_backend_all(const std::string& preference) {
  for (int i = 0; i < kNumOps; ++i) set_backend(static_cast<OpId>(i), preference);
}
std::string backend(OpId id) {
  std::lock_guard<std::mutex> lock(g_pref_mu);
  return g_pref[static_cast<size_t>(id)];
}
void set_deterministic(bool on) { g_deterministic = on; }
bool deterministic() { return g_deterministic; }
void set_measured_cpu_defaults(bool on) { g_measured_cpu = on; }
bool measured_cpu_defaults() { return g_measured_cpu; }

std::string variants_run(DeviceType d) {
  std::string out;
  for (const OpInfo& op : all_ops()) {
    int choices = 0;
    std::string ran;
    for (const Variant& v : op.variants) {
      if (v.device != d || (v.flags & kReference)) continue;
      ++choices;
      uint64_t runs = 0;
      for (int t = 0; t < kNumDTypes; ++t) runs += variant_runs(v, static_cast<DType>(t));
      if (runs > 0) ran += (ran.empty() ? "" : "+") + v.name;
    }
    if (choices > 1 && !ran.empty()) out += (out.empty() ? "" : ", ") + std::string(op.name) + "=" + ran;
  }
  return out;
}
void set_autotune_hook(AutotuneFn fn) { g_autotune = fn; }

const Variant& select_variant(const OpInfo& info, const KernelCall& c, DeviceType d) {
  std::string pref;
  {
    std::lock_guard<std::mutex> lock(g_pref_mu);
    pref = g_pref[static_cast<size_t>(info.id)];
  }
  return select_variant(info, c, d, pref);
}

const Variant& select_variant(const OpInfo& info, const KernelCall& c, DeviceType d, const std::string& pref) {
  bool det = deterministic();
  auto usable = [&](const Variant& v) {
    return v.device == d && v.accepts(c) && !(det && (v.flags & kNondeterministic));
  };
  if (!pref.empty() && pref != "auto" && pref != "vendor") {
    for (const Variant& v : info.variants)
      if (v.name == pref && usable(v)) return v;
  } else if (pref == "vendor") {
    for (const Variant& v : info.variants)
      if ((v.flags & kVendor) && usable(v)) return v;
  } else if (pref == "auto" || (pref.empty() && d == DeviceType::cpu && g_measured_cpu && !det)) {
    if (AutotuneFn tune = g_autotune.load()) {  // measured like "auto" (Note [CPU defaults])
      std::vector<const Variant*> cands;
      for (const Variant& v : info.variants)
        if (usable(v) && !(v.flags & kReference)) cands.push_back(&v);
      if (cands.size() > 1) {
        if (const Variant* v = tune(info, c, cands)) return *v;
      }
    }
  }
  if (const Variant* v = info.default_variant(c, d)) return *v;
  // No plain variant fits (e.g. only a vendor one exists for this dtype): take any usable one that
  // has run on its hardware.
  for (const Variant& v : info.variants)
    if (usable(v) && !(v.flags & kSimOnly)) return v;
  std::string have;
  for (const Variant& v : info.variants)
    if (v.device == d) have += (have.empty() ? "" : ", ") + v.name;
  std::string args;
  for (size_t i = 0; i < c.in.size(); ++i)
    if (c.in[i].defined()) args += (args.empty() ? "" : ", ") + str(c.in[i].dtype(), c.in[i].shape());
  EMBER_FAIL("op ", info.name, " has no ", d, " kernel for inputs (", args, ")",
             have.empty() ? std::string(" (the op has no kernel for this device)") : " (variants: " + have + ")",
             det ? " in deterministic mode" : "");
}

// ---- helpers ----

Device common_device(const char* op, std::span<const Tensor> in) {
  const Tensor* first = nullptr;
  size_t first_i = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) continue;
    if (first == nullptr) {
      first = &in[i];
      first_i = i;
      continue;
    }
    EMBER_CHECK(in[i].device() == first->device(), op, ": expected all tensors on the same device, but input ", first_i,
                " is ", first->describe(), " and input ", i, " is ", in[i].describe());
  }
  EMBER_CHECK(first != nullptr, op, ": no defined input tensor");
  return first->device();
}

Tensor zeros_meta(const autograd::OutputMeta& m) {
  return zeros(m.shape, TensorOptions().dtype(m.dtype).device(m.device));
}

Tensor BackwardCtx::grad(size_t i) const {
  if (i < grads.size() && grads[i].defined()) return grads[i];
  return zeros_meta(output_meta.at(i));
}

// ---- autograd node for every op ----

namespace {

struct OpNode final : autograd::Node {
  const OpInfo* info = nullptr;
  Attrs attrs;
  std::vector<autograd::SavedTensor> saved_in, saved_out;
  std::vector<autograd::OutputMeta> input_meta;
  bool released = false;

  std::string name() const override { return std::string(info->name) + "Backward"; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::string n = name();
    EMBER_CHECK(!released, "trying to backward through the graph a second time (", n,
                " has already freed its saved tensors); pass retain_graph=true to the first backward");
    BackwardCtx ctx;
    ctx.attrs = &attrs;
    ctx.grads = std::move(grads);
    ctx.input_meta = input_meta;
    ctx.output_meta = outputs;
    for (const auto& s : saved_in) ctx.inputs.push_back(s.unpack(n.c_str()));
    for (const auto& s : saved_out) ctx.outputs.push_back(s.unpack(n.c_str()));
    ctx.inputs.resize(input_meta.size());
    ctx.outputs.resize(outputs.size());
    for (const auto& e : next_edges) ctx.needs.push_back(e.valid());
    runtime::CurrentOpScope scope(info->name);
    profiler::Range range(info->name, "backward", input_meta.empty() ? kCPU : input_meta[0].device);
    std::vector<Tensor> out = info->backward(ctx);
    out.resize(next_edges.size());
    for (size_t i = 0; i < out.size(); ++i) {
      if (!next_edges[i].valid()) out[i] = Tensor();
      // Gradients arrive in the input's dtype (e.g. an f16 input used by an f32 op under autocast).
      if (out[i].defined() && out[i].dtype() != input_meta[i].dtype && is_floating(input_meta[i].dtype))
        out[i] = out[i].to(input_meta[i].dtype);
    }
    return out;
  }

  void release_saved() override {
    for (auto& s : saved_in) s.release();
    for (auto& s : saved_out) s.release();
    released = true;
  }
};

void record(const OpInfo& info, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  auto node = std::make_shared<OpNode>();
  node->info = &info;
  node->attrs = attrs;
  for (const Tensor& t : in) {
    node->next_edges.push_back(autograd::gradient_edge(t));
    if (t.defined()) node->input_meta.push_back({t.shape(), t.dtype(), t.device()});
    else node->input_meta.push_back({});
  }
  bool save_in = info.save == Save::inputs || info.save == Save::both;
  bool save_out = info.save == Save::outputs || info.save == Save::both;
  if (save_in)
    for (size_t i = 0; i < in.size(); ++i)
      node->saved_in.emplace_back(i < 64 && ((info.save_inputs_mask >> i) & 1) ? in[i] : Tensor());
  if (save_out)
    for (size_t i = 0; i < out.size(); ++i)
      node->saved_out.emplace_back(i < 64 && ((info.save_outputs_mask >> i) & 1) ? out[i] : Tensor());
  autograd::set_history(node, out);
}

bool any_requires_grad(const std::vector<Tensor>& in) {
  for (const Tensor& t : in)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::vector<Tensor> allocate_outputs(const OpInfo& info, const std::vector<Tensor>& in, const Attrs& attrs,
                                     Device device, bool* inplace) {
  std::vector<TensorSpec> specs = info.infer(in, attrs);
  std::vector<Tensor> out;
  out.reserve(specs.size());
  *inplace = false;
  for (const TensorSpec& s : specs) {
    if (s.alias >= 0) {
      out.push_back(in.at(static_cast<size_t>(s.alias)));
      *inplace = true;
      continue;
    }
    TensorOptions o = TensorOptions().dtype(s.dtype).device(device);
    out.push_back(s.strides.empty() ? empty(s.shape, o) : empty_strided(s.shape, s.strides, o));
  }
  return out;
}

Device run_device(const OpInfo& info, std::span<const Tensor> in) {
  if (info.id == OpId::copy) {  // the one cross-device op: runs on the CUDA side
    for (const Tensor& t : in)
      if (t.defined() && t.is_cuda()) return t.device();
    return kCPU;
  }
  return common_device(info.name, in);
}

}  // namespace

namespace {
// What an entry point hands the runner: the tensors the kernel writes and whether it writes them in
// place (into an input or the caller's tensors), in which case their versions are bumped after the
// run so that saved-tensor checks see the write.
struct Outputs {
  std::vector<Tensor> tensors;
  bool in_place = false;
};

// The one way a kernel runs, end to end (the shape of PyTorch's structured kernels): the entry points
// below differ only in `make_outputs` (allocate from infer(), or check the caller's tensors) and in
// whether they record autograd. In order: the inputs are made contiguous unless the op handles
// strides (`in` keeps the contiguous tensors: they are what the kernel read and what autograd
// records); `make_outputs(in)` gives the outputs; the variant is `forced` or select_variant's pick;
// it runs with the op's name set for error messages and sync-debug, inside a profiler range, with
// no autograd recording and no autocast (kernels built from other ops stay as they are), and is
// counted for variant_runs; then in-place outputs get their version bumps.
template <class MakeOutputs>
std::vector<Tensor> run_kernel(const OpInfo& info, std::vector<Tensor>& in, const Attrs& attrs, Device device,
                               const Variant* forced, MakeOutputs&& make_outputs) {
  if (info.contiguous_inputs)
    for (Tensor& t : in)
      if (t.defined() && !t.is_contiguous()) t = t.contiguous();
  Outputs out = make_outputs(std::as_const(in));
  KernelCall c{info.id, in, out.tensors, attrs};
  if (forced != nullptr) {
    EMBER_CHECK(forced->accepts(c), "variant ", forced->name, " of ", info.name, " does not accept these inputs");
  }
  const Variant& v = forced != nullptr ? *forced : select_variant(info, c, device.type);
  if (v.index >= 0) g_variant_runs[v.index][static_cast<int>(call_dtype(c))].fetch_add(1, std::memory_order_relaxed);
  {
    runtime::CurrentOpScope scope(info.name);
    profiler::Range range(info.name, v.name.c_str(), device);
    autograd::NoGradGuard no_grad;
    autocast::Suspend no_autocast;
    v.fn(c);
  }
  if (out.in_place)
    for (const Tensor& o : out.tensors) o.bump_version();
  return std::move(out.tensors);
}

void check_not_requiring_grad(const OpInfo& info, const Tensor& o) {
  EMBER_CHECK(!o.requires_grad(), info.name, ": in-place write into a tensor that requires grad (", o.describe(),
              "); run it under NoGradGuard or use the out-of-place op");
}
}  // namespace

std::vector<Tensor> call(OpId id, std::vector<Tensor> in, const Attrs& attrs) {
  const OpInfo& info = op_info(id);
  Device device = run_device(info, in);
  if (autocast::is_enabled(device.type) && info.autocast != AutocastPolicy::none)
    autocast::apply_policy(info.autocast, device.type, in);
  bool need_grad = autograd::grad_mode_enabled() && info.differentiable() && any_requires_grad(in);

  if (info.view != nullptr) {
    Tensor v = info.view(in.at(0), attrs);
    std::vector<Tensor> out{v};
    if (need_grad) record(info, in, out, attrs);
    return out;
  }
  std::vector<Tensor> out = run_kernel(info, in, attrs, device, nullptr, [&](const std::vector<Tensor>& inputs) {
    Outputs o;
    o.tensors = allocate_outputs(info, inputs, attrs, device, &o.in_place);
    if (o.in_place && autograd::grad_mode_enabled())
      for (const Tensor& t : o.tensors) check_not_requiring_grad(info, t);
    return o;
  });
  if (need_grad) record(info, in, out, attrs);
  return out;
}

Tensor call1(OpId id, std::vector<Tensor> inputs, const Attrs& attrs) {
  std::vector<Tensor> out = call(id, std::move(inputs), attrs);
  EMBER_CHECK(out.size() == 1, "op ", op_info(id).name, " returns ", out.size(), " outputs, not one");
  return out[0];
}

namespace {

void run_into(OpId id, std::vector<Tensor> in, std::vector<Tensor> out, const Attrs& attrs, const Variant* forced) {
  const OpInfo& info = op_info(id);
  EMBER_CHECK(info.view == nullptr, "call_into: ", info.name, " is a view and has no kernel");
  std::vector<Tensor> all = in;
  all.insert(all.end(), out.begin(), out.end());
  Device device = run_device(info, all);
  EMBER_CHECK(forced == nullptr || device.type == forced->device, "call_variant_into: variant ", forced->name, " of ",
              info.name, " runs on ", forced->device, " but the tensors are on ", device);
  run_kernel(info, in, attrs, device, forced, [&](const std::vector<Tensor>& inputs) {
    std::vector<TensorSpec> specs = info.infer(inputs, attrs);
    EMBER_CHECK(specs.size() == out.size(), info.name, ": expects ", specs.size(), " outputs, got ", out.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EMBER_CHECK(out[i].shape() == specs[i].shape && out[i].dtype() == specs[i].dtype, info.name, ": output ", i,
                  " is ", out[i].describe(), " but the op produces ", specs[i].dtype, specs[i].shape);
      if (autograd::grad_mode_enabled()) check_not_requiring_grad(info, out[i]);
      EMBER_CHECK(!info.contiguous_inputs || out[i].is_contiguous(), info.name, ": output ", i,
                  " must be contiguous for this op");
    }
    return Outputs{std::move(out), /*in_place=*/true};  // every given output is written in place
  });
}

}  // namespace

void call_into(OpId id, std::vector<Tensor> in, std::vector<Tensor> out, const Attrs& attrs) {
  run_into(id, std::move(in), std::move(out), attrs, nullptr);
}

void call_variant_into(const Variant& v, OpId id, std::vector<Tensor> in, std::vector<Tensor> out, const Attrs& attrs) {
  run_into(id, std::move(in), std::move(out), attrs, &v);
}

std::vector<Tensor> call_variant(const Variant& v, OpId id, std::vector<Tensor> in, const Attrs& attrs) {
  const OpInfo& info = op_info(id);
  EMBER_CHECK(info.view == nullptr, "call_variant: ", info.name, " is a view and has no kernel");
  Device device = run_device(info, in);
  EMBER_CHECK(device.type == v.device, "call_variant: variant ", v.name, " of ", info.name, " runs on ", v.device,
              " but the inputs are on ", device);
  return run_kernel(info, in, attrs, device, &v, [&](const std::vector<Tensor>& inputs) {
    Outputs o;
    o.tensors = allocate_outputs(info, inputs, attrs, device, &o.in_place);
    return o;
  });
}

}  // namespace ember
