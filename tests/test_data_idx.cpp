// IDX / MNIST reading: the happy paths (raw and gzip, generated and the real Fashion-MNIST), the
// bad-input suite (every malformed file gets a clear error naming the problem), and the fuzz
// corpus run through the parser.
#include <catch2/catch.hpp>

#include <filesystem>

#include "tests/data_test_util.h"

using namespace ember;
using namespace ember::data;
using ember::testing::gzip_bytes;
using ember::testing::idx_bytes;
using ember::testing::TempDir;
using ember::testing::write_bytes;

namespace {

// The error message of fn(), or "" when it does not throw ember::Error.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("idx: parses every element type and converts from big-endian", "[data][idx]") {
  // i16 [2, 2]: 0x0102, 0xFFFE (-2), 0x7FFF, 0x8000
  auto a = parse_idx(idx_bytes(0x0B, {2, 2}, {0x01, 0x02, 0xFF, 0xFE, 0x7F, 0xFF, 0x80, 0x00}), "i16");
  CHECK(a.type == IdxType::i16);
  CHECK(a.dims == std::vector<int64_t>{2, 2});
  CHECK(a.to_tensor().to_vector<int32_t>() == std::vector<int32_t>{0x0102, -2, 32767, -32768});
  // i32, f32 (1.5 = 0x3FC00000), f64 (-2.25 = 0xC002000000000000), i8, u8
  CHECK(parse_idx(idx_bytes(0x0C, {1}, {0xFF, 0xFF, 0xFF, 0xFD}), "i32").to_tensor().to_vector<int32_t>()[0] == -3);
  CHECK(parse_idx(idx_bytes(0x0D, {1}, {0x3F, 0xC0, 0, 0}), "f32").to_tensor().to_vector<double>()[0] == 1.5);
  CHECK(parse_idx(idx_bytes(0x0E, {1}, {0xC0, 0x02, 0, 0, 0, 0, 0, 0}), "f64").to_tensor().to_vector<double>()[0] ==
        -2.25);
  CHECK(parse_idx(idx_bytes(0x09, {2}, {0x80, 0x7F}), "i8").to_tensor().to_vector<int32_t>() ==
        std::vector<int32_t>{-128, 127});
  auto u = parse_idx(idx_bytes(0x08, {3, 1, 2}, {1, 2, 3, 4, 5, 6}), "u8");
  CHECK(u.magic == 0x00000803);
  CHECK(u.to_tensor().shape() == Shape{3, 1, 2});
  CHECK(u.to_tensor().dtype() == DType::u8);
  // zero-sized dims are legal IDX (an empty array)
  CHECK(parse_idx(idx_bytes(0x08, {0, 28, 28}, {}), "empty").numel() == 0);
}

TEST_CASE("idx: reads raw and gzip'd files, and MNIST pairs from a directory", "[data][idx]") {
  TempDir dir;
  testing::write_mnist_pair(dir.file("train-images-idx3-ubyte.gz"), dir.file("train-labels-idx1-ubyte.gz"), 50, 4, 5,
                            true);
  std::filesystem::create_directories(dir.file("raw"));
  testing::write_mnist_pair(dir.file("raw/t10k-images.idx3-ubyte"), dir.file("raw/t10k-labels.idx1-ubyte"), 20, 4, 5,
                            false);

  auto train = load_mnist(dir.path(), Split::train);
  REQUIRE(train->size() == 50);
  CHECK(train->images().shape() == Shape{50, 1, 4, 5});
  CHECK(train->labels().dtype() == DType::i64);
  Sample s = train->get(13);
  CHECK(s.label == 3);
  CHECK(s.image.at(0, 1, 2) == static_cast<uint8_t>((13 * 7 + 1 * 5 + 2) % 256));
  CHECK(train->classes().size() == 10);

  auto test = load_mnist(dir.path(), Split::test);  // found in raw/, dotted names, uncompressed
  CHECK(test->size() == 20);
  CHECK(test->get(19).label == 9);

  // the same data raw and gzip'd parse identically
  auto raw = read_idx(dir.file("raw/t10k-images.idx3-ubyte"));
  write_bytes(dir.file("copy.gz"), gzip_bytes(read_file(dir.file("raw/t10k-images.idx3-ubyte"))));
  CHECK(read_idx(dir.file("copy.gz")).data == raw.data);
}

TEST_CASE("idx: concatenated gzip members are one stream", "[data][idx]") {
  TempDir dir;
  auto bytes = idx_bytes(0x08, {6}, {1, 2, 3, 4, 5, 6});
  std::vector<uint8_t> a(bytes.begin(), bytes.begin() + 7), b(bytes.begin() + 7, bytes.end());
  auto gz = gzip_bytes(a), gz2 = gzip_bytes(b);
  gz.insert(gz.end(), gz2.begin(), gz2.end());
  write_bytes(dir.file("two.gz"), gz);
  CHECK(read_idx(dir.file("two.gz")).data == std::vector<uint8_t>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("idx bad input: every malformed file gets a clear error", "[data][idx][bad_input]") {
  TempDir dir;
  auto put = [&](const std::string& name, const std::vector<uint8_t>& b) {
    write_bytes(dir.file(name), b);
    return dir.file(name);
  };
  const std::vector<uint8_t> px(2 * 3 * 4, 7);

  SECTION("empty file") {
    std::string p = put("empty-idx3-ubyte", {});
    CHECK_THAT(error_of([&] { read_idx(p); }), Catch::Contains("empty-idx3-ubyte: the file is empty (0 bytes)"));
    CHECK_THAT(error_of([&] { parse_idx({}, "mem"); }), Catch::Contains("the file is empty"));
  }
  SECTION("shorter than a header") {
    CHECK_THAT(error_of([&] {
                 parse_idx(std::vector<uint8_t>{0, 0}, "two");
               }),
               Catch::Contains("expected at least 4 bytes, got 2"));
    CHECK_THAT(error_of([&] {
                 parse_idx(std::vector<uint8_t>{0, 0, 8, 3, 0, 0}, "hdr");
               }),
               Catch::Contains("truncated IDX header") && Catch::Contains("expected 16 header bytes, got 6"));
  }
  SECTION("wrong magic") {
    CHECK_THAT(error_of([&] {
                 parse_idx(std::vector<uint8_t>{0x12, 0x34, 0x56, 0x78, 0}, "junk");
               }),
               Catch::Contains("not an IDX file: magic 0x12345678"));
    CHECK_THAT(error_of([&] {
                 parse_idx(std::vector<uint8_t>{0, 0, 0x07, 1, 0, 0, 0, 0}, "t");
               }),
               Catch::Contains("unknown IDX element type 0x07"));
    CHECK_THAT(error_of([&] {
                 parse_idx(std::vector<uint8_t>{0, 0, 0x08, 0}, "z");
               }),
               Catch::Contains("declares 0 dims"));
    // labels where images are expected (and the reverse): named, with the likely cause
    std::string im = put("im-idx3-ubyte", idx_bytes(0x08, {2, 3, 4}, px));
    std::string lb = put("lb-idx1-ubyte", idx_bytes(0x08, {2}, {1, 2}));
    std::string msg = error_of([&] { load_mnist_files(lb, im); });
    CHECK_THAT(msg, Catch::Contains("expected MNIST images, magic 0x00000803 (2051") &&
                        Catch::Contains("got 0x00000801 (2049") && Catch::Contains("swapped"));
    // an f32 array is not MNIST images either
    std::string f = put("f-idx3", idx_bytes(0x0D, {1, 1, 1}, {0, 0, 0, 0}));
    CHECK_THAT(error_of([&] { load_mnist_files(f, lb); }), Catch::Contains("got 0x00000D03"));
  }
  SECTION("wrong dims") {
    // images with 2 dims (magic 0x802), and images of 0 columns
    std::string two = put("two-idx2", idx_bytes(0x08, {2, 12}, px));
    std::string lb = put("lb", idx_bytes(0x08, {2}, {1, 2}));
    CHECK_THAT(error_of([&] { load_mnist_files(two, lb); }),
               Catch::Contains("got 0x00000802") && Catch::Contains("2 dims"));
    std::string zero = put("zero-cols", idx_bytes(0x08, {2, 3, 0}, {}));
    CHECK_THAT(error_of([&] { load_mnist_files(zero, lb); }), Catch::Contains("images of 3 x 0 pixels"));
    // labels with 2 dims
    std::string im = put("im", idx_bytes(0x08, {2, 3, 4}, px));
    std::string lb2 = put("lb2", idx_bytes(0x08, {2, 1}, {1, 2}));
    CHECK_THAT(error_of([&] { load_mnist_files(im, lb2); }),
               Catch::Contains("expected MNIST labels") && Catch::Contains("got 0x00000802"));
  }
  SECTION("truncated payload and trailing bytes") {
    auto full = idx_bytes(0x08, {2, 3, 4}, px);
    std::vector<uint8_t> cut(full.begin(), full.end() - 5);
    std::string p = put("cut-idx3-ubyte", cut);
    CHECK_THAT(error_of([&] { read_idx(p); }), Catch::Contains("truncated IDX data") &&
                                                   Catch::Contains("[2, 3, 4] u8 = 24 bytes") &&
                                                   Catch::Contains("expected 24 bytes, got 19"));
    full.push_back(1);
    full.push_back(2);
    p = put("long-idx3-ubyte", full);
    CHECK_THAT(error_of([&] { read_idx(p); }), Catch::Contains("2 unexpected bytes after the IDX data"));
    // the same through gzip: truncated decompressed payload, and a truncated compressed stream
    std::string g = put("cut.gz", gzip_bytes(cut));
    CHECK_THAT(error_of([&] { read_idx(g); }), Catch::Contains("expected 24 bytes, got 19"));
    auto gz = gzip_bytes(idx_bytes(0x08, {2, 3, 4}, px));
    gz.resize(gz.size() - 12);
    std::string g2 = put("cutstream.gz", gz);
    CHECK_THAT(error_of([&] { read_idx(g2); }), Catch::Contains("gzip stream is truncated"));
    auto bad = gzip_bytes(idx_bytes(0x08, {2, 3, 4}, px));
    bad[bad.size() / 2] ^= 0xFF;
    bad[bad.size() / 2 + 1] ^= 0x55;
    std::string g3 = put("corrupt.gz", bad);
    CHECK_THAT(error_of([&] { read_idx(g3); }), Catch::Contains("corrupt.gz:"));
  }
  SECTION("label/image count mismatch") {
    std::string im = put("im-idx3-ubyte", idx_bytes(0x08, {2, 3, 4}, px));
    std::string lb = put("lb-idx1-ubyte", idx_bytes(0x08, {3}, {1, 2, 3}));
    CHECK_THAT(error_of([&] { load_mnist_files(im, lb); }),
               Catch::Contains("holds 2 images but") && Catch::Contains("holds 3 labels"));
  }
  SECTION("gzip given as raw, raw given as gzip: a hint") {
    std::string gz_as_raw = put("train-images-idx3-ubyte", gzip_bytes(idx_bytes(0x08, {2, 3, 4}, px)));
    CHECK_THAT(error_of([&] { read_idx(gz_as_raw); }),
               Catch::Contains("gzip-compressed data, not a raw IDX file") && Catch::Contains("name the file *.gz"));
    std::string raw_as_gz = put("train-images-idx3-ubyte.gz", idx_bytes(0x08, {2, 3, 4}, px));
    CHECK_THAT(
        error_of([&] { read_idx(raw_as_gz); }),
        Catch::Contains("ends in .gz but the file is not gzip-compressed") && Catch::Contains("a raw IDX header"));
    CHECK_THAT(error_of([&] { read_idx(raw_as_gz, IdxCompression::gzip); }),
               Catch::Contains("the file is not compressed"));
    // and the explicit modes do what they say
    CHECK(read_idx(raw_as_gz, IdxCompression::raw).numel() == 24);
    CHECK(read_idx(gz_as_raw, IdxCompression::gzip).numel() == 24);
  }
  SECTION("huge declared sizes are refused before allocating") {
    // dims whose product overflows 64 bits
    CHECK_THAT(error_of([&] {
                 parse_idx(idx_bytes(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {1, 2, 3}), "ovf");
               }),
               Catch::Contains("overflows any possible file size"));
    // 2^34 bytes declared by a tiny raw file: the size check comes first ("expected ... got 3"),
    // which is only possible if nothing of that size was allocated to read into
    std::string p = put("huge-idx3-ubyte", idx_bytes(0x08, {0x10000, 0x10000, 4}, {1, 2, 3}));
    CHECK_THAT(error_of([&] { read_idx(p); }), Catch::Contains("expected 17179869184 bytes, got 3"));
    // the same in gzip: more than deflate could ever expand to
    std::string g = put("huge.gz", gzip_bytes(idx_bytes(0x08, {0x10000, 0x10000, 4}, {1, 2, 3})));
    CHECK_THAT(error_of([&] { read_idx(g); }), Catch::Contains("decompresses to at most"));
    // plausible for the compressed size but absent: collected as it arrives, then "truncated"
    std::vector<uint8_t> noise(200000);  // incompressible, so 100 MB is within deflate's bound
    uint32_t x = 12345;
    for (uint8_t& v : noise) v = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
    std::string g2 = put("short.gz", gzip_bytes(idx_bytes(0x08, {1000, 1000, 100}, noise)));
    CHECK_THAT(error_of([&] { read_idx(g2); }), Catch::Contains("expected 100000000 bytes, got 200000"));
  }
  SECTION("missing files") {
    CHECK_THAT(error_of([&] { read_idx(dir.file("nope")); }),
               Catch::Contains("cannot open") && Catch::Contains("No such file"));
    CHECK_THAT(error_of([&] { load_mnist(dir.path(), Split::train); }),
               Catch::Contains("MNIST train files not found") && Catch::Contains("train-images-idx3-ubyte"));
  }
}

TEST_CASE("idx: every file of the fuzz corpus loads or throws ember::Error", "[data][idx][fuzz]") {
  const std::filesystem::path corpus = std::filesystem::path(EMBER_SOURCE_DIR) / "tests/corpus/idx";
  REQUIRE(std::filesystem::is_directory(corpus));
  int files = 0, parsed = 0, rejected = 0;
  for (const auto& e : std::filesystem::directory_iterator(corpus)) {
    if (!e.is_regular_file() || e.path().extension() == ".py" || e.path().extension() == ".md") continue;
    ++files;
    std::vector<uint8_t> bytes = read_file(e.path().string());
    try {
      IdxArray a = parse_idx(bytes, e.path().filename().string());
      CHECK(static_cast<int64_t>(a.data.size()) == a.numel() * static_cast<int64_t>(idx_type_size(a.type)));
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(files >= 10);
  CHECK(parsed > 0);
  CHECK(rejected > 0);
  WARN("IDX corpus: " << files << " files, " << parsed << " parsed, " << rejected << " rejected with an error");
}

TEST_CASE("idx: Fashion-MNIST from Debian's dataset-fashion-mnist", "[data][idx][mnist]") {
  if (!testing::has_fashion_mnist()) {
    WARN("SKIPPED: " << testing::kFashionMnist << " is missing (apt-get install dataset-fashion-mnist)");
    return;
  }
  auto train = load_mnist(testing::kFashionMnist, Split::train);
  auto test = load_mnist(testing::kFashionMnist, Split::test);
  REQUIRE(train->size() == 60000);
  REQUIRE(test->size() == 10000);
  CHECK(train->images().shape() == Shape{60000, 1, 28, 28});
  // balanced classes: 6000 per class in train, 1000 in test
  std::vector<int64_t> count(10, 0);
  for (int64_t l : train->labels().to_vector<int64_t>()) ++count[static_cast<size_t>(l)];
  CHECK(count == std::vector<int64_t>(10, 6000));
  // the mean pixel of the training set is 0.2860 * 255 (the mean everybody normalises with)
  double s = 0;
  const auto* p = static_cast<const uint8_t*>(train->images().data_ptr());
  for (int64_t i = 0; i < train->images().numel(); ++i) s += p[i];
  CHECK(s / static_cast<double>(train->images().numel()) / 255.0 == Approx(0.2860).margin(5e-4));
}
