// Host augmentation (crop, flip, affine, resize) and the normalize_u8 op's values.
#include <catch2/catch.hpp>

#include <set>

#include "data/transforms.h"
#include "kernels/functional.h"

using namespace ember;
using namespace ember::data;

namespace {
// 1 x h x w image with pixel (y, x) = y * w + x + 1 (0 is the fill colour).
Image ramp(int64_t h, int64_t w, int64_t c = 1) {
  Image im(c, h, w);
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) im.at(k, y, x) = static_cast<uint8_t>(y * w + x + 1 + 50 * k);
  return im;
}
}  // namespace

TEST_CASE("transforms: random crop with padding", "[data][transforms]") {
  RandomCrop crop(4, 4, 2);
  Rng rng(3);
  std::set<std::pair<int, int>> offsets;
  for (int t = 0; t < 200; ++t) {
    Image im = ramp(4, 4);
    crop.apply(im, rng);
    REQUIRE(im.shape() == Shape{1, 4, 4});
    // find where the source's (0, 0) pixel (value 1) landed: the crop offset is its negation
    int oy = -100, ox = -100;
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) {
        uint8_t v = im.at(0, y, x);
        if (v != 0) {
          int sy = (v - 1) / 4, sx = (v - 1) % 4;
          if (oy == -100) {
            oy = y - sy;
            ox = x - sx;
          }
          CHECK(y - sy == oy);  // a pure translation of the source
          CHECK(x - sx == ox);
        }
      }
    if (oy != -100) offsets.insert({oy, ox});
    REQUIRE((oy == -100 || (std::abs(oy) <= 2 && std::abs(ox) <= 2)));
  }
  CHECK(offsets.size() == 25);  // every shift in [-2, 2]^2 occurs
  Image small = ramp(2, 2);
  CHECK_THROWS_WITH(RandomCrop(5, 5, 1).apply(small, rng), Catch::Contains("cannot crop 5 x 5 from a 2 x 2 image"));
  Image same = ramp(3, 5, 3);
  RandomCrop(3, 5).apply(same, rng);  // no padding, same size: identity
  CHECK(same.pixels == ramp(3, 5, 3).pixels);
}

TEST_CASE("transforms: horizontal flip", "[data][transforms]") {
  Rng rng(1);
  Image im = ramp(2, 3, 2);
  RandomHorizontalFlip(1.0).apply(im, rng);
  CHECK(im.at(0, 0, 0) == 3);
  CHECK(im.at(0, 1, 2) == 4);
  CHECK(im.at(1, 0, 0) == 53);
  RandomHorizontalFlip(1.0).apply(im, rng);
  CHECK(im.pixels == ramp(2, 3, 2).pixels);
  int flipped = 0;
  for (int t = 0; t < 1000; ++t) {
    Image x = ramp(1, 2);
    RandomHorizontalFlip(0.5).apply(x, rng);
    flipped += x.at(0, 0, 0) == 2;
  }
  CHECK(std::abs(flipped - 500) < 80);
  CHECK_THROWS(RandomHorizontalFlip(1.5));
}

TEST_CASE("transforms: affine", "[data][transforms]") {
  Rng rng(2);
  // the identity parameters leave the image alone
  Image im = ramp(5, 5);
  RandomAffine(RandomAffineOptions()).apply(im, rng);
  CHECK(im.pixels == ramp(5, 5).pixels);
  // translation only: whole-pixel shifts of at most 0.2 * 5 = 1 pixel
  for (int t = 0; t < 50; ++t) {
    Image x = ramp(5, 5);
    RandomAffine(RandomAffineOptions().translate(0.2)).apply(x, rng);
    int dy = -9, dx = -9;
    for (int y = 0; y < 5; ++y)
      for (int xx = 0; xx < 5; ++xx)
        if (x.at(0, y, xx) != 0) {
          int v = x.at(0, y, xx) - 1;
          dy = y - v / 5;
          dx = xx - v % 5;
        }
    CHECK(std::abs(dy) <= 1);
    CHECK(std::abs(dx) <= 1);
  }
  // a 90 degree rotation of an odd square maps pixels onto pixels; the centre stays
  Image sq = ramp(3, 3);
  RandomAffine rot(RandomAffineOptions().degrees(90));
  bool saw_rotation = false;
  for (int t = 0; t < 200 && !saw_rotation; ++t) {
    Image x = ramp(3, 3);
    rot.apply(x, rng);
    CHECK(x.at(0, 1, 1) == 5);
    // the angle is continuous: a near-90-degree draw moves the corners round
    saw_rotation = x.at(0, 0, 0) == 7 && x.at(0, 0, 2) == 1 && x.at(0, 2, 2) == 3 && x.at(0, 2, 0) == 9;
    saw_rotation =
        saw_rotation || (x.at(0, 0, 0) == 3 && x.at(0, 0, 2) == 9 && x.at(0, 2, 2) == 7 && x.at(0, 2, 0) == 1);
  }
  CHECK(saw_rotation);
  // scaling up by 2 with bilinear sampling keeps the centre and stays within the value range
  Image big = ramp(8, 8);
  RandomAffine(RandomAffineOptions().scale(2, 2).bilinear()).apply(big, rng);
  for (uint8_t v : big.pixels) CHECK((v >= 1 && v <= 64));
  CHECK_THROWS(RandomAffine(RandomAffineOptions().scale(0, 1)));
  CHECK_THROWS(RandomAffine(RandomAffineOptions().degrees(200)));
}

TEST_CASE("transforms: compose and resize", "[data][transforms]") {
  Rng rng(4);
  auto c = Compose({std::make_shared<Resize>(8, 6), std::make_shared<RandomHorizontalFlip>(0.0)});
  Image im(3, 4, 4);
  std::fill(im.pixels.begin(), im.pixels.end(), 77);
  c.apply(im, rng);
  CHECK(im.shape() == Shape{3, 8, 6});
  for (uint8_t v : im.pixels) CHECK(v == 77);  // a constant image stays constant
  CHECK_THAT(c.describe(), Catch::Contains("Resize(8x6)") && Catch::Contains("RandomHorizontalFlip"));
}

TEST_CASE("normalize_u8: ToTensor + Normalize values and errors", "[data][normalize]") {
  Tensor x = arange(256, TensorOptions(DType::u8));
  std::vector<float> y = normalize_u8(x, {0.1307}, {0.3081}).to_vector<float>();
  for (int v = 0; v < 256; ++v) {
    float want = (static_cast<float>(v) / 255.0f - 0.1307f) / 0.3081f;  // PyTorch's float steps
    REQUIRE(y[static_cast<size_t>(v)] == want);
  }
  // per channel: [2, 3, 1, 2]
  Tensor img = arange(12, TensorOptions(DType::u8)).view({2, 3, 1, 2});
  std::vector<double> z = normalize_u8(img, {0.0, 0.5, 1.0}, {1.0, 0.5, 2.0}, DType::f64).to_vector<double>();
  for (int i = 0; i < 12; ++i) {
    int c = (i / 2) % 3;
    double mean = c * 0.5, sd = c == 1 ? 0.5 : (c == 0 ? 1.0 : 2.0);
    CHECK(z[static_cast<size_t>(i)] == Approx((i / 255.0 - mean) / sd).epsilon(1e-15));
  }
  CHECK(normalize_u8(img, {0.5}, {0.5}, DType::bf16).dtype() == DType::bf16);
  CHECK(normalize_u8(img).to_vector<float>()[11] == 11.0f / 255.0f);
  CHECK_THROWS_WITH(normalize_u8(img.to(DType::f32)), Catch::Contains("must be u8 images"));
  CHECK_THROWS_WITH(normalize_u8(img, {0, 0}, {1, 1}),
                    Catch::Contains("2 mean/std entries") && Catch::Contains("[2, 3, 1, 2]"));
  CHECK_THROWS_WITH(normalize_u8(img, {0}, {0}), Catch::Contains("std must be non-zero"));
  CHECK_THROWS_WITH(normalize_u8(img, {0, 1}, {1}), Catch::Contains("the same number"));
  CHECK_THROWS_WITH(normalize_u8(img, {0.5}, {0.5}, DType::i32), Catch::Contains("must be floating"));
}

// mnist_train normalises straight to --amp's dtype (apps/mnist_train/trainer.cpp): that must equal
// normalising to f32 and casting, which autocast did before, for every byte and channel.
TEST_CASE("normalize_u8: to f16 and bf16 equals f32 then a cast, every byte", "[data][normalize]") {
  Tensor x = empty({2, 3, 256}, TensorOptions(DType::u8));  // every byte in every channel
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i % 256);
  const std::vector<double> mean = {0.2860, 0.5, 0.1307}, sd = {0.3530, 0.25, 0.3081};
  for (DType low : {DType::f16, DType::bf16}) {
    INFO(dtype_name(low));
    Tensor direct = normalize_u8(x, mean, sd, low);
    Tensor cast_after = normalize_u8(x, mean, sd, DType::f32).to(low);
    CHECK(direct.to(DType::f32).to_vector<float>() == cast_after.to(DType::f32).to_vector<float>());
  }
}
