// dropout: the CPU reference, gradient, cost and the functional API (formulas
// and the mask-recompute decision in dropout.h).
#include "kernels/ops/dropout.h"

#include <limits>

#include "core/parallel.h"
#include "core/rng.h"
#include "kernels/functional.h"
#include "kernels/ops/random.h"
#include "kernels/registry.h"

namespace ember {

namespace {

std::vector<TensorSpec> infer_dropout(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 1, "dropout: expects one input");
  const Tensor& x = in[0];
  EMBER_CHECK(is_floating(x.dtype()), "dropout: expects a floating tensor, got ", x.describe());
  const double p = a.get<DropoutAttrs>().p;
  EMBER_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  return {{x.shape(), x.dtype(), {}}};
}

void dropout_cpu(const KernelCall& c) {
  const Tensor& x = c.in[0];
  const Tensor& y = c.out[0];
  const DropoutAttrs a = c.attr<DropoutAttrs>();
  const int64_t n = x.numel();
  EMBER_DISPATCH_FLOAT(x.dtype(), "dropout", [&] {
    using A = acc_t<scalar_t>;
    const A scale = static_cast<A>(dropout_scale(a.p));
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(y.data_ptr());
    // one Philox call per 4 elements (counter base + i/4, lane i%4: philox_uniform's layout)
    parallel_for(0, (n + 3) / 4, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        const Philox4x32 r = philox(a.seed, a.base + static_cast<uint64_t>(k));
        for (int j = 0; j < 4 && 4 * k + j < n; ++j) {
          const int64_t i = 4 * k + j;
          const bool keep = static_cast<double>(uint_to_unit(r.v[j])) >= a.p;
          yp[i] = static_cast<scalar_t>(static_cast<A>(xp[i]) * (keep ? scale : A(0)));
        }
      }
    });
  });
}

// The same mask and scale applied to the gradient (the mask is recomputed, not saved).
std::vector<Tensor> dropout_vjp(const BackwardCtx& ctx) { return {call1(OpId::dropout, {ctx.grad(0)}, *ctx.attrs)}; }

Cost dropout_cost(const KernelCall& c) { return {static_cast<double>(c.in[0].nbytes() + c.out[0].nbytes()), 0}; }

}  // namespace

void define_op_dropout(OpInfo& info) {
  info.doc = "x * keep / (1 - p), keep = Philox uniform >= p (the same mask on CPU and CUDA)";
  info.infer = infer_dropout;
  info.backward = dropout_vjp;
  info.save = Save::nothing;
  info.cost = dropout_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = dropout_cpu,
                    .dtypes = kFloatTypes,
                    .note = "one Philox4x32-10 call per 4 elements, parallel"});
}

Tensor dropout(const Tensor& x, double p, bool training) {
  EMBER_CHECK(x.defined(), "dropout: input is an undefined tensor");
  EMBER_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0 || x.numel() == 0) return x;
  EMBER_CHECK(is_floating(x.dtype()), "dropout: expects a floating tensor, got ", x.describe());
  Generator::Reservation r = default_generator().reserve(uniform_counters(x.numel()), x.is_cuda());
  return call1(OpId::dropout, {x}, DropoutAttrs{p, r.seed, r.base, r.state});
}

}  // namespace ember
