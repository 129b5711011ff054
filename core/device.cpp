#include "core/device.h"

#include <charconv>

#include "core/error.h"
#include "core/shape.h"

namespace ember {

Device Device::parse(std::string_view s) {
  if (s == "cpu") return kCPU;
  if (s == "cuda") return kCUDA;
  if (s.rfind("cuda:", 0) == 0) {
    std::string_view num = s.substr(5);
    int idx = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), idx);
    EMBER_CHECK(ec == std::errc() && p == num.data() + num.size() && idx >= 0 && idx < 128, "bad device '", s,
                "': expected cpu, cuda or cuda:N with N a device index");
    return Device(DeviceType::cuda, idx);
  }
  EMBER_FAIL("bad device '", s, "': expected cpu, cuda or cuda:N");
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << (t == DeviceType::cpu ? "cpu" : "cuda"); }

std::ostream& operator<<(std::ostream& os, const IntList& s) {
  os << '[';
  for (int i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

Strides contiguous_strides(const Shape& shape) {
  Strides st = IntList::filled(shape.size(), 1);
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

int wrap_dim(int64_t dim, int ndim, const char* what) {
  int64_t n = std::max(ndim, 1);  // a scalar accepts dim 0 and -1, like PyTorch
  EMBER_CHECK(dim >= -n && dim < n, what, " ", dim, " is out of range for a tensor with ", ndim,
              " dimensions (expected in [", -n, ", ", n - 1, "])");
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  int n = std::max(a.size(), b.size());
  Shape out = IntList::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int ia = i - (n - a.size()), ib = i - (n - b.size());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    EMBER_CHECK(da == db || da == 1 || db == 1, "shapes ", a, " and ", b, " cannot be broadcast together (dim ", i,
                ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace ember
