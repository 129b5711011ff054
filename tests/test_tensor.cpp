// Tensor semantics: dtypes and promotion, 16-bit float conversions, shapes and views (no copies),
// contiguity, conversions, printing, factories.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "ember.h"

using namespace ember;

TEST_CASE("dtype promotion follows PyTorch", "[tensor]") {
  CHECK(promote_types(DType::f32, DType::f64) == DType::f64);
  CHECK(promote_types(DType::f16, DType::bf16) == DType::f32);
  CHECK(promote_types(DType::f16, DType::f32) == DType::f32);
  CHECK(promote_types(DType::i32, DType::f16) == DType::f16);
  CHECK(promote_types(DType::u8, DType::i32) == DType::i32);
  CHECK(promote_types(DType::u8, DType::boolean) == DType::u8);
  CHECK(promote_types(DType::i64, DType::i32) == DType::i64);
  CHECK(promote_with_scalar(DType::f16, false) == DType::f16);
  CHECK(promote_with_scalar(DType::i32, false) == DType::f32);
  CHECK(promote_with_scalar(DType::i32, true) == DType::i32);
  CHECK(parse_dtype("bfloat16") == DType::bf16);
  CHECK(parse_dtype("half") == DType::f16);
  CHECK_THROWS_WITH(parse_dtype("f8"), Catch::Contains("unknown dtype 'f8'"));
}

TEST_CASE("f16 and bf16 conversions round to nearest even and keep specials", "[tensor]") {
  // every f16 bit pattern survives f16 -> f32 -> f16
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = detail::f16_bits_to_f32(static_cast<uint16_t>(b));
    uint16_t back = detail::f32_to_f16_bits(f);
    if (std::isnan(f)) CHECK(((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0));
    else if (back != b) FAIL("f16 bits " << b << " -> " << f << " -> " << back);
  }
  CHECK(static_cast<float>(Half(1.0f)) == 1.0f);
  CHECK(static_cast<float>(Half(65504.0f)) == 65504.0f);
  CHECK(std::isinf(static_cast<float>(Half(65520.0f))));                              // rounds up to inf
  CHECK(static_cast<float>(Half(65519.0f)) == 65504.0f);                              // rounds down
  CHECK(static_cast<float>(Half(5.9604644775390625e-8f)) == 5.9604644775390625e-8f);  // smallest subnormal
  CHECK(static_cast<float>(Half(2.98023223876953125e-8f)) == 0.0f);                   // tie -> even (0)
  CHECK(static_cast<float>(Half(1.0f + 1.0f / 2048)) == 1.0f);                        // tie -> even
  CHECK(static_cast<float>(Half(1.0f + 3.0f / 2048)) == 1.0f + 2.0f / 1024);
  CHECK(static_cast<float>(BFloat16(1.0f)) == 1.0f);
  CHECK(static_cast<float>(BFloat16(1.00390625f)) == 1.0f);       // tie -> even
  CHECK(static_cast<float>(BFloat16(1.01171875f)) == 1.015625f);  // tie -> even (up)
  CHECK(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::infinity()))));
}

TEST_CASE("views share storage and never copy", "[tensor]") {
  Tensor a = arange(24, DType::f32).reshape({2, 3, 4});
  CHECK(a.is_contiguous());
  Tensor t = a.transpose(0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.strides() == Strides{1, 4, 12});
  CHECK(t.storage() == a.storage());
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.is_non_overlapping_and_dense());
  Tensor s = a.slice(2, 1, 4, 2);
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(s.offset() == 1);
  CHECK(s.to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  Tensor e = tensor({1, 2, 3}).unsqueeze(0).expand({4, 3});
  CHECK(e.strides() == Strides{0, 1});
  CHECK_FALSE(e.is_non_overlapping_and_dense());
  CHECK(a.select(1, 2).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(a.narrow(0, 1, 1).shape() == Shape{1, 3, 4});
  CHECK(a.flatten().shape() == Shape{24});
  CHECK(a.flatten(1).shape() == Shape{2, 12});
  CHECK(a.view({-1, 4}).shape() == Shape{6, 4});
  CHECK(a.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(a.unsqueeze(-1).squeeze(-1).shape() == Shape{2, 3, 4});
  CHECK(a.permute({2, 0, 1}).contiguous().to_vector<float>()[1] == 4.0f);
  // writes through a view are seen by the base
  Tensor col = a.select(2, 0);
  col.fill_(-1);
  CHECK(a.to_vector<float>()[4] == -1.0f);
  CHECK(a.to_vector<float>()[5] == 5.0f);
}

TEST_CASE("view refuses incompatible strides, reshape copies then", "[tensor]") {
  Tensor a = arange(12, DType::f32).reshape({3, 4}).t();
  CHECK_THROWS_WITH(a.view({12}), Catch::Contains("use reshape()"));
  Tensor r = a.reshape({12});
  CHECK(r.storage() != a.storage());
  CHECK(r.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK_THROWS_WITH(a.reshape({5, -1}), Catch::Contains("is invalid for input of shape [4, 3]"));
  CHECK_THROWS_WITH(a.view({-1, -1}), Catch::Contains("only one dimension can be -1"));
}

TEST_CASE("make_view reads a storage's bytes as another dtype, within its bounds", "[tensor]") {
  // one u8 block holding 5 bytes of images, 3 bytes of padding, then 2 i64 labels
  Tensor block = zeros({24}, DType::u8);
  Tensor labels = make_view(block, DType::i64, {2}, {1}, 1);
  labels.copy_(tensor_i64({7, -3}, {2}));
  CHECK(labels.storage() == block.storage());
  CHECK(labels.dtype() == DType::i64);
  CHECK(make_view(block, DType::i64, {2}, {1}, 1).to_vector<int64_t>() == std::vector<int64_t>{7, -3});
  CHECK(static_cast<int>(block.to_vector<uint8_t>()[8]) == 7);  // little-endian: the low byte first
  CHECK_THROWS_WITH(make_view(block, DType::i64, {3}, {1}, 1), Catch::Contains("out of bounds of a storage of 3 i64"));
  alignas(8) uint8_t bytes[16] = {};
  Tensor odd = from_blob(bytes + 1, {8}, DType::u8);  // a storage starting off a 4-byte boundary
  CHECK_THROWS_WITH(make_view(odd, DType::f32, {1}, {1}, 0), Catch::Contains("not aligned to 4 bytes"));
}

TEST_CASE("dim checks name the range", "[tensor]") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_WITH(a.transpose(0, 2), Catch::Contains("out of range for a tensor with 2 dimensions"));
  CHECK_THROWS_WITH(a.select(1, 3), Catch::Contains("index 3 is out of range for dim 1 of size 3"));
  CHECK_THROWS_WITH(a.expand({3, 3}), Catch::Contains("must be 1 to expand"));
  CHECK_THROWS_WITH(a.permute({0, 0}), Catch::Contains("repeats"));
}

TEST_CASE("contiguous, clone, to(dtype) and item", "[tensor]") {
  Tensor a = tensor({1.5, -2.25, 3}, {3});
  CHECK(a.dtype() == DType::f32);
  CHECK(a.to(DType::f16).to_vector<float>() == std::vector<float>{1.5f, -2.25f, 3.0f});
  CHECK(a.to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, -2, 3});
  CHECK(a.to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, true, true});
  Tensor c = a.clone();
  CHECK(c.storage() != a.storage());
  c.fill_(0);
  CHECK(a.to_vector<float>()[0] == 1.5f);
  CHECK(a[1].item() == -2.25);
  CHECK_THROWS_WITH(a.item(), Catch::Contains("exactly one element"));
  // channels-last stays channels-last through elementwise ops
  Tensor x = randn({2, 3, 4, 5}).permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  CHECK(x.is_channels_last());
  CHECK(relu(x).is_channels_last());
  CHECK(add(x, x).is_channels_last());
  CHECK(x.contiguous().is_contiguous());
}

TEST_CASE("factories", "[tensor]") {
  CHECK(zeros({2, 2}).to_vector<float>() == std::vector<float>{0, 0, 0, 0});
  CHECK(ones({3}, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
  CHECK(full({2}, 7.5, DType::f64).to_vector<double>() == std::vector<double>{7.5, 7.5});
  CHECK(arange(5).dtype() == DType::i64);
  CHECK(arange(0, 1, 0.25, DType::f32).to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(arange(5, 0, -2).to_vector<int64_t>() == std::vector<int64_t>{5, 3, 1});
  CHECK_THROWS_WITH(arange(0, 5, -1), Catch::Contains("goes away from end"));
  CHECK_THROWS_WITH(empty({2, -1}), Catch::Contains("negative dimension -1"));
  Tensor e = empty({0, 3});
  CHECK(e.numel() == 0);
  CHECK(sum(e).item() == 0.0);
}

TEST_CASE("printing", "[tensor]") {
  CHECK(tensor({1, 2.5}, {2}).str() == "tensor([1.0000, 2.5000])");
  CHECK(tensor({1, 2}, {1, 2}).str() == "tensor([[1.0, 2.0]])");
  CHECK(arange(3).str() == "tensor([0, 1, 2])");
  CHECK(scalar_tensor(3, DType::f16).str() == "tensor(3.0, dtype=f16)");
  CHECK(zeros({0}).str() == "tensor([])");
  Tensor big = arange(2000, DType::f32);
  std::string s = big.str();
  CHECK(s.find("...") != std::string::npos);
  CHECK(s.find("1999.0") != std::string::npos);
  Tensor g = ones({2}).requires_grad_();
  CHECK(mul(g, 2.0).str().find("grad_fn=<mul_scalarBackward>") != std::string::npos);
}

TEST_CASE("Philox matches the published Random123 answers and is the same per element", "[rng]") {
  // Random123 known-answer test for philox4x32-10: counter 0, key 0
  Philox4x32 r = philox(0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
  manual_seed(123);
  Tensor a = rand({1000});
  manual_seed(123);
  Tensor b = rand({1000});
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  Tensor c = rand({1000});
  CHECK(a.to_vector<float>() != c.to_vector<float>());  // the offset advanced
  std::vector<float> v = a.to_vector<float>();
  double m = 0;
  for (float x : v) {
    CHECK(x >= 0.0f);
    CHECK(x < 1.0f);
    m += x;
  }
  CHECK(m / 1000 == Approx(0.5).margin(0.05));
  Tensor n = randn({20000});
  CHECK(mean(n).item() == Approx(0).margin(0.03));
  CHECK(var(n).item() == Approx(1).margin(0.05));
  Tensor bern = bernoulli({20000}, 0.3);
  CHECK(mean(bern).item() == Approx(0.3).margin(0.02));
}

TEST_CASE("parallel_for covers the range once and propagates exceptions", "[core]") {
  std::vector<int> hits(100000, 0);
  parallel_for(0, 100000, 1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
  });
  for (int h : hits) REQUIRE(h == 1);
  CHECK_THROWS_WITH(parallel_for(0, 100000, 10,
                                 [&](int64_t b, int64_t) {
                                   if (b > 50000) throw Error("boom in chunk");
                                 }),
                    Catch::Contains("boom in chunk"));
  // nested parallel_for runs inline
  int64_t total = 0;
  std::mutex mu;
  parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
    parallel_for(0, 1000, 10, [&](int64_t bb, int64_t ee) {
      std::lock_guard<std::mutex> lock(mu);
      total += (ee - bb) * (e - b);
    });
  });
  CHECK(total == 8000);
}

TEST_CASE("no CUDA device: queries answer and CUDA requests fail clearly", "[core]") {
  if (cuda::device_count() > 0) {
    WARN("skipped: this machine has a CUDA device");
    return;
  }
  CHECK_FALSE(cuda::is_available());
  CHECK_FALSE(cuda::unavailable_reason().empty());
  CHECK_THROWS_WITH(zeros({2}, kCUDA), Catch::Contains("not available") || Catch::Contains("built without CUDA"));
  CHECK_THROWS_WITH(ones({2}).to(kCUDA), Catch::Contains("to(cuda:0)"));
  // pinned memory falls back to plain host memory
  Tensor p = ones({4}).pin_memory();
  CHECK(p.is_cpu());
  CHECK(p.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
}
