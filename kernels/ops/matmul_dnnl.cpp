// oneDNN variant ("dnnl", kVendor) of matmul on the CPU, beside ember's blocked GEMM
// (kernels/gemm/cpu_gemm.cpp, the "cpu_blocked" variant).
//
// Why: oneDNN's f32 matmul runs the CPU GEMM table's shapes several times faster than ember's
// blocked GEMM (docs/perf.md, "CPU: oneDNN beside ember's kernels"), so it is worth having as a
// choice; it stays kVendor (not the
// default), as cuBLAS is beside ember's CUDA GEMMs, so `--backends vendor` or autotune picks it.
//
// - Operands are described as they are: dims and element strides (a transposed view such as
//   linear's W^T is read in place, no copy). The output is the runner's contiguous tensor.
// - supports(): 2-D operands, or 3-D operands with the same batch (no broadcast batch dims, no
//   zero strides: oneDNN's plain descriptors would need them materialised), f32 / bf16 / f16
//   where oneDNN has an implementation (built once per shape and strides: Note [dnnl primitive
//   cache] in kernels/common/dnnl_utils.h), no empty tensor.
// - Numerics: f32 in f32 (default fpmath mode: no bf16 down-conversion); bf16 with f32
//   accumulation, rounded once, as ember's kernels.
#include "kernels/registry.h"

#if EMBER_WITH_DNNL

#include <unordered_map>

#include "kernels/common/dnnl_utils.h"

namespace ember {

void register_dnnl_matmul(OpInfo& info);

namespace {

using namespace dnnl_utils;
using dnnl::memory;

struct MatmulEntry {
  dnnl::primitive prim;
  memory::desc a, b, c;
  memory::desc scratchpad;
};

std::vector<int64_t> dims_of(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }
std::vector<int64_t> strides_of(const Tensor& t) { return {t.strides().begin(), t.strides().end()}; }

// The output's dims and (contiguous) strides.
std::vector<int64_t> out_dims(const Tensor& a, const Tensor& b) {
  std::vector<int64_t> d = dims_of(a);
  d.back() = b.shape()[b.dim() - 1];
  return d;
}
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

std::shared_ptr<const MatmulEntry> entry(const Tensor& a, const Tensor& b) {
  std::vector<int64_t> key;
  key_tensor(key, a);
  key_tensor(key, b);
  return cache_of<MatmulEntry>().get(key, [&]() -> std::shared_ptr<const MatmulEntry> {
    const std::vector<int64_t> od = out_dims(a, b);
    const memory::desc ad = desc_of(a.dtype(), dims_of(a), strides_of(a));
    const memory::desc bd = desc_of(b.dtype(), dims_of(b), strides_of(b));
    const memory::desc cd = desc_of(a.dtype(), od, contiguous_strides(od));
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto pd = try_primitive_desc<dnnl::matmul::primitive_desc>(
        "matmul dnnl", [&] { return dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), attr, engine()); });
    if (!pd) return nullptr;
    auto e = std::make_shared<MatmulEntry>();
    e->prim = checked("matmul dnnl", [&] { return dnnl::matmul(*pd); });
    e->a = ad;
    e->b = bd;
    e->c = cd;
    e->scratchpad = pd->scratchpad_desc();
    return e;
  });
}

bool supports(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  if (!data_type(a.dtype()) || a.dtype() != b.dtype()) return false;
  if (a.dim() != b.dim() || (a.dim() != 2 && a.dim() != 3)) return false;
  if (a.dim() == 3 && a.shape()[0] != b.shape()[0]) return false;  // broadcast batch
  if (a.numel() == 0 || b.numel() == 0) return false;
  for (const Tensor* t : {&a, &b})
    for (int i = 0; i < t->dim(); ++i)
      if (t->strides()[i] == 0 && t->shape()[i] > 1) return false;  // expanded (zero-stride) operand
  return entry(a, b) != nullptr;
}

void run(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  std::shared_ptr<const MatmulEntry> e = entry(a, b);
  EMBER_CHECK(e != nullptr, "matmul dnnl: oneDNN has no implementation for ", a.describe(), " x ", b.describe(),
              "; supports() should have refused it");
  EMBER_CHECK(out.is_contiguous(), "matmul dnnl: the output must be contiguous, got strides ", out.strides());
  checked("matmul dnnl", [&] {
    Tensor keep;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory_of(e->a, a)},
                                         {DNNL_ARG_WEIGHTS, memory_of(e->b, b)},
                                         {DNNL_ARG_DST, memory_of(e->c, out)}};
    if (e->scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, scratch(e->scratchpad, keep));
    e->prim.execute(stream(), args);
    stream().wait();
  });
}

}  // namespace

void register_dnnl_matmul(OpInfo& info) {
  info.add_variant({.name = "dnnl",
                    .device = DeviceType::cpu,
                    .fn = run,
                    .dtypes = DTypeSet{DType::f32, DType::bf16, DType::f16},
                    .flags = kVendor,
                    .supports = supports,
                    .note = "oneDNN matmul on the operands' own strides (2-D, or 3-D with one batch)"});
}

}  // namespace ember

#endif  // EMBER_WITH_DNNL
