// normalize_u8 on the CPU: shape inference, the reference loop, the functional entry.
#include "kernels/ops/normalize.h"

#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// Elements per channel plane: the product of the dims after the channel dim (dim 1), or every
// element when there is a single channel.
int64_t plane_size(const Tensor& x, int channels) {
  if (channels == 1) return std::max<int64_t>(x.numel(), 1);
  int64_t inner = 1;
  for (int d = 2; d < x.dim(); ++d) inner *= x.size(d);
  return inner;
}

std::vector<TensorSpec> infer_normalize_u8(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 1, "normalize_u8: expects one input");
  const Tensor& x = in[0];
  const NormalizeU8Attrs& na = a.get<NormalizeU8Attrs>();
  EMBER_CHECK(x.dtype() == DType::u8, "normalize_u8: the input must be u8 images, got ", x.describe());
  auto out = static_cast<DType>(na.dtype);
  EMBER_CHECK(is_floating(out), "normalize_u8: the output dtype must be floating (f32, f64, f16, bf16), got ", out);
  EMBER_CHECK(na.channels >= 1 && na.channels <= kMaxNormalizeChannels, "normalize_u8: ", na.channels,
              " mean/std entries; expected 1 to ", kMaxNormalizeChannels);
  if (na.channels > 1)
    EMBER_CHECK(x.dim() >= 2 && x.size(1) == na.channels, "normalize_u8: ", na.channels,
                " mean/std entries need the input's dim 1 to hold that many channels ([N, C, H, W]); got ",
                x.describe());
  for (int c = 0; c < na.channels; ++c)
    EMBER_CHECK(std::isfinite(na.mean[c]) && std::isfinite(na.std[c]) && na.std[c] != 0, "normalize_u8: channel ", c,
                " has mean ", na.mean[c], " and std ", na.std[c], "; std must be non-zero and both finite");
  return {{x.shape(), out, {}}};
}

// A u8 input has 256 values: each channel's 256 results are computed once (the same expression as
// the CUDA kernel's) and the loop looks them up, which costs the same for every output dtype (the
// f16/bf16 rounding per element took longer than the arithmetic).
template <class T>
void normalize_loop(const uint8_t* xp, T* op, int64_t numel, int64_t inner, const NormalizeU8Attrs& a) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int C = a.channels;
  std::vector<T> table(static_cast<size_t>(C) * 256);
  for (int c = 0; c < C; ++c) {
    const auto mean = static_cast<Acc>(a.mean[c]), sd = static_cast<Acc>(a.std[c]);
    for (int v = 0; v < 256; ++v)
      table[static_cast<size_t>(c * 256 + v)] =
          static_cast<T>(normalize_u8_value<Acc>(static_cast<uint8_t>(v), mean, sd));
  }
  const int64_t planes = numel / inner;
  parallel_for(0, planes, std::max<int64_t>(1, 65536 / inner), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* t = table.data() + (p % C) * 256;
      const uint8_t* src = xp + p * inner;
      T* dst = op + p * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] = t[src[i]];
    }
  });
}

void normalize_u8_cpu(const KernelCall& c) {
  const Tensor& x = c.in[0];
  const Tensor& out = c.out[0];
  if (x.numel() == 0) return;
  const NormalizeU8Attrs& a = c.attr<NormalizeU8Attrs>();
  const int64_t inner = plane_size(x, a.channels);
  const auto* xp = static_cast<const uint8_t*>(x.data_ptr());
  EMBER_DISPATCH_FLOAT(out.dtype(), "normalize_u8", [&] {
    normalize_loop<scalar_t>(xp, static_cast<scalar_t*>(out.data_ptr()), x.numel(), inner, a);
  });
}

Cost normalize_cost(const KernelCall& c) {
  return {static_cast<double>(c.in[0].nbytes() + c.out[0].nbytes()), 3.0 * static_cast<double>(c.in[0].numel())};
}

}  // namespace

NormalizeU8Attrs normalize_u8_attrs(const std::vector<double>& mean, const std::vector<double>& std, DType dtype) {
  EMBER_CHECK(!mean.empty() && mean.size() == std.size(), "normalize_u8: mean has ", mean.size(), " entries and std ",
              std.size(), "; they need the same number (one per channel, or one for all)");
  EMBER_CHECK(mean.size() <= static_cast<size_t>(kMaxNormalizeChannels), "normalize_u8: ", mean.size(),
              " channels; at most ", kMaxNormalizeChannels, " are supported");
  NormalizeU8Attrs a{};
  a.channels = static_cast<int32_t>(mean.size());
  a.dtype = static_cast<int32_t>(dtype);
  for (size_t c = 0; c < mean.size(); ++c) {
    a.mean[c] = mean[c];
    a.std[c] = std[c];
  }
  return a;
}

void define_op_normalize_u8(OpInfo& info) {
  info.doc = "u8 images -> (x/255 - mean[c]) / std[c] as floats, one pass";
  info.infer = infer_normalize_u8;
  info.cost = normalize_cost;
  info.autocast = AutocastPolicy::none;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = normalize_u8_cpu,
                    .dtypes = kFloatTypes,
                    .note = "parallel over channel planes"});
}

Tensor normalize_u8(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& std, DType dtype) {
  return call1(OpId::normalize_u8, {x}, normalize_u8_attrs(mean, std, dtype));
}

}  // namespace ember
