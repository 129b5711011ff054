#include "kernels/ops/amp.h"

#include <cmath>

#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

void check_flag(const char* op, const char* what, const Tensor& t, DType dtype) {
  EMBER_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype, op, ": ", what, " must be a one-element ", dtype,
              " tensor, got ", t.defined() ? t.describe() : std::string("undefined"));
}

std::vector<TensorSpec> infer_unscale(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() >= 2, "amp_unscale: expects (found_inf, inv_scale, grads...)");
  check_flag("amp_unscale", "found_inf", in[0], DType::f32);
  check_flag("amp_unscale", "inv_scale", in[1], DType::f32);
  std::vector<TensorSpec> out{{in[0].shape(), in[0].dtype(), {}, 0}};
  for (size_t i = 2; i < in.size(); ++i) {
    EMBER_CHECK(is_floating(in[i].dtype()), "amp_unscale: gradient ", i - 2, " is ", in[i].describe(),
                "; gradients are floating");
    // the kernels walk each gradient's memory as one flat array, which any dense layout is
    // (channels-last gradients of --channels-last --amp fp16 included)
    EMBER_CHECK(in[i].is_non_overlapping_and_dense(), "amp_unscale: gradient ", i - 2, " is ", in[i].describe(),
                "; it must be dense (contiguous or a permutation of it, such as channels-last)");
    out.push_back({in[i].shape(), in[i].dtype(), {}, static_cast<int>(i)});
  }
  return out;
}

void unscale_cpu(const KernelCall& c) {
  float* found = c.in[0].data<float>();
  const float inv = *c.in[1].data<float>();
  bool bad = false;
  for (size_t i = 2; i < c.in.size(); ++i) {
    const Tensor& g = c.in[i];
    EMBER_DISPATCH_FLOAT(g.dtype(), "amp_unscale", [&] {
      auto* p = static_cast<scalar_t*>(g.data_ptr());
      for (int64_t k = 0; k < g.numel(); ++k) {
        acc_t<scalar_t> v = static_cast<acc_t<scalar_t>>(p[k]) * static_cast<acc_t<scalar_t>>(inv);
        if (!std::isfinite(static_cast<double>(v))) bad = true;
        p[k] = static_cast<scalar_t>(v);
      }
    });
  }
  if (bad) *found = 1.0f;
}

std::vector<TensorSpec> infer_update(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 4, "amp_update_scale: expects (scale, growth_tracker, found_inf, skipped)");
  check_flag("amp_update_scale", "scale", in[0], DType::f32);
  check_flag("amp_update_scale", "growth_tracker", in[1], DType::i32);
  check_flag("amp_update_scale", "found_inf", in[2], DType::f32);
  check_flag("amp_update_scale", "skipped", in[3], DType::i64);
  const AmpScaleAttrs& s = a.get<AmpScaleAttrs>();
  EMBER_CHECK(s.growth_factor > 1 && s.backoff_factor > 0 && s.backoff_factor < 1 && s.growth_interval >= 1,
              "amp_update_scale: need growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1; got ",
              s.growth_factor, ", ", s.backoff_factor, ", ", s.growth_interval);
  return {{in[0].shape(), DType::f32, {}, 0}, {in[1].shape(), DType::i32, {}, 1}, {in[3].shape(), DType::i64, {}, 3}};
}

void update_cpu(const KernelCall& c) {
  const AmpScaleAttrs& a = c.attr<AmpScaleAttrs>();
  float* scale = c.in[0].data<float>();
  int32_t* tracker = c.in[1].data<int32_t>();
  const float found = *c.in[2].data<float>();
  int64_t* skipped = c.in[3].data<int64_t>();
  if (found != 0.0f) {
    *scale = static_cast<float>(*scale * a.backoff_factor);
    *tracker = 0;
    *skipped += 1;
  } else {
    int32_t next = *tracker + 1;
    if (next >= a.growth_interval) {
      float grown = static_cast<float>(*scale * a.growth_factor);
      if (std::isfinite(grown)) *scale = grown;
      next = 0;
    }
    *tracker = next;
  }
}

Cost unscale_cost(const KernelCall& c) {
  double b = 0;
  for (size_t i = 2; i < c.in.size(); ++i) b += 2.0 * static_cast<double>(c.in[i].nbytes());
  return {b, 0};
}

}  // namespace

void define_op_amp_unscale(OpInfo& info) {
  info.doc = "grads *= inv_scale in place, found_inf set on inf/NaN (one fused pass)";
  info.infer = infer_unscale;
  info.contiguous_inputs = false;  // dense layouts reach the kernels as they are (infer_unscale)
  info.cost = unscale_cost;
  info.add_variant(
      {.name = "cpu", .device = DeviceType::cpu, .fn = unscale_cpu, .note = "one loop over every gradient"});
}

void define_op_amp_update_scale(OpInfo& info) {
  info.doc = "the loss scale's growth/backoff rule, on the device";
  info.infer = infer_update;
  info.cost = [](const KernelCall&) { return Cost{24, 0}; };
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = update_cpu, .note = "scalar update"});
}

void amp_unscale_(const std::vector<Tensor>& grads, Tensor& found_inf, const Tensor& inv_scale) {
  for (size_t start = 0; start < grads.size() || start == 0; start += kAmpTensorsPerLaunch) {
    std::vector<Tensor> in{found_inf, inv_scale};
    std::vector<Tensor> out{found_inf};
    for (size_t i = start; i < std::min(grads.size(), start + kAmpTensorsPerLaunch); ++i) {
      in.push_back(grads[i]);
      out.push_back(grads[i]);
    }
    call_into(OpId::amp_unscale, in, out);
    if (grads.empty()) break;
  }
}

void amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf, Tensor& skipped,
                       double growth_factor, double backoff_factor, int64_t growth_interval) {
  call_into(OpId::amp_update_scale, {scale, growth_tracker, found_inf, skipped}, {scale, growth_tracker, skipped},
            AmpScaleAttrs{growth_factor, backoff_factor, growth_interval});
}

}  // namespace ember
