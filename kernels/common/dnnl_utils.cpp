// oneDNN engine, streams, descriptors and reorders (see kernels/common/dnnl_utils.h).
#if EMBER_WITH_DNNL

#include "kernels/common/dnnl_utils.h"

namespace ember::dnnl_utils {

const dnnl::engine& engine() {
  // Leaked on purpose: kernels may run from other static destructors' threads at exit.
  static const auto* e =
      new dnnl::engine(checked("oneDNN CPU engine", [] { return dnnl::engine(dnnl::engine::kind::cpu, 0); }));
  return *e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s = checked("oneDNN stream", [] { return dnnl::stream(engine()); });
  return s;
}

std::optional<dnnl::memory::data_type> data_type(DType t) {
  switch (t) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    default: return std::nullopt;
  }
}

dnnl::memory::desc desc_of(DType t, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  std::optional<dnnl::memory::data_type> dt = data_type(t);
  EMBER_CHECK(dt.has_value(), "oneDNN has no ", t,
              " type (f32, bf16 and f16 only); the variant's supports() should have refused this call");
  return checked("oneDNN memory descriptor", [&] {
    return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), *dt,
                              dnnl::memory::dims(strides.begin(), strides.end()));
  });
}

dnnl::memory::desc desc_of(const Tensor& t) {
  return desc_of(t.dtype(), std::vector<int64_t>(t.shape().begin(), t.shape().end()),
                 std::vector<int64_t>(t.strides().begin(), t.strides().end()));
}

dnnl::memory memory_of(const dnnl::memory::desc& d, const Tensor& t) {
  return checked("oneDNN memory", [&] { return dnnl::memory(d, engine(), t.data_ptr()); });
}

dnnl::memory scratch(const dnnl::memory::desc& d, Tensor& keep_alive) {
  keep_alive = empty({static_cast<int64_t>(d.get_size())}, TensorOptions().dtype(DType::u8));
  return memory_of(d, keep_alive);
}

void key_tensor(std::vector<int64_t>& key, const Tensor& t) {
  if (!t.defined()) {
    key.push_back(-1);
    return;
  }
  key.push_back(static_cast<int64_t>(t.dtype()));
  key.push_back(t.dim());
  for (int64_t s : t.shape()) key.push_back(s);
  for (int64_t s : t.strides()) key.push_back(s);
}

Reorder Reorder::between(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  Reorder r;
  r.to = to;
  if (from != to)
    r.prim = checked("oneDNN reorder",
                     [&] { return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to)); });
  return r;
}

dnnl::memory reorder_in(const Reorder& r, const dnnl::memory& user, Tensor& keep_alive) {
  if (!r.prim) return user;
  dnnl::memory m = scratch(r.to, keep_alive);
  dnnl::memory src = user;  // execute() takes non-const references
  checked("oneDNN reorder", [&] { r.prim->execute(stream(), src, m); });
  return m;
}

}  // namespace ember::dnnl_utils

#endif  // EMBER_WITH_DNNL
