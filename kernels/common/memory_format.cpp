#include "kernels/common/memory_format.h"

#include "kernels/functional.h"

namespace ember {

Strides channels_last_strides(const Shape& s) {
  EMBER_CHECK(s.size() == 4, "channels-last strides need a 4-D shape [N, C, H, W], got ", s);
  const int64_t c = s[1], h = s[2], w = s[3];
  return Strides{h * w * c, 1, w * c, c};
}

Tensor contiguous_as(const Tensor& x, bool channels_last) {
  if (!x.defined()) return x;
  if (!channels_last) return x.is_contiguous() ? x : x.contiguous();
  EMBER_CHECK(x.dim() == 4, "channels-last layout needs a 4-D tensor, got ", x.describe());
  if (x.is_channels_last()) return x;
  Tensor out =
      empty_strided(x.shape(), channels_last_strides(x.shape()), TensorOptions().dtype(x.dtype()).device(x.device()));
  copy_(out, x);
  return out;
}

}  // namespace ember
