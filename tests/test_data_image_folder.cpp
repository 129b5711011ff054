// ImageFolder (PNG/JPEG/BMP, grey and RGB, resize, corrupt files) and the packed format
// (round trip, corruption, the ember_pack tool).
#include <catch2/catch.hpp>

#include <filesystem>

#include "tests/data_test_util.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

using namespace ember;
using namespace ember::data;
using ember::testing::error_of;
using ember::testing::TempDir;
using ember::testing::within;

namespace {

// An h x w image with c interleaved channels: value (y * 16 + x * 3 + k * 60) % 256.
std::vector<uint8_t> pattern(int h, int w, int c) {
  std::vector<uint8_t> p(static_cast<size_t>(h * w * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) p[static_cast<size_t>((y * w + x) * c + k)] = static_cast<uint8_t>((y * 16 + x * 3 + k * 60) % 256);
  return p;
}

void write_png(const std::string& path, int h, int w, int c) {
  REQUIRE(stbi_write_png(path.c_str(), w, h, c, pattern(h, w, c).data(), w * c) != 0);
}
void write_bmp(const std::string& path, int h, int w, int c) {
  REQUIRE(stbi_write_bmp(path.c_str(), w, h, c, pattern(h, w, c).data()) != 0);
}
void write_jpg(const std::string& path, int h, int w, int c) {
  REQUIRE(stbi_write_jpg(path.c_str(), w, h, c, pattern(h, w, c).data(), 95) != 0);
}

// root/bird/{a.png, b.bmp}, root/cat/{c.jpg, sub/d.PNG}, root/dog/e.png (grey), plus noise.
void make_tree(const TempDir& dir) {
  namespace fs = std::filesystem;
  for (const char* d : {"bird", "cat/sub", "dog"}) fs::create_directories(dir.file(d));
  write_png(dir.file("bird/a.png"), 6, 5, 3);
  write_bmp(dir.file("bird/b.bmp"), 6, 5, 3);
  write_jpg(dir.file("cat/c.jpg"), 6, 5, 3);
  write_png(dir.file("cat/sub/d.PNG"), 6, 5, 4);
  write_png(dir.file("dog/e.png"), 6, 5, 1);
  testing::write_bytes(dir.file("dog/notes.txt"), {'h', 'i'});
  testing::write_bytes(dir.file("README"), {'x'});
}

}  // namespace

TEST_CASE("image folder: classes, labels, decoding PNG/JPEG/BMP, grey and RGB", "[data][image_folder]") {
  TempDir dir;
  make_tree(dir);
  ImageFolder ds(dir.path());
  CHECK(ds.classes() == std::vector<std::string>{"bird", "cat", "dog"});
  REQUIRE(ds.size() == 5);
  std::vector<int64_t> labels;
  for (const auto& [path, label] : ds.samples()) labels.push_back(label);
  CHECK(labels == std::vector<int64_t>{0, 0, 1, 1, 2});
  CHECK_FALSE(ds.sample_shape().has_value());

  auto rgb = pattern(6, 5, 3);
  for (int64_t i : {0, 1}) {  // PNG and BMP are lossless
    Sample s = ds.get(i);
    CHECK(s.image.shape() == Shape{3, 6, 5});
    bool same = true;
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 5; ++x)
        for (int k = 0; k < 3; ++k) same = same && s.image.at(k, y, x) == rgb[static_cast<size_t>((y * 5 + x) * 3 + k)];
    CHECK(same);
  }
  Sample jpg = ds.get(2);  // lossy: close, not equal
  double err = 0;
  for (int y = 0; y < 6; ++y)
    for (int x = 0; x < 5; ++x)
      for (int k = 0; k < 3; ++k) err += std::abs(jpg.image.at(k, y, x) - rgb[static_cast<size_t>((y * 5 + x) * 3 + k)]);
  CHECK(err / 90 < 12);
  CHECK(ds.get(3).image.channels == 3);  // RGBA converted to RGB
  Sample grey = ds.get(4);                // grey converted to RGB: three equal planes
  CHECK(grey.image.channels == 3);
  CHECK(grey.image.at(0, 2, 3) == grey.image.at(2, 2, 3));
  CHECK(grey.image.at(0, 2, 3) == pattern(6, 5, 1)[2 * 5 + 3]);

  ImageFolder as_grey(dir.path(), ImageFolderOptions().channels(1).resize(4, 8));
  CHECK(*as_grey.sample_shape() == Shape{1, 4, 8});
  CHECK(as_grey.get(0).image.shape() == Shape{1, 4, 8});
  ImageFolder stored(dir.path(), ImageFolderOptions().channels(0));
  CHECK(stored.get(3).image.channels == 4);
  CHECK(stored.get(4).image.channels == 1);

  // through the loader, resized so batches have one shape
  auto shared = std::make_shared<ImageFolder>(dir.path(), ImageFolderOptions().resize(8, 8));
  within(60, "image folder loader", [&] {
    DataLoader loader(shared, DataLoaderOptions().batch_size(2).num_workers(2));
    int64_t n = 0;
    for (Batch& b : loader) {
      CHECK(b.images.shape() == Shape{b.size(), 3, 8, 8});
      n += b.size();
    }
    CHECK(n == 5);
  });
}

TEST_CASE("image folder: unreadable and undecodable files name the path and the reason", "[data][image_folder][bad_input]") {
  TempDir dir;
  make_tree(dir);
  write_png(dir.file("dog/broken.png"), 6, 5, 3);  // then cut in the middle of its data
  {
    std::vector<uint8_t> png = read_file(dir.file("dog/broken.png"));
    png.resize(png.size() / 2);
    testing::write_bytes(dir.file("dog/broken.png"), png);
  }
  testing::write_bytes(dir.file("dog/junk.bmp"), {'B', 'M', 1, 2, 3});
  testing::write_bytes(dir.file("cat/empty.jpg"), {});
  ImageFolder ds(dir.path());
  // sorted: bird a b | cat c empty.jpg sub/d | dog broken e junk
  CHECK(ds.samples()[3].first == dir.file("cat/empty.jpg"));
  CHECK_THAT(error_of([&] { ds.get(3); }), Catch::Contains("cannot decode '" + dir.file("cat/empty.jpg") + "': the file is empty"));
  std::string cut = error_of([&] { ds.get(5); });
  CHECK_THAT(cut, Catch::StartsWith("cannot decode '" + dir.file("dog/broken.png") + "': "));
  CHECK(cut.size() > ("cannot decode '" + dir.file("dog/broken.png") + "': ").size() + 5);  // with stb's reason
  CHECK_THAT(error_of([&] { ds.get(7); }), Catch::Contains("cannot decode '" + dir.file("dog/junk.bmp") + "'"));
  std::filesystem::remove(dir.file("bird/b.bmp"));
  CHECK_THAT(error_of([&] { ds.get(1); }),
             Catch::Contains("cannot open '" + dir.file("bird/b.bmp") + "'") && Catch::Contains("No such file"));
  // in a loader: the error names the sample index and the file
  auto shared = std::make_shared<ImageFolder>(dir.path(), ImageFolderOptions().resize(4, 4));
  within(60, "corrupt image in loader", [&] {
    DataLoader loader(shared, DataLoaderOptions().batch_size(2).num_workers(2));
    std::string msg = error_of([&] {
      for (Batch& b : loader) (void)b;
    });
    CHECK_THAT(msg, Catch::Contains("DataLoader: sample 2 (batch 1") && Catch::Contains("empty.jpg"));  // b.bmp is gone
  });
  // layout errors
  TempDir flat;
  write_png(flat.file("a.png"), 2, 2, 1);
  CHECK_THAT(error_of([&] { ImageFolder x(flat.path()); }), Catch::Contains("no class subdirectories"));
  std::filesystem::create_directories(flat.file("empty_class"));
  CHECK_THAT(error_of([&] { ImageFolder x(flat.path()); }), Catch::Contains("class 'empty_class'") &&
                                                                  Catch::Contains("has no image files"));
  CHECK_THAT(error_of([&] { ImageFolder x(flat.file("missing")); }), Catch::Contains("is not a directory"));
}

TEST_CASE("packed: round trip, one read, corruption detected", "[data][packed]") {
  TempDir dir;
  Tensor images = arange(7 * 3 * 4 * 5, TensorOptions(DType::u8)).view({7, 3, 4, 5});
  Tensor labels = tensor_i64({0, 1, 2, 0, 1, 2, 2}, {7});
  InMemoryDataset ds(images, labels, {"x", "yy", "zzz"});
  ds.save(dir.file("p.epk"));
  auto back = InMemoryDataset::load(dir.file("p.epk"));
  CHECK(back->classes() == ds.classes());
  CHECK(back->images().shape() == Shape{7, 3, 4, 5});
  CHECK(back->images().to_vector<uint8_t>() == images.to_vector<uint8_t>());
  CHECK(back->labels().to_vector<int64_t>() == labels.to_vector<int64_t>());
  CHECK(reinterpret_cast<uintptr_t>(back->images().data_ptr()) % 64 == 0);

  std::vector<uint8_t> good = read_file(dir.file("p.epk"));
  auto corrupt = [&](size_t at, uint8_t x) {
    std::vector<uint8_t> b = good;
    b[at] ^= x;
    testing::write_bytes(dir.file("bad.epk"), b);
    return error_of([&] { InMemoryDataset::load(dir.file("bad.epk")); });
  };
  CHECK_THAT(corrupt(0, 1), Catch::Contains("not an ember packed dataset"));
  CHECK_THAT(corrupt(8, 2), Catch::Contains("version 3"));
  CHECK_THAT(corrupt(16, 1), Catch::Contains("pixel section holds"));  // count 7 -> 6
  CHECK_THAT(corrupt(good.size() - 1, 0x40), Catch::Contains("CRC mismatch in the pixel data"));
  CHECK_THAT(corrupt(100, 0x01), Catch::Contains("CRC mismatch in the classes/index"));
  std::vector<uint8_t> cut(good.begin(), good.end() - 10);
  testing::write_bytes(dir.file("cut.epk"), cut);
  CHECK_THAT(error_of([&] { InMemoryDataset::load(dir.file("cut.epk")); }),
             Catch::Contains("the header says the file has") && Catch::Contains("(truncated)"));
  testing::write_bytes(dir.file("tiny.epk"), {1, 2, 3});
  CHECK_THAT(error_of([&] { InMemoryDataset::load(dir.file("tiny.epk")); }), Catch::Contains("expected at least 96"));
}

TEST_CASE("packed: bin/ember_pack converts an ImageFolder and an IDX set", "[data][packed]") {
  const std::string tool = std::string(EMBER_BINARY_DIR) + "/bin/ember_pack";
  if (!std::filesystem::exists(tool)) {
    WARN("SKIPPED: " << tool << " is not built (EMBER_BUILD_APPS=OFF?)");
    return;
  }
  TempDir dir;
  namespace fs = std::filesystem;
  for (const char* d : {"folder/a", "folder/b"}) fs::create_directories(dir.file(d));
  write_png(dir.file("folder/a/1.png"), 10, 12, 3);
  write_png(dir.file("folder/b/2.png"), 6, 5, 3);
  write_bmp(dir.file("folder/b/3.bmp"), 6, 5, 1);
  std::string out = dir.file("folder.epk"), log = dir.file("log.txt");
  int rc = std::system((tool + " " + dir.file("folder") + " " + out + " --resize 8x8 > " + log + " 2>&1").c_str());
  CHECK(rc == 0);
  auto packed = InMemoryDataset::load(out);
  CHECK(packed->images().shape() == Shape{3, 3, 8, 8});
  CHECK(packed->labels().to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  CHECK(packed->classes() == std::vector<std::string>{"a", "b"});
  // mixed sizes without --resize: a clear failure
  rc = std::system((tool + " " + dir.file("folder") + " " + dir.file("x.epk") + " > " + log + " 2>&1").c_str());
  CHECK(rc != 0);
  std::vector<uint8_t> text = read_file(log);
  CHECK_THAT(std::string(text.begin(), text.end()), Catch::Contains("--resize"));
  // an IDX directory
  testing::write_mnist_pair(dir.file("t10k-images-idx3-ubyte.gz"), dir.file("t10k-labels-idx1-ubyte.gz"), 30, 4, 4, true);
  rc = std::system((tool + " " + dir.path() + " " + dir.file("m.epk") + " --split test > " + log + " 2>&1").c_str());
  CHECK(rc == 0);
  auto m = InMemoryDataset::load(dir.file("m.epk"));
  auto direct = load_mnist(dir.path(), Split::test);
  CHECK(m->images().to_vector<uint8_t>() == direct->images().to_vector<uint8_t>());
  CHECK(m->labels().to_vector<int64_t>() == direct->labels().to_vector<int64_t>());
}
