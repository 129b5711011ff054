#include "tests/op_driver.h"

#include <cmath>
#include <sstream>

#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/rng.h"
#include "kernels/functional.h"

namespace ember::testing {

Tol default_tol(DType t) {
  switch (t) {
    case DType::f64: return {1e-7, 1e-7};
    case DType::f32: return {1.3e-6, 1e-5};
    case DType::f16: return {1e-3, 1e-5};
    case DType::bf16: return {1.6e-2, 1e-5};
    default: return {0, 0};
  }
}

Tol sample_tol(const OpSample& s, DType t) {
  for (const auto& [d, tol] : s.tol)
    if (d == t) return tol;
  return default_tol(t);
}

Tol variant_tol(const OpSample& s, DType t, const Variant& v) {
  if ((v.flags & kVendor) != 0)
    for (const auto& [d, tol] : s.vendor_tol)
      if (d == t) return tol;
  return sample_tol(s, t);
}

const Variant* find_variant(OpId op, DeviceType d, const std::string& name) {
  for (const Variant& v : op_info(op).variants)
    if (v.device == d && v.name == name) return &v;
  return nullptr;
}

std::string compare(const Tensor& got_in, const Tensor& want_in, Tol tol, const Tensor& scale) {
  if (got_in.shape() != want_in.shape() || got_in.dtype() != want_in.dtype())
    return str("got ", got_in.describe(), ", want ", want_in.describe());
  std::vector<double> g = got_in.to_vector<double>(), w = want_in.to_vector<double>();
  const std::vector<double> sc = scale.defined() ? scale.to_vector<double>() : std::vector<double>();
  double worst = 0;
  int64_t worst_i = -1;
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double a = g[i], b = w[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::isinf(a) || std::isinf(b)) {
      if (a == b) continue;
      ++bad;
      if (worst_i < 0) worst_i = static_cast<int64_t>(i);
      worst = INFINITY;
      continue;
    }
    double err = std::fabs(a - b);
    double allowed = tol.atol + tol.rtol * (sc.empty() ? std::fabs(b) : sc[i]);
    if (!(err <= allowed)) {
      ++bad;
      double excess = err / std::max(allowed, 1e-300);
      if (excess > worst || worst_i < 0) {
        worst = excess;
        worst_i = static_cast<int64_t>(i);
      }
    }
  }
  if (bad == 0) return "";
  return str(bad, " of ", g.size(), " elements differ (rtol ", tol.rtol, ", atol ", tol.atol, "); worst at flat index ",
             worst_i, ": got ", g[static_cast<size_t>(worst_i)], ", want ", w[static_cast<size_t>(worst_i)]);
}

Tensor to_device_same_layout(const Tensor& t, Device device) {
  if (!t.defined()) return t;
  int64_t n = static_cast<int64_t>(t.storage()->nbytes() / t.element_size());
  Tensor flat = make_view(t, {n}, {1}, 0);
  Tensor copy = empty({n}, TensorOptions().dtype(t.dtype()).device(device));
  copy_(copy, flat);
  return make_view(copy, t.shape(), t.strides(), t.offset());
}

std::vector<Tensor> inputs_as(const OpSample& s, DType dtype) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const Tensor& t = s.inputs[i];
    bool keep = std::find(s.keep_dtype.begin(), s.keep_dtype.end(), static_cast<int>(i)) != s.keep_dtype.end();
    if (!t.defined()) {
      out.push_back(t);
      continue;
    }
    Tensor c = to_device_same_layout(t, kCPU);  // a private copy: in-place ops must not touch the sample
    if (!keep && is_floating(t.dtype()) && t.dtype() != dtype) {
      Tensor cast_copy = empty_strided(c.shape(), c.strides(), TensorOptions().dtype(dtype));
      if (c.numel() > 0) {
        Tensor dense = make_view(cast_copy, c.shape(), c.strides(), 0);
        copy_(dense, c);
      }
      c = make_view(cast_copy, c.shape(), c.strides(), 0);
    }
    out.push_back(c);
  }
  return out;
}

namespace {

std::vector<int> grad_inputs_of(const OpSample& s) {
  if (!s.grad_inputs.empty()) return s.grad_inputs;
  std::vector<int> gi;
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (s.inputs[i].defined() && is_floating(s.inputs[i].dtype())) gi.push_back(static_cast<int>(i));
  return gi;
}

// Weights for L = sum(w_k * out_k): deterministic values in [-1, 1) of each output's shape.
std::vector<Tensor> weights_for(const std::vector<Tensor>& outs, DType dtype, Device device) {
  std::vector<Tensor> w;
  uint64_t seed = 4242;
  for (const Tensor& o : outs) {
    if (!is_floating(o.dtype())) {
      w.push_back(Tensor());
      continue;
    }
    Tensor t = empty(o.shape(), DType::f64);
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = 2.0 * philox_uniform(seed, 0, i) - 1.0;
    ++seed;
    w.push_back(t.to(dtype).to(device));
  }
  return w;
}

// Address of flat element j of a (possibly strided) f64 tensor.
double* element(const Tensor& t, int64_t j) {
  int64_t off = 0, rem = j;
  for (int d = t.dim() - 1; d >= 0; --d) {
    int64_t c = rem % t.shape()[d];
    rem /= t.shape()[d];
    off += c * t.strides()[d];
  }
  return t.data<double>() + off;
}

double loss_value(const OpInfo& info, const OpSample& s, const std::vector<Tensor>& in, const std::vector<Tensor>& w) {
  autograd::NoGradGuard ng;
  std::vector<Tensor> outs = call(info.id, in, s.attrs);
  double L = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!w[k].defined()) continue;
    std::vector<double> o = outs[k].to_vector<double>(), ww = w[k].to_vector<double>();
    for (size_t i = 0; i < o.size(); ++i) L += o[i] * ww[i];
  }
  return L;
}

Tensor loss_tensor(const std::vector<Tensor>& outs, const std::vector<Tensor>& w) {
  Tensor L;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!w[k].defined() || !outs[k].requires_grad()) continue;
    Tensor term = sum(mul(outs[k], w[k]));
    L = L.defined() ? add(L, term) : term;
  }
  return L;
}

std::string where_(const OpInfo& info, const OpSample& s) { return str(info.name, " [", s.name, "]"); }

}  // namespace

std::vector<std::string> gradcheck(const OpInfo& info, const OpSample& s) {
  std::vector<std::string> fails;
  if (!info.differentiable() || !s.gradcheck) return fails;
  const double eps = 1e-6, atol = 1e-5, rtol = 1e-3;
  std::vector<int> gi = grad_inputs_of(s);
  std::vector<Tensor> in;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    Tensor t = s.inputs[i];
    bool wants = std::find(gi.begin(), gi.end(), static_cast<int>(i)) != gi.end();
    if (t.defined() && wants) {
      // A leaf we own; an overlapping (expanded) input cannot be perturbed element by element, so
      // it is checked through a dense copy (its broadcast path is covered by the parity tests).
      t = t.is_non_overlapping_and_dense() ? to_device_same_layout(t, kCPU) : t.contiguous();
      EMBER_CHECK(t.dtype() == DType::f64, "gradcheck: sample input ", i, " of ", where_(info, s), " is not f64");
      t.requires_grad_(true);
    }
    in.push_back(t);
  }
  // analytic
  std::vector<Tensor> outs = call(info.id, in, s.attrs);
  std::vector<Tensor> w = weights_for(outs, DType::f64, kCPU);
  Tensor L = loss_tensor(outs, w);
  if (!L.defined()) return fails;  // no floating output requires grad (e.g. all-integer result)
  L.backward();
  for (int i : gi) {
    const Tensor& x = in[static_cast<size_t>(i)];
    Tensor g = x.grad().defined() ? x.grad() : zeros_like(x);
    std::vector<double> ga = g.to_vector<double>();
    const int64_t n = x.numel();
    if (n <= 64) {
      for (int64_t j = 0; j < n; ++j) {
        double* p = element(x, j);
        double orig = *p;
        *p = orig + eps;
        double lp = loss_value(info, s, in, w);
        *p = orig - eps;
        double lm = loss_value(info, s, in, w);
        *p = orig;
        double num = (lp - lm) / (2 * eps), ana = ga[static_cast<size_t>(j)];
        if (!(std::fabs(num - ana) <= atol + rtol * std::fabs(num)))
          fails.push_back(str(where_(info, s), " input ", i, " element ", j, ": analytic ", ana, " numeric ", num));
      }
    } else {
      // one random direction u: d/dt L(x + t u) = <grad, u>
      std::vector<double> u(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) u[static_cast<size_t>(j)] = 2.0 * philox_uniform(77 + i, 0, j) - 1.0;
      std::vector<double> orig(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) orig[static_cast<size_t>(j)] = *element(x, j);
      auto shift = [&](double t) {
        for (int64_t j = 0; j < n; ++j) *element(x, j) = orig[static_cast<size_t>(j)] + t * u[static_cast<size_t>(j)];
      };
      shift(eps);
      double lp = loss_value(info, s, in, w);
      shift(-eps);
      double lm = loss_value(info, s, in, w);
      shift(0);
      double num = (lp - lm) / (2 * eps), ana = 0;
      for (int64_t j = 0; j < n; ++j) ana += ga[static_cast<size_t>(j)] * u[static_cast<size_t>(j)];
      // the directional derivative sums n terms: scale the absolute tolerance with sqrt(n)
      double tol = atol * std::sqrt(static_cast<double>(n)) + rtol * std::fabs(num);
      if (!(std::fabs(num - ana) <= tol))
        fails.push_back(str(where_(info, s), " input ", i, " (", n, " elements, random direction): analytic ", ana,
                            " numeric ", num));
    }
  }
  return fails;
}

namespace {

// A copy of t (f32, on the CPU) with every element's absolute value.
Tensor abs_copy(const Tensor& t) {
  Tensor a = t.contiguous().clone();
  float* p = a.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) p[i] = std::fabs(p[i]);
  return a;
}

// Note [TF32 parity]: a kTf32 variant reads its f32 operands with 10 mantissa bits, so an output's
// error is bounded by the sum of its products' magnitudes, not by the output's (which may cancel
// to near 0): 2^-10 per operand, truncated or rounded, 2^-9 per product, and the activation's slope
// and the reference's gelu(v) >= v / 2 give the margin to 2^-7. That sum is the reference run on the
// inputs' absolute values (for linear and matmul: |x| |W|^T + |b|), so the bound is checked per
// element against it; a layout mistake is off by the magnitude itself.
std::string compare_tf32(const OpInfo& info, const OpSample& s, const Variant& ref, const std::vector<Tensor>& got,
                         const std::vector<Tensor>& want) {
  std::vector<Tensor> abs_in;
  for (const Tensor& t : inputs_as(s, DType::f32))
    abs_in.push_back(t.defined() && t.dtype() == DType::f32 ? abs_copy(t) : t);
  const std::vector<Tensor> mag = call_variant(ref, info.id, abs_in, s.attrs);
  for (size_t k = 0; k < want.size(); ++k) {
    std::string msg = compare(got[k], want[k], Tol{0x1p-7, sample_tol(s, DType::f32).atol}, mag[k]);
    if (!msg.empty()) return str("output ", k, " (TF32, Note [TF32 parity]): ", msg);
  }
  return "";
}

}  // namespace

std::vector<std::string> variant_parity(const OpInfo& info, const OpSample& s, DeviceType device) {
  std::vector<std::string> fails;
  if (info.view != nullptr || !s.parity) return fails;
  const Variant* ref = nullptr;
  for (const Variant& v : info.variants)
    if (v.device == DeviceType::cpu) {
      ref = &v;
      break;
    }
  if (ref == nullptr) return {str(info.name, ": no CPU reference variant")};
  Device dev = device == DeviceType::cpu ? kCPU : kCUDA;
  std::vector<DType> dtypes;
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16})
    if (s.dtypes.has(t) || (t == DType::f64 && device == DeviceType::cpu)) dtypes.push_back(t);
  bool has_float_input = false;
  for (const Tensor& t : s.inputs) has_float_input = has_float_input || (t.defined() && is_floating(t.dtype()));
  if (!has_float_input) dtypes = {DType::f32};  // integer-only sample: one run
  for (DType dt : dtypes) {
    std::vector<Tensor> in = inputs_as(s, dt);
    // which variants accept this call (outputs from infer, for their dtypes)
    std::vector<TensorSpec> specs = info.infer(in, s.attrs);
    std::vector<Tensor> probe_out;
    for (const TensorSpec& sp : specs)
      probe_out.push_back(sp.alias >= 0 ? in[static_cast<size_t>(sp.alias)] : empty({0}, TensorOptions(sp.dtype)));
    KernelCall probe{info.id, in, probe_out, s.attrs};
    if (!ref->accepts(probe)) continue;
    std::vector<Tensor> want = call_variant(*ref, info.id, inputs_as(s, dt), s.attrs);
    for (const Variant& v : info.variants) {
      if (v.device != device || &v == ref || !v.accepts(probe)) continue;
      if (!s.vendor_parity && (v.flags & kVendor) != 0) continue;
      std::vector<Tensor> din;
      for (const Tensor& t : inputs_as(s, dt)) din.push_back(to_device_same_layout(t, dev));
      std::vector<Tensor> got;
      try {
        got = call_variant(v, info.id, din, s.attrs);
        for (Tensor& g : got) g = g.to(kCPU);
      } catch (const std::exception& e) {
        fails.push_back(str(where_(info, s), " variant ", v.name, " ", dt, ": threw: ", e.what()));
        continue;
      }
      if ((v.flags & kTf32) != 0 && dt == DType::f32) {
        const std::string msg = compare_tf32(info, s, *ref, got, want);
        if (!msg.empty()) fails.push_back(str(where_(info, s), " variant ", v.name, " ", dt, " ", msg));
        continue;
      }
      for (size_t k = 0; k < want.size(); ++k) {
        std::string msg = compare(got[k], want[k], variant_tol(s, dt, v));
        if (!msg.empty()) fails.push_back(str(where_(info, s), " variant ", v.name, " ", dt, " output ", k, ": ", msg));
      }
    }
  }
  return fails;
}

std::vector<std::string> backward_parity(const OpInfo& info, const OpSample& s, DeviceType device) {
  std::vector<std::string> fails;
  if (!info.differentiable() || !s.gradcheck) return fails;
  Device dev = device == DeviceType::cpu ? kCPU : kCUDA;
  std::vector<int> gi = grad_inputs_of(s);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    if (!s.dtypes.has(dt)) continue;
    auto run = [&](Device d) {
      std::vector<Tensor> in;
      for (const Tensor& t : inputs_as(s, dt)) in.push_back(to_device_same_layout(t, d));
      for (int i : gi) {
        Tensor& x = in[static_cast<size_t>(i)];
        if (!x.is_non_overlapping_and_dense()) x = x.contiguous();
        x = x.detach();
        x.requires_grad_(true);
      }
      std::vector<Tensor> outs = call(info.id, in, s.attrs);
      std::vector<Tensor> w = weights_for(outs, dt, d);
      std::vector<Tensor> grads;
      Tensor L = loss_tensor(outs, w);
      if (L.defined()) L.backward();
      for (int i : gi) {
        Tensor g = in[static_cast<size_t>(i)].grad();
        grads.push_back(g.defined() ? g.to(kCPU) : Tensor());
      }
      return grads;
    };
    std::vector<Tensor> want, got;
    try {
      want = run(kCPU);
      got = run(dev);
    } catch (const std::exception& e) {
      fails.push_back(str(where_(info, s), " backward ", dt, ": threw: ", e.what()));
      continue;
    }
    for (size_t k = 0; k < want.size(); ++k) {
      if (!want[k].defined() && !got[k].defined()) continue;
      if (want[k].defined() != got[k].defined()) {
        fails.push_back(
            str(where_(info, s), " backward ", dt, " input ", gi[k], ": gradient defined on one device only"));
        continue;
      }
      std::string msg = compare(got[k], want[k], sample_tol(s, dt));
      if (!msg.empty()) fails.push_back(str(where_(info, s), " backward ", dt, " input ", gi[k], ": ", msg));
    }
  }
  return fails;
}

}  // namespace ember::testing
