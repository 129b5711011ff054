#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/error.h"
#include "data/image_decode.h"

namespace ember::data {

namespace {
// floor() for the coordinates of the affine map (|v| is at most a few image sizes): without
// SSE4.1 std::floor is a libm call per pixel.
inline int64_t fast_floor(double v) {
  const auto i = static_cast<int64_t>(v);
  return i - (v < static_cast<double>(i) ? 1 : 0);
}
}  // namespace

// ---- Compose ----

Compose::Compose(std::vector<std::shared_ptr<const Transform>> transforms) : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i)
    EMBER_CHECK(transforms_[i] != nullptr, "Compose: transform ", i, " is null");
}

void Compose::apply(Image& image, Rng& rng) const {
  for (const auto& t : transforms_) t->apply(image, rng);
}

std::string Compose::describe() const {
  std::string s = "Compose(";
  for (size_t i = 0; i < transforms_.size(); ++i) s += (i ? ", " : "") + transforms_[i]->describe();
  return s + ")";
}

// ---- RandomCrop ----

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding, uint8_t fill)
    : height_(height), width_(width), padding_(padding), fill_(fill) {
  EMBER_CHECK(height > 0 && width > 0 && padding >= 0, "RandomCrop: size ", height, " x ", width, " and padding ",
              padding, " must be positive (padding >= 0)");
}

void RandomCrop::apply(Image& image, Rng& rng) const {
  const int64_t ph = image.height + 2 * padding_, pw = image.width + 2 * padding_;
  EMBER_CHECK(ph >= height_ && pw >= width_, "RandomCrop: cannot crop ", height_, " x ", width_, " from a ",
              image.height, " x ", image.width, " image padded by ", padding_);
  // Top-left corner of the window in padded coordinates.
  const int64_t top = rng.randint(ph - height_ + 1), left = rng.randint(pw - width_ + 1);
  Image out(image.channels, height_, width_);
  // Source columns [x0, x1) of each output row are inside the image; the rest is padding.
  const int64_t sx0 = left - padding_;
  const int64_t x0 = std::clamp<int64_t>(-sx0, 0, width_), x1 = std::clamp<int64_t>(image.width - sx0, x0, width_);
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < height_; ++y) {
      const int64_t sy = top + y - padding_;
      uint8_t* dst = &out.pixels[static_cast<size_t>((c * height_ + y) * width_)];
      if (sy < 0 || sy >= image.height) {
        std::fill(dst, dst + width_, fill_);
        continue;
      }
      std::fill(dst, dst + x0, fill_);
      if (x1 > x0)
        std::memcpy(dst + x0, &image.pixels[static_cast<size_t>((c * image.height + sy) * image.width + sx0 + x0)],
                    static_cast<size_t>(x1 - x0));
      std::fill(dst + x1, dst + width_, fill_);
    }
  image = std::move(out);
}

std::string RandomCrop::describe() const {
  return str("RandomCrop(", height_, "x", width_, ", padding=", padding_, ")");
}

// ---- RandomHorizontalFlip ----

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  EMBER_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

void RandomHorizontalFlip::apply(Image& image, Rng& rng) const {
  if (!rng.bernoulli(p_)) return;
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < image.height; ++y) {
      uint8_t* row = &image.at(c, y, 0);
      std::reverse(row, row + image.width);
    }
}

std::string RandomHorizontalFlip::describe() const { return str("RandomHorizontalFlip(p=", p_, ")"); }

// ---- RandomAffine ----

RandomAffine::RandomAffine(RandomAffineOptions options) : o_(options) {
  EMBER_CHECK(o_.degrees_ >= 0 && o_.degrees_ <= 180, "RandomAffine: degrees must be in [0, 180], got ", o_.degrees_);
  EMBER_CHECK(o_.translate_ >= 0 && o_.translate_ <= 1, "RandomAffine: translate must be in [0, 1], got ",
              o_.translate_);
  EMBER_CHECK(o_.scale_min_ > 0 && o_.scale_min_ <= o_.scale_max_, "RandomAffine: scale range [", o_.scale_min_, ", ",
              o_.scale_max_, "] must be positive and ordered");
}

void RandomAffine::apply(Image& image, Rng& rng) const {
  const double angle = o_.degrees_ > 0 ? rng.uniform(-o_.degrees_, o_.degrees_) : 0.0;
  const double max_dx = o_.translate_ * static_cast<double>(image.width);
  const double max_dy = o_.translate_ * static_cast<double>(image.height);
  const double tx = o_.translate_ > 0 ? std::round(rng.uniform(-max_dx, max_dx)) : 0.0;
  const double ty = o_.translate_ > 0 ? std::round(rng.uniform(-max_dy, max_dy)) : 0.0;
  const double scale = o_.scale_max_ > o_.scale_min_ ? rng.uniform(o_.scale_min_, o_.scale_max_) : o_.scale_min_;
  if (angle == 0 && tx == 0 && ty == 0 && scale == 1) return;

  // Forward map about the centre c: p' = c + t + s R(angle) (p - c). The output pixel p' reads
  // the input at p = c + R(-angle) (p' - c - t) / s.
  const double a = angle * std::numbers::pi / 180.0;
  const double cs = std::cos(a) / scale, sn = std::sin(a) / scale;
  const double cx = (static_cast<double>(image.width) - 1) * 0.5, cy = (static_cast<double>(image.height) - 1) * 0.5;
  Image out(image.channels, image.height, image.width);
  const int64_t H = image.height, W = image.width;
  for (int64_t y = 0; y < H; ++y) {
    // source coordinates move by (cs, -sn) per output column: start of the row, then add
    const double dy = static_cast<double>(y) - cy - ty, dx0 = -cx - tx;
    double sx = cx + cs * dx0 + sn * dy, sy = cy - sn * dx0 + cs * dy;
    for (int64_t x = 0; x < W; ++x, sx += cs, sy -= sn) {
      if (!o_.bilinear_) {
        const int64_t ix = fast_floor(sx + 0.5), iy = fast_floor(sy + 0.5);
        const bool in = ix >= 0 && ix < W && iy >= 0 && iy < H;
        for (int64_t c = 0; c < image.channels; ++c) out.at(c, y, x) = in ? image.at(c, iy, ix) : o_.fill_;
        continue;
      }
      const int64_t x0 = fast_floor(sx), y0 = fast_floor(sy);
      const double fx = sx - static_cast<double>(x0), fy = sy - static_cast<double>(y0);
      for (int64_t c = 0; c < image.channels; ++c) {
        auto px = [&](int64_t yy, int64_t xx) -> double {
          return (xx >= 0 && xx < W && yy >= 0 && yy < H) ? image.at(c, yy, xx) : o_.fill_;
        };
        const double top = px(y0, x0) * (1 - fx) + px(y0, x0 + 1) * fx;
        const double bot = px(y0 + 1, x0) * (1 - fx) + px(y0 + 1, x0 + 1) * fx;
        out.at(c, y, x) = static_cast<uint8_t>(std::clamp(std::floor(top * (1 - fy) + bot * fy + 0.5), 0.0, 255.0));
      }
    }
  }
  image = std::move(out);
}

std::string RandomAffine::describe() const {
  return str("RandomAffine(degrees=", o_.degrees_, ", translate=", o_.translate_, ", scale=[", o_.scale_min_, ", ",
             o_.scale_max_, "]", o_.bilinear_ ? ", bilinear" : "", ")");
}

// ---- Resize ----

Resize::Resize(int64_t height, int64_t width) : height_(height), width_(width) {
  EMBER_CHECK(height > 0 && width > 0, "Resize: size ", height, " x ", width, " must be positive");
}

void Resize::apply(Image& image, Rng&) const { image = resize_image(image, height_, width_); }

std::string Resize::describe() const { return str("Resize(", height_, "x", width_, ")"); }

}  // namespace ember::data
