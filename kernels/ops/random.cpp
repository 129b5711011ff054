#include "kernels/ops/random.h"

#include "core/parallel.h"
#include "kernels/functional.h"
#include "kernels/ops/copy.h"
#include "kernels/registry.h"

namespace ember {

namespace {

std::vector<TensorSpec> infer_random(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 1 && in[0].is_contiguous(), "random fill: expects one contiguous tensor to fill");
  return {{in[0].shape(), in[0].dtype(), {}, 0}};
}

template <class F>
void random_cpu(const Tensor& t, F value_at) {
  EMBER_DISPATCH_NUMERIC(t.dtype(), "random", [&] {
    scalar_t* p = static_cast<scalar_t*>(t.data_ptr());
    parallel_for(0, t.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = convert<scalar_t, double>(value_at(i));
    });
  });
}

void uniform_cpu(const KernelCall& c) {
  const RandomAttrs a = c.attr<RandomAttrs>();
  random_cpu(c.out[0],
             [&](int64_t i) { return a.a + (a.b - a.a) * static_cast<double>(philox_uniform(a.seed, a.base, i)); });
}
void normal_cpu(const KernelCall& c) {
  const RandomAttrs a = c.attr<RandomAttrs>();
  random_cpu(c.out[0], [&](int64_t i) { return a.a + a.b * philox_normal(a.seed, a.base, i); });
}
void bernoulli_cpu(const KernelCall& c) {
  const RandomAttrs a = c.attr<RandomAttrs>();
  random_cpu(c.out[0],
             [&](int64_t i) { return static_cast<double>(philox_uniform(a.seed, a.base, i)) < a.a ? 1.0 : 0.0; });
}

Cost write_cost(const KernelCall& c) { return {static_cast<double>(c.out[0].nbytes()), 0}; }

void define_random(OpInfo& info, const char* doc, KernelFn cpu) {
  info.doc = doc;
  info.infer = infer_random;
  info.cost = write_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = cpu,
                    .dtypes = kNumericTypes,
                    .note = "Philox4x32-10 per element"});
}

Tensor random_fill(OpId op, Tensor t, double a, double b, uint64_t counters) {
  Tensor target = t.is_contiguous() ? t : empty(t.shape(), TensorOptions().dtype(t.dtype()).device(t.device()));
  Generator::Reservation r = default_generator().reserve(counters, target.is_cuda());
  call_into(op, {target}, {target}, RandomAttrs{a, b, r.seed, r.base, r.state});
  if (!target.is_same(t)) copy_(t, target);
  return t;
}

}  // namespace

void define_op_uniform(OpInfo& info) { define_random(info, "uniform in [low, high) (in place)", uniform_cpu); }
void define_op_normal(OpInfo& info) { define_random(info, "normal(mean, std) (in place)", normal_cpu); }
void define_op_bernoulli(OpInfo& info) { define_random(info, "0/1 with probability p (in place)", bernoulli_cpu); }

Tensor& uniform_(Tensor& t, double low, double high) {
  EMBER_CHECK(low <= high, "uniform_: low ", low, " > high ", high);
  random_fill(OpId::uniform, t, low, high, uniform_counters(t.numel()));
  return t;
}
Tensor& normal_(Tensor& t, double mean, double std) {
  EMBER_CHECK(std >= 0, "normal_: std must be >= 0, got ", std);
  random_fill(OpId::normal, t, mean, std, normal_counters(t.numel()));
  return t;
}

namespace {

// A new tensor filled in place, then made a leaf that requires grad if asked: filling one that
// already required grad would be an in-place op on a leaf.
template <class Fill>
Tensor filled(const Shape& shape, const TensorOptions& o, const Fill& fill) {
  Tensor t = empty(shape, TensorOptions(o).requires_grad(false));
  fill(t);
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& o) {
  return filled(shape, o, [&](Tensor& t) { uniform_(t, low, high); });
}
Tensor rand(const Shape& shape, const TensorOptions& o) { return uniform(shape, 0, 1, o); }
Tensor normal(const Shape& shape, double mean, double std, const TensorOptions& o) {
  return filled(shape, o, [&](Tensor& t) { normal_(t, mean, std); });
}
Tensor randn(const Shape& shape, const TensorOptions& o) { return normal(shape, 0, 1, o); }
Tensor bernoulli(const Shape& shape, double p, const TensorOptions& o) {
  EMBER_CHECK(p >= 0 && p <= 1, "bernoulli: p must be in [0, 1], got ", p);
  Tensor t = empty(shape, o);
  return random_fill(OpId::bernoulli, t, p, 0, uniform_counters(t.numel()));
}
Tensor rand_like(const Tensor& t) { return rand(t.shape(), TensorOptions().dtype(t.dtype()).device(t.device())); }
Tensor randn_like(const Tensor& t) { return randn(t.shape(), TensorOptions().dtype(t.dtype()).device(t.device())); }

}  // namespace ember
