// Data that does not fit, said clearly: an images file where labels are expected,
// training and test images of different sizes, NAME and NAME.gz both present, a packed file whose
// header was edited; the CPU fallback note's wording; augmentations independent of --workers.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "core/cuda/unavailable_reason.h"
#include "data/data_loader.h"
#include "data/idx.h"
#include "data/in_memory.h"
#include "data/mnist.h"
#include "data/packed.h"
#include "data/transforms.h"
#include "data_test_util.h"
#include "kernels/functional.h"

using namespace ember;
using namespace ember::data;
using ember::testing::TempDir;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> pixels(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
  return p;
}

}  // namespace

TEST_CASE("data messages: an images file where labels are expected says so", "[data][messages]") {
  TempDir dir;
  const std::string im = dir.file("train-images-idx3-ubyte"), lb = dir.file("train-labels-idx1-ubyte");
  ember::testing::write_bytes(im, ember::testing::idx_bytes(0x08, {6, 3, 4}, pixels(72)));
  SECTION("an images file in the labels' place") {
    ember::testing::write_bytes(lb, ember::testing::idx_bytes(0x08, {6, 3, 4}, pixels(72)));
    const std::string msg = error_of([&] { load_mnist_files(im, lb); });
    CHECK_THAT(msg, Catch::Contains(lb) &&
                        Catch::Contains("this is an images file (IDX magic 0x00000803), expected labels (0x00000801)"));
  }
  SECTION("labels behind an images file's magic: not read as a nonsense shape") {
    std::vector<uint8_t> b{0, 0, 8, 3, 0, 0, 0, 6, 1, 2, 3, 4, 5, 6};
    ember::testing::write_bytes(lb, b);
    const std::string msg = error_of([&] { load_mnist_files(im, lb); });
    CHECK_THAT(msg, Catch::Contains(lb) && Catch::Contains("this is an images file (IDX magic 0x00000803)"));
    CHECK_THAT(msg, !Catch::Contains("truncated"));
  }
  SECTION("read_idx with an expected magic, any other magic") {
    ember::testing::write_bytes(lb, ember::testing::idx_bytes(0x08, {6, 1}, pixels(6)));
    CHECK_THAT(error_of([&] { read_idx(lb, IdxCompression::by_name, kIdxLabelsMagic); }),
               Catch::Contains("expected MNIST labels (IDX magic 0x00000801), got 0x00000802"));
  }
}

TEST_CASE("data messages: training and test images of different sizes are an error naming both", "[data][messages]") {
  TempDir dir;
  ember::testing::write_mnist_pair(dir.file("train-images-idx3-ubyte"), dir.file("train-labels-idx1-ubyte"), 5, 28, 28,
                                   false);
  ember::testing::write_mnist_pair(dir.file("t10k-images-idx3-ubyte"), dir.file("t10k-labels-idx1-ubyte"), 3, 32, 32,
                                   false);
  auto train = load_mnist(dir.path(), Split::train);
  auto test = load_mnist(dir.path(), Split::test);
  CHECK(train->source() == dir.file("train-images-idx3-ubyte"));
  const std::string msg = error_of([&] { check_same_image_size(*train, *test); });
  CHECK_THAT(msg, Catch::Contains(dir.file("train-images-idx3-ubyte")) && Catch::Contains("1 x 28 x 28") &&
                      Catch::Contains(dir.file("t10k-images-idx3-ubyte")) && Catch::Contains("1 x 32 x 32"));
  CHECK_NOTHROW(check_same_image_size(*train, *train));
}

TEST_CASE("data messages: with both NAME and NAME.gz present the note says which one is read", "[data][messages]") {
  TempDir dir;
  const std::string im = dir.file("train-images-idx3-ubyte"), lb = dir.file("train-labels-idx1-ubyte");
  ember::testing::write_mnist_pair(im, lb, 4, 3, 3, false);
  ember::testing::write_mnist_pair(im + ".gz", lb + ".gz", 4, 3, 3, true);
  MnistFiles f = find_mnist_files(dir.path(), Split::train);
  CHECK(f.images == im);
  REQUIRE(f.notes.size() == 2);
  CHECK_THAT(f.notes[0], Catch::Contains("both " + im + " and " + im + ".gz exist; reading " + im));
  // only one of the two: no note
  std::filesystem::remove(lb);
  f = find_mnist_files(dir.path(), Split::train);
  CHECK(f.labels == lb + ".gz");
  CHECK(f.notes.size() == 1);
}

TEST_CASE("data messages: the CPU fallback note says no driver or no device", "[data][messages]") {
  using namespace ember::cuda;
  const std::string insufficient = "CUDA driver version is insufficient for CUDA runtime version";
  // no libcuda: the runtime says "insufficient driver"; the note says what is missing
  CHECK(describe_no_cuda(kCudaErrorInsufficientDriver, 0, false, insufficient) ==
        "no NVIDIA driver found (libcuda.so.1 is not installed)");
  CHECK_THAT(describe_no_cuda(kCudaErrorStubLibrary, 0, true, "stub"), Catch::Contains("no NVIDIA driver found"));
  // a driver but no GPU
  CHECK(describe_no_cuda(kCudaErrorNoDevice, 0, true, "no CUDA-capable device is detected") == "no CUDA device");
  CHECK(describe_no_cuda(kCudaSuccess, 0, true, "") == "no CUDA device");
  // a driver that is too old for the runtime: that message is the right one
  CHECK_THAT(describe_no_cuda(kCudaErrorInsufficientDriver, 0, true, insufficient),
             Catch::Contains("too old") && Catch::Contains(insufficient));
  CHECK(describe_no_cuda(kCudaSuccess, 2, true, "") == "");
  for (bool driver : {false, true})
    CHECK_THAT(describe_no_cuda(kCudaErrorNoDevice, 0, driver, ""), !Catch::Contains("insufficient"));
}

TEST_CASE("data messages: a packed file whose header was edited fails its checksum", "[data][messages][packed]") {
  TempDir dir;
  Tensor images = arange(4 * 1 * 2 * 6, TensorOptions(DType::u8)).view({4, 1, 2, 6});
  Tensor labels = tensor_i64({0, 1, 1, 0}, {4});
  write_packed(dir.file("p.epk"), images, labels, {"a", "b"});
  REQUIRE(read_packed(dir.file("p.epk")).images.shape() == Shape{4, 1, 2, 6});
  // height and width swapped: every size still adds up
  std::vector<uint8_t> b = bytes_of(dir.file("p.epk"));
  for (int i = 0; i < 4; ++i) std::swap(b[28 + i], b[32 + i]);
  ember::testing::write_bytes(dir.file("swapped.epk"), b);
  CHECK_THAT(error_of([&] { read_packed(dir.file("swapped.epk")); }),
             Catch::Contains(dir.file("swapped.epk")) && Catch::Contains("CRC mismatch in the header"));
  // a file from before the header had a CRC (96-byte header) is still read
  {
    const uint64_t n = 4, sample = 12, classes_bytes = 2 * 5, index_off = 96 + classes_bytes;
    const uint64_t pixels_off = (index_off + 16 * n + 63) / 64 * 64, total = pixels_off + n * sample;
    std::vector<uint8_t> o(total, 0);
    auto u32 = [&](size_t at, uint32_t v) { std::memcpy(o.data() + at, &v, 4); };
    auto u64 = [&](size_t at, uint64_t v) { std::memcpy(o.data() + at, &v, 8); };
    std::memcpy(o.data(), kPackedMagic, 8);
    u32(8, 1), u32(12, 96), u64(16, n), u32(24, 1), u32(28, 2), u32(32, 6), u32(36, 2);
    u64(40, 96), u64(48, classes_bytes), u64(56, index_off), u64(64, pixels_off), u64(72, n * sample), u64(80, total);
    size_t at = 96;
    for (const char* c : {"a", "b"}) u32(at, 1), o[at + 4] = static_cast<uint8_t>(c[0]), at += 5;
    const int64_t lab[] = {0, 1, 1, 0};
    for (uint64_t i = 0; i < n; ++i) u64(index_off + 16 * i, i * sample), u64(index_off + 16 * i + 8, lab[i]);
    std::memcpy(o.data() + pixels_off, images.data_ptr(), n * sample);
    u32(88, static_cast<uint32_t>(crc32(0, o.data() + pixels_off, static_cast<uInt>(n * sample))));
    u32(92, static_cast<uint32_t>(crc32(0, o.data() + 96, static_cast<uInt>(index_off + 16 * n - 96))));
    ember::testing::write_bytes(dir.file("old.epk"), o);
    PackedDataset p = read_packed(dir.file("old.epk"));
    CHECK(p.images.shape() == Shape{4, 1, 2, 6});
    CHECK(p.images.to_vector<uint8_t>() == images.to_vector<uint8_t>());
    CHECK(p.classes == std::vector<std::string>{"a", "b"});
  }
}

TEST_CASE("data messages: augmented batches are the same for 0 1 and 3 workers", "[data][loader]") {
  std::vector<uint8_t> px = pixels(30 * 1 * 8 * 8);
  Tensor images = empty({30, 1, 8, 8}, TensorOptions(DType::u8));
  std::memcpy(images.data_ptr(), px.data(), px.size());
  Tensor labels = arange(30, TensorOptions(DType::i64));
  auto ds = std::make_shared<InMemoryDataset>(images, labels);
  auto aug = std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(8, 8, 2), std::make_shared<RandomHorizontalFlip>(0.5)});
  auto epochs = [&](int workers) {
    DataLoader l(ds, DataLoaderOptions().batch_size(4).shuffle(true).seed(21).num_workers(workers).transform(aug));
    std::vector<std::vector<uint8_t>> out;
    for (int e = 0; e < 2; ++e)
      for (Batch& b : l) {
        out.push_back(b.images.to_vector<uint8_t>());
        std::vector<int64_t> idx = b.indices;
        out.emplace_back(idx.begin(), idx.end());
      }
    return out;
  };
  const auto zero = epochs(0);
  CHECK(zero == epochs(1));
  CHECK(zero == epochs(3));
  // and the augmentation did something: not the plain pixels
  DataLoader plain(ds, DataLoaderOptions().batch_size(4).shuffle(true).seed(21));
  CHECK(plain.begin()->images.to_vector<uint8_t>() != zero[0]);
}

TEST_CASE("data messages: what a program shows drops the source locations unless EMBER_ERROR_LOCATIONS=1",
          "[messages]") {
  const std::string what =
      "data/x.idx: not an IDX file (data/idx.cpp:201) (see the format (IDX)) (apps/mnist_train/trainer.cpp:70)";
  ::unsetenv("EMBER_ERROR_LOCATIONS");
  CHECK(ember::user_message(what) == "data/x.idx: not an IDX file (see the format (IDX))");
  CHECK(ember::user_message("plain (not a location: 12)") == "plain (not a location: 12)");
  CHECK(ember::user_message("three files differ:\n  a\n  b (data/idx.cpp:9)\n") == "three files differ: a b");
  ::setenv("EMBER_ERROR_LOCATIONS", "1", 1);
  CHECK(ember::user_message(what) == what);
  ::unsetenv("EMBER_ERROR_LOCATIONS");
  // what EMBER_CHECK throws carries one, and user_message removes it
  try {
    EMBER_CHECK(false, "bad value ", 3);
  } catch (const ember::Error& e) {
    CHECK(std::string(e.what()).find("tests/test_data_messages.cpp:") != std::string::npos);
    CHECK(ember::user_message(e.what()) == "bad value 3");
  }
}
