// ImageFolder (PNG/JPEG/BMP, grey and RGB, resize, corrupt files) and the packed format
// (round trip, corruption, the ember_pack tool).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <tuple>

#include "tests/data_test_util.h"

#include "tests/stb_image_write_util.h"

using namespace ember;
using namespace ember::data;
using namespace ember::testing;

namespace {

// An h x w image with c interleaved channels: value (y * 16 + x * 3 + k * 60) % 256.
std::vector<uint8_t> pattern(int h, int w, int c) {
  std::vector<uint8_t> p(static_cast<size_t>(h * w * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        p[static_cast<size_t>((y * w + x) * c + k)] = static_cast<uint8_t>((y * 16 + x * 3 + k * 60) % 256);
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

// An error's message as a program shows it (without the source locations).
std::string message_of(const std::function<void()>& fn) { return ember::user_message(error_of(fn)); }

// The same images as bytes in memory, for the tests that corrupt them.
void append_bytes(void* context, void* data, int n) {
  auto* v = static_cast<std::vector<uint8_t>*>(context);
  v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + n);
}
std::vector<uint8_t> png_bytes(int h, int w, int c) {
  std::vector<uint8_t> b;
  REQUIRE(stbi_write_png_to_func(append_bytes, &b, w, h, c, pattern(h, w, c).data(), w * c) != 0);
  return b;
}
std::vector<uint8_t> bmp_bytes(int h, int w, int c) {
  std::vector<uint8_t> b;
  REQUIRE(stbi_write_bmp_to_func(append_bytes, &b, w, h, c, pattern(h, w, c).data()) != 0);
  return b;
}
std::vector<uint8_t> jpg_bytes(int h, int w, int c) {
  std::vector<uint8_t> b;
  REQUIRE(stbi_write_jpg_to_func(append_bytes, &b, w, h, c, pattern(h, w, c).data(), 95) != 0);
  return b;
}

uint32_t get_be32(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | b[at + 3];
}
void put_be32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
// Offset of the first chunk of `type` in a PNG.
size_t png_chunk(const std::vector<uint8_t>& png, const char* type) {
  for (size_t at = 8; at + 12 <= png.size(); at += 12 + get_be32(png, at))
    if (std::memcmp(png.data() + at + 4, type, 4) == 0) return at;
  FAIL("no " << type << " chunk");
  return 0;
}
// A chunk's CRC made right again after its data was edited, so only the fault under test remains.
void fix_crc(std::vector<uint8_t>& png, size_t chunk) {
  const uint32_t len = get_be32(png, chunk);
  put_be32(png, chunk + 8 + len, static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), png.data() + chunk + 4, len + 4)));
}

// A greyscale PNG written here (stb_image_write writes neither Adam7 nor 16 bits): pixel (x, y) is
// (x * 7 + y * 13) % 256, as 8 bits or repeated in both bytes of 16.
std::vector<uint8_t> grey_png(uint32_t w, uint32_t h, int depth, bool interlace) {
  std::vector<uint8_t> raw;
  auto pass = [&](uint32_t x0, uint32_t y0, uint32_t dx, uint32_t dy) {
    for (uint32_t y = y0; y < h && x0 < w; y += dy) {
      raw.push_back(0);  // filter: none
      for (uint32_t x = x0; x < w; x += dx)
        for (int k = 0; k < depth / 8; ++k) raw.push_back(static_cast<uint8_t>((x * 7 + y * 13) % 256));
    }
  };
  if (interlace)
    for (auto [x0, y0, dx, dy] : std::vector<std::array<uint32_t, 4>>{
             {0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}})
      pass(x0, y0, dx, dy);
  else pass(0, 0, 1, 1);
  std::vector<uint8_t> z(compressBound(static_cast<uLong>(raw.size())));
  uLongf zn = z.size();
  REQUIRE(compress(z.data(), &zn, raw.data(), static_cast<uLong>(raw.size())) == Z_OK);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    const size_t at = png.size();
    png.resize(at + 12 + data.size());
    put_be32(png, at, static_cast<uint32_t>(data.size()));
    std::memcpy(png.data() + at + 4, type, 4);
    std::copy(data.begin(), data.end(), png.begin() + static_cast<std::ptrdiff_t>(at + 8));
    fix_crc(png, at);
  };
  std::vector<uint8_t> ihdr(13, 0);
  put_be32(ihdr, 0, w);
  put_be32(ihdr, 4, h);
  ihdr[8] = static_cast<uint8_t>(depth);
  ihdr[12] = interlace ? 1 : 0;
  chunk("IHDR", ihdr);
  chunk("IDAT", std::vector<uint8_t>(z.begin(), z.begin() + static_cast<std::ptrdiff_t>(zn)));
  chunk("IEND", {});
  return png;
}

// root/bird/{a.png, b.bmp}, root/cat/{c.jpg, f.PNG}, root/dog/e.png (grey), plus noise (a sub-folder
// without images is not a class of its own).
void make_tree(const TempDir& dir) {
  namespace fs = std::filesystem;
  for (const char* d : {"bird", "cat/sub", "dog"}) fs::create_directories(dir.file(d));
  write_png(dir.file("bird/a.png"), 6, 5, 3);
  write_bmp(dir.file("bird/b.bmp"), 6, 5, 3);
  write_jpg(dir.file("cat/c.jpg"), 6, 5, 3);
  write_png(dir.file("cat/f.PNG"), 6, 5, 4);
  testing::write_bytes(dir.file("cat/sub/notes.txt"), {'h', 'i'});
  write_png(dir.file("dog/e.png"), 6, 5, 1);
  testing::write_bytes(dir.file("dog/notes.txt"), {'h', 'i'});
  testing::write_bytes(dir.file("README"), {'x'});
}

// bin/ember_pack, or "" (after a warning) when it is not built.
std::string ember_pack_tool() {
  const std::string tool = std::string(EMBER_BINARY_DIR) + "/bin/ember_pack";
  if (std::filesystem::exists(tool)) return tool;
  WARN("SKIPPED: " << tool << " is not built (EMBER_BUILD_APPS=OFF?)");
  return "";
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
      for (int k = 0; k < 3; ++k)
        err += std::abs(jpg.image.at(k, y, x) - rgb[static_cast<size_t>((y * 5 + x) * 3 + k)]);
  CHECK(err / 90 < 12);
  CHECK(ds.get(3).image.channels == 3);  // RGBA converted to RGB
  Sample grey = ds.get(4);               // grey converted to RGB: three equal planes
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

TEST_CASE("image folder: unreadable and undecodable files name the path and the reason",
          "[data][image_folder][bad_input]") {
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
  // sorted: bird a b | cat c empty.jpg f | dog broken e junk
  CHECK(ds.samples()[3].first == dir.file("cat/empty.jpg"));
  CHECK_THAT(error_of([&] { ds.get(3); }),
             Catch::Contains("cannot decode '" + dir.file("cat/empty.jpg") + "': the file is empty"));
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
  CHECK_THAT(error_of([&] { ImageFolder x(flat.path()); }),
             Catch::Contains("class 'empty_class'") && Catch::Contains("has no image files"));
  CHECK_THAT(error_of([&] { ImageFolder x(flat.file("missing")); }), Catch::Contains("is not a directory"));
}

TEST_CASE(
    "image decode: a bad PNG chunk CRC, zlib checksum or deflate stream is an error naming the file and the fault",
    "[data][image_folder][bad_input]") {
  const std::vector<uint8_t> good = png_bytes(30, 40, 3);
  REQUIRE(decode_image(good, "good.png").shape() == Shape{3, 30, 40});
  const size_t ihdr = png_chunk(good, "IHDR"), idat = png_chunk(good, "IDAT");
  const uint32_t idat_len = get_be32(good, idat);
  auto error = [&](const std::function<void(std::vector<uint8_t>&)>& edit) {
    std::vector<uint8_t> b = good;
    edit(b);
    return message_of([&] { decode_image(b, "x.png"); });
  };
  // stb_image skips CRCs: each of these decoded before, into what the edited bytes said
  CHECK_THAT(error([&](auto& b) { b[idat + 8 + idat_len] ^= 0x01; }),  // the stored CRC
             Catch::StartsWith("cannot decode 'x.png': bad CRC in chunk IDAT at offset " + std::to_string(idat)));
  CHECK_THAT(error([&](auto& b) { b[idat + 8 + idat_len / 2] ^= 0x10; }),  // the data under it
             Catch::StartsWith("cannot decode 'x.png': bad CRC in chunk IDAT"));
  CHECK_THAT(error([&](auto& b) { b[ihdr + 8 + 2] ^= 0x01; }),  // a width of 296
             Catch::StartsWith("cannot decode 'x.png': bad CRC in chunk IHDR at offset 8"));
  // with right CRCs: the zlib stream itself (stb_image checks no adler32 either)
  CHECK_THAT(error([&](auto& b) {
               b[idat + 8 + idat_len - 1] ^= 0x01;  // the adler32's last byte
               fix_crc(b, idat);
             }),
             Catch::StartsWith("cannot decode 'x.png': zlib checksum mismatch"));
  CHECK_THAT(error([&](auto& b) {
               b[idat + 8 + 2] |= 0x06;  // the first deflate block's type: 3, which deflate reserves
               fix_crc(b, idat);
             }),
             Catch::StartsWith("cannot decode 'x.png': corrupt zlib/deflate data in IDAT") &&
                 Catch::Contains("invalid block type"));
  CHECK_THAT(error([&](auto& b) {
               b[idat + 8] ^= 0x01;  // the zlib header
               fix_crc(b, idat);
             }),
             Catch::Contains("corrupt zlib/deflate data in IDAT") && Catch::Contains("incorrect header check"));
  // what the checks must let through: Adam7, 16 bits, sizes around the checker's 64 KiB inflate buffer
  for (auto [w, h, depth, interlace] : std::vector<std::tuple<uint32_t, uint32_t, int, bool>>{{1, 1, 8, true},
                                                                                              {3, 2, 8, true},
                                                                                              {13, 11, 16, true},
                                                                                              {255, 256, 8, false},
                                                                                              {511, 128, 8, false},
                                                                                              {255, 512, 8, false},
                                                                                              {127, 256, 16, false},
                                                                                              {300, 200, 8, true}}) {
    INFO(w << " x " << h << ", " << depth << " bits" << (interlace ? ", interlaced" : ""));
    Image img = decode_image(grey_png(w, h, depth, interlace), "ok.png");
    REQUIRE(img.shape() == Shape{1, h, w});
    bool same = true;
    for (uint32_t y = 0; y < h; ++y)
      for (uint32_t x = 0; x < w; ++x) same = same && img.at(0, y, x) == (x * 7 + y * 13) % 256;
    CHECK(same);
  }
  CHECK(message_of([&] {
          std::vector<uint8_t> b = grey_png(13, 11, 8, false);
          b[8 + 8 + 12] = 1;  // claims Adam7, whose 7 passes have more rows (and filter bytes) than 11
          fix_crc(b, 8);
          decode_image(b, "x.png");
        }) ==
        "cannot decode 'x.png': the image data decompresses to 154 bytes, width 13 x height 11 needs 165: the file "
        "is truncated or corrupt");
  // through an ImageFolder: the error names the path
  TempDir dir;
  std::filesystem::create_directories(dir.file("c"));
  std::vector<uint8_t> bad = good;
  bad[idat + 8 + idat_len - 2] ^= 0x40;
  fix_crc(bad, idat);
  testing::write_bytes(dir.file("c/bad.png"), bad);
  ImageFolder folder(dir.path());
  CHECK_THAT(message_of([&] { folder.get(0); }),
             Catch::StartsWith("cannot decode '" + dir.file("c/bad.png") + "': zlib checksum mismatch"));
}

TEST_CASE("image decode: a truncated PNG, BMP or JPEG is an error naming the file and where it ends",
          "[data][image_folder][bad_input]") {
  auto cut = [](std::vector<uint8_t> b, size_t n) {
    b.resize(n);
    return b;
  };
  // BMP: stb_image read the missing rows as zeros and returned them
  const std::vector<uint8_t> bmp = bmp_bytes(30, 40, 3);  // 54 header bytes, 30 rows of 120
  REQUIRE(decode_image(bmp, "good.bmp").shape() == Shape{3, 30, 40});
  CHECK(message_of([&] { decode_image(cut(bmp, bmp.size() / 2), "x.bmp"); }) ==
        "cannot decode 'x.bmp': truncated: width 40 x height 30 at 24 bits per pixel needs pixel bytes [54, 3654), "
        "the file ends at " +
            std::to_string(bmp.size() / 2));
  CHECK(message_of([&] {
          decode_image(cut(bmp, bmp.size() - 1), "x.bmp");
        }).starts_with("cannot decode 'x.bmp': truncated"));
  CHECK_THAT(message_of([&] { decode_image(cut(bmp, 30), "x.bmp"); }),
             Catch::StartsWith(
                 "cannot decode 'x.bmp': truncated: the BMP info header needs bytes [14, 54), the file ends at 30"));
  // JPEG: cut in the scan, just before EOI, in a header segment
  const std::vector<uint8_t> jpg = jpg_bytes(30, 40, 3);
  REQUIRE(decode_image(jpg, "good.jpg").shape() == Shape{3, 30, 40});
  for (size_t n : {jpg.size() * 3 / 4, jpg.size() - 2}) {
    INFO("cut to " << n << " of " << jpg.size() << " bytes");
    std::string e = message_of([&] { decode_image(cut(jpg, n), "x.jpg"); });
    CHECK_THAT(e,
               Catch::StartsWith("cannot decode 'x.jpg': truncated: the entropy-coded data of the scan at offset ") &&
                   Catch::EndsWith("runs to the end of the file (" + std::to_string(n) +
                                   " bytes) without reaching the EOI marker"));
  }
  CHECK(message_of([&] { decode_image(cut(jpg, 30), "x.jpg"); }) ==
        "cannot decode 'x.jpg': truncated: segment 0xFFDB at offset 20 claims 132 bytes, only 8 remain");
  std::vector<uint8_t> padded = jpg;  // padding between header segments: stb_image skips it, so do the checks
  REQUIRE((padded[20] == 0xFF && padded[21] == 0xDB));
  padded.insert(padded.begin() + 20, {0, 0, 0});
  CHECK(decode_image(padded, "padded.jpg").shape() == Shape{3, 30, 40});
  // PNG: cut in IDAT, and at a chunk boundary before IEND
  const std::vector<uint8_t> png = png_bytes(30, 40, 3);
  const size_t idat = png_chunk(png, "IDAT"), iend = png_chunk(png, "IEND");
  CHECK_THAT(
      message_of([&] { decode_image(cut(png, idat + 20), "x.png"); }),
      Catch::StartsWith("cannot decode 'x.png': truncated: chunk IDAT at offset " + std::to_string(idat) + " claims"));
  CHECK(message_of([&] { decode_image(cut(png, iend), "x.png"); }) ==
        "cannot decode 'x.png': truncated: the file ends at offset " + std::to_string(iend) + " without an IEND chunk");
}

TEST_CASE("image decode: a header claiming more pixels than the file holds or than the limit is refused first",
          "[data][image_folder][bad_input]") {
  // PNG: IHDR edited (with its CRC made right)
  const std::vector<uint8_t> png = png_bytes(30, 40, 3);
  auto png_claiming = [&](uint32_t w, uint32_t h) {
    std::vector<uint8_t> b = png;
    put_be32(b, 16, w);
    put_be32(b, 20, h);
    fix_crc(b, 8);
    return message_of([&] { decode_image(b, "x.png"); });
  };
  CHECK_THAT(
      png_claiming(20000, 20000),
      Catch::StartsWith("cannot decode 'x.png': the PNG header claims width 20000 x height 20000 = 400000000 pixels, "
                        "more than the limit of 268435456 pixels"));
  CHECK_THAT(png_claiming(40000, 2), Catch::Contains("claims width 40000 x height 2, more than the 32768 per side"));
  CHECK_THAT(png_claiming(0, 30), Catch::Contains("claims width 0 x height 30 (an empty image)"));
  const size_t idat_len = get_be32(png, png_chunk(png, "IDAT"));
  CHECK(png_claiming(4000, 4000) ==
        "cannot decode 'x.png': the header claims width 4000 x height 4000 (48004000 bytes of image data) but its " +
            std::to_string(idat_len) + " bytes of compressed data can hold at most " + std::to_string(idat_len * 1032) +
            ": the file is truncated or corrupt");
  CHECK_THAT(png_claiming(40, 31), Catch::Contains("decompresses to 3630 bytes, width 40 x height 31 needs 3751"));
  // BMP: the height edited (the pixel rows would lie past the end)
  std::vector<uint8_t> bmp = bmp_bytes(30, 40, 3);
  bmp[22] = 0x30, bmp[23] = 0x75;  // 30000 rows
  CHECK_THAT(message_of([&] { decode_image(bmp, "x.bmp"); }),
             Catch::StartsWith(
                 "cannot decode 'x.bmp': truncated: width 40 x height 30000 at 24 bits per pixel needs pixel bytes"));
  // JPEG: the frame header edited to 8000 x 8000; stb_image decoded the missing blocks as zeros
  std::vector<uint8_t> jpg = jpg_bytes(30, 40, 3);
  const uint8_t sof0[2] = {0xFF, 0xC0};
  const size_t sof = static_cast<size_t>(std::search(jpg.begin(), jpg.end(), sof0, sof0 + 2) - jpg.begin());
  REQUIRE(sof + 9 < jpg.size());
  jpg[sof + 5] = 0x1F, jpg[sof + 6] = 0x40, jpg[sof + 7] = 0x1F, jpg[sof + 8] = 0x40;
  CHECK_THAT(
      message_of([&] { decode_image(jpg, "x.jpg"); }),
      Catch::StartsWith("cannot decode 'x.jpg': the JPEG header claims width 8000 x height 8000 (1000000 8x8 blocks "
                        "in its smallest component) but the file's"));
  // the limit is a parameter (ImageFolderOptions::max_pixels, ember_pack --max-pixels)
  CHECK(decode_image(png, "x.png", 0, 1200).shape() == Shape{3, 30, 40});
  CHECK(message_of([&] { decode_image(png, "x.png", 0, 1199); }) ==
        "cannot decode 'x.png': the PNG header claims width 40 x height 30 = 1200 pixels, more than the limit of 1199 "
        "pixels (ImageFolderOptions::max_pixels, ember_pack --max-pixels)");
  CHECK_THAT(message_of([&] { decode_image(jpg_bytes(30, 40, 3), "x.jpg", 0, 1000); }),
             Catch::Contains("limit of 1000 pixels"));
  CHECK_THAT(message_of([&] { decode_image(bmp_bytes(30, 40, 3), "x.bmp", 0, 1000); }),
             Catch::Contains("limit of 1000 pixels"));
  TempDir dir;
  std::filesystem::create_directories(dir.file("c"));
  testing::write_bytes(dir.file("c/a.png"), png);
  CHECK_THAT(message_of([&] { ImageFolder(dir.path(), ImageFolderOptions().max_pixels(1000)).get(0); }),
             Catch::Contains("cannot decode '" + dir.file("c/a.png") + "'") && Catch::Contains("limit of 1000 pixels"));
  CHECK_THAT(message_of([&] { ImageFolder(dir.path(), ImageFolderOptions().max_pixels(0)); }),
             Catch::Contains("max_pixels must be in [1, 1073741824]; got 0"));
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
  const std::string tool = ember_pack_tool();
  if (tool.empty()) return;
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
  fs::create_directories(dir.file("idx"));
  testing::write_mnist_pair(dir.file("idx/t10k-images-idx3-ubyte.gz"), dir.file("idx/t10k-labels-idx1-ubyte.gz"), 30, 4,
                            4, true);
  rc = std::system(
      (tool + " " + dir.file("idx") + " " + dir.file("m.epk") + " --split test > " + log + " 2>&1").c_str());
  CHECK(rc == 0);
  auto m = InMemoryDataset::load(dir.file("m.epk"));
  auto direct = load_mnist(dir.file("idx"), Split::test);
  CHECK(m->images().to_vector<uint8_t>() == direct->images().to_vector<uint8_t>());
  CHECK(m->labels().to_vector<int64_t>() == direct->labels().to_vector<int64_t>());
}

TEST_CASE("packed: ember_pack fails on the first bad image and leaves no file, and --skip-bad-images leaves it out",
          "[data][packed][bad_input]") {
  const std::string tool = ember_pack_tool();
  if (tool.empty()) return;
  namespace fs = std::filesystem;
  TempDir dir;
  const std::string out_log = dir.file("out.txt"), err_log = dir.file("err.txt");
  auto run = [&](const std::string& args) {
    int rc = std::system((tool + " " + args + " > " + out_log + " 2> " + err_log).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  auto text = [](const std::string& path) {
    std::vector<uint8_t> b = read_file(path);
    return std::string(b.begin(), b.end());
  };
  // a/{1,2}.png good; b/3.bmp cut short, b/4.png with a bad CRC, b/5.png good
  for (const char* d : {"in/a", "in/b", "out"}) fs::create_directories(dir.file(d));
  write_png(dir.file("in/a/1.png"), 6, 5, 3);
  write_png(dir.file("in/a/2.png"), 6, 5, 3);
  std::vector<uint8_t> bmp = bmp_bytes(6, 5, 3);
  bmp.resize(bmp.size() - 20);
  testing::write_bytes(dir.file("in/b/3.bmp"), bmp);
  std::vector<uint8_t> png = png_bytes(6, 5, 3);
  png[png_chunk(png, "IDAT") + 9] ^= 0x08;
  testing::write_bytes(dir.file("in/b/4.png"), png);
  write_png(dir.file("in/b/5.png"), 6, 5, 3);

  // without the flag: the first bad image (in folder order) fails the pack; nothing is written
  const std::string out = dir.file("out/p.epk");
  CHECK(run(dir.file("in") + " " + out + " --workers 1") == 1);
  std::string err = text(err_log);
  CHECK(err == "ember_pack: error: cannot decode '" + dir.file("in/b/3.bmp") +
                   "': truncated: width 5 x height 6 at 24 " +
                   "bits per pixel needs pixel bytes [54, 149), the file ends at 130 (--skip-bad-images leaves such "
                   "images out)\n");
  CHECK(err.find("--resize") == std::string::npos);  // not what is wrong here
  CHECK(!fs::exists(out));
  CHECK(fs::is_empty(dir.file("out")));  // no temporary file either
  // an earlier pack stays as it was
  testing::write_bytes(out, {'o', 'l', 'd'});
  CHECK(run(dir.file("in") + " " + out + " --workers 3") == 1);
  CHECK(text(out) == "old");
  CHECK(std::vector<std::string>{fs::directory_iterator(dir.file("out"))->path().filename().string()} ==
        std::vector<std::string>{"p.epk"});
  fs::remove(out);

  // with it: the good ones are packed, the bad ones counted and named with the reason
  CHECK(run(dir.file("in") + " " + out + " --skip-bad-images --workers 2") == 0);
  auto packed = InMemoryDataset::load(out);
  CHECK(packed->images().shape() == Shape{3, 3, 6, 5});
  CHECK(packed->labels().to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1});
  CHECK(packed->classes() == std::vector<std::string>{"a", "b"});
  auto direct = load_image(dir.file("in/b/5.png"), 3);
  std::vector<uint8_t> last = packed->images().to_vector<uint8_t>();
  CHECK(std::vector<uint8_t>(last.end() - 90, last.end()) == direct.pixels);
  CHECK_THAT(text(out_log),
             Catch::Contains("3 samples of [3, 6, 5]") && Catch::Contains("(skipped 2 bad images of 5)"));
  auto err_lines = [&] {
    std::vector<std::string> lines;
    std::istringstream in(text(err_log));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  };
  std::vector<std::string> lines = err_lines();
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "ember_pack: warning: skipped 2 of 5 images that could not be decoded (--skip-bad-images):");
  CHECK(lines[1] == "ember_pack: warning:   cannot decode '" + dir.file("in/b/3.bmp") +
                        "': truncated: width 5 x height 6 " +
                        "at 24 bits per pixel needs pixel bytes [54, 149), the file ends at 130");
  CHECK_THAT(lines[2], Catch::StartsWith("ember_pack: warning:   cannot decode '" + dir.file("in/b/4.png") +
                                         "': bad CRC in chunk IDAT at offset 33 (stored 0x"));

  // many bad ones: the first five by name, then how many more
  for (int i = 0; i < 6; ++i) testing::write_bytes(dir.file("in/b/x" + std::to_string(i) + ".bmp"), bmp);
  CHECK(run(dir.file("in") + " " + out + " --skip-bad-images") == 0);
  lines = err_lines();
  REQUIRE(lines.size() == 7);
  CHECK(lines[0] ==
        "ember_pack: warning: skipped 8 of 11 images that could not be decoded (--skip-bad-images); the first ones:");
  CHECK_THAT(lines[5], Catch::Contains("x2.bmp"));
  CHECK(lines[6] == "ember_pack: warning:   ... and 3 more");
  CHECK(InMemoryDataset::load(out)->size() == 3);
  // all bad: an error, no file
  fs::remove(out);
  for (const char* f : {"in/a/1.png", "in/a/2.png", "in/b/5.png"}) testing::write_bytes(dir.file(f), bmp);
  CHECK(run(dir.file("in") + " " + out + " --skip-bad-images") == 1);
  CHECK(text(err_log) == "ember_pack: error: all 11 images in " + dir.file("in") + " are bad\n");
  CHECK(fs::is_empty(dir.file("out")));
}

TEST_CASE("packed: ember_pack's --resize hint comes only with the error about image sizes", "[data][packed]") {
  const std::string tool = ember_pack_tool();
  if (tool.empty()) return;
  namespace fs = std::filesystem;
  TempDir dir;
  const std::string err_log = dir.file("err.txt");
  auto run = [&](const std::string& args) {
    int rc = std::system((tool + " " + args + " > /dev/null 2> " + err_log).c_str());
    std::vector<uint8_t> b = read_file(err_log);
    return std::make_pair(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, std::string(b.begin(), b.end()));
  };
  for (const char* d : {"in/a", "in/b"}) fs::create_directories(dir.file(d));
  write_png(dir.file("in/a/1.png"), 6, 5, 3);
  write_png(dir.file("in/a/2.png"), 6, 5, 1);  // converted to 3 channels: the same size
  write_png(dir.file("in/b/3.png"), 7, 5, 3);
  auto [rc, err] = run(dir.file("in") + " " + dir.file("x.epk"));
  CHECK(rc == 1);
  CHECK(err == "ember_pack: error: images differ in size: '" + dir.file("in/a/1.png") + "' is 6x5 but '" +
                   dir.file("in/b/3.png") + "' is 7x5 (HxW); a packed dataset needs one size: pass --resize HxW\n");
  CHECK(!fs::exists(dir.file("x.epk")));
  write_png(dir.file("in/b/3.png"), 6, 5, 3);
  CHECK(run(dir.file("in") + " " + dir.file("x.epk")).first == 0);
  // other errors about a folder: no hint
  testing::write_bytes(dir.file("in/b/4.png"), {1, 2, 3});
  std::tie(rc, err) = run(dir.file("in") + " " + dir.file("y.epk"));
  CHECK(rc == 1);
  CHECK_THAT(err, Catch::StartsWith("ember_pack: error: cannot decode '" + dir.file("in/b/4.png") + "'"));
  CHECK(err.find("--resize") == std::string::npos);
  fs::create_directories(dir.file("in/c"));
  std::tie(rc, err) = run(dir.file("in") + " " + dir.file("y.epk"));
  CHECK(rc == 1);
  CHECK_THAT(err, Catch::Contains("class 'c'") && Catch::Contains("has no image files"));
  CHECK(err.find("--resize") == std::string::npos);
  CHECK(!fs::exists(dir.file("y.epk")));
}

namespace {

// root/a/1.png and root/b/1.png: two classes of one 4x4 grey image each.
void two_classes(const std::string& root) {
  for (const char* c : {"a", "b"}) {
    std::filesystem::create_directories(root + "/" + c);
    write_png(root + "/" + c + "/1.png", 4, 4, 1);
  }
}

// Runs ember_pack with `args`: {exit code, stdout, stderr}.
std::tuple<int, std::string, std::string> run_pack(const std::string& tool, const TempDir& dir,
                                                   const std::string& args) {
  const std::string out = dir.file("pack.out"), err = dir.file("pack.err");
  const int rc = std::system((tool + " " + args + " > " + out + " 2> " + err).c_str());
  auto text = [](const std::string& path) {
    std::vector<uint8_t> b = read_file(path);
    return std::string(b.begin(), b.end());
  };
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, text(out), text(err)};
}

}  // namespace

TEST_CASE("image folder: train/valid/test split folders are found in any case, never taken for classes",
          "[data][image_folder]") {
  TempDir dir;
  const std::string full = dir.file("full");
  for (const char* split : {"train", "valid", "test"}) two_classes(full + "/" + split);
  std::optional<SplitFolders> f = find_split_folders(full);
  REQUIRE(f.has_value());
  CHECK(f->train == full + "/train");
  CHECK(f->val == full + "/valid");
  CHECK(f->test == full + "/test");
  for (const char* val : {"val", "validation", "dev", "Valid"}) {
    const std::string root = dir.file(std::string("with_") + val);
    two_classes(root + "/train");
    two_classes(root + "/" + val);
    f = find_split_folders(root);
    REQUIRE(f.has_value());
    CHECK(f->val == root + "/" + val);
    CHECK(f->test.empty());
  }
  const std::string upper = dir.file("upper");
  two_classes(upper + "/Train");
  two_classes(upper + "/TEST");
  f = find_split_folders(upper);
  REQUIRE(f.has_value());
  CHECK(f->train == upper + "/Train");
  CHECK(f->test == upper + "/TEST");
  CHECK(f->val.empty());
  // a class that happens to be called "train" (of images, not of class folders): a flat ImageFolder
  const std::string vehicles = dir.file("vehicles");
  two_classes(vehicles);
  std::filesystem::rename(vehicles + "/a", vehicles + "/train");
  CHECK_FALSE(find_split_folders(vehicles).has_value());
  CHECK(ImageFolder(vehicles).classes() == std::vector<std::string>{"b", "train"});

  // what is not a split tree of one training split and one split of each other role is refused, naming the folder
  const std::string extra = dir.file("extra"), twice = dir.file("twice"), no_train = dir.file("no_train");
  for (const char* split : {"train", "test", "more"}) two_classes(extra + "/" + split);
  for (const char* split : {"train", "val", "valid"}) two_classes(twice + "/" + split);
  for (const char* split : {"valid", "test"}) two_classes(no_train + "/" + split);
  CHECK_THAT(message_of([&] { find_split_folders(extra); }), Catch::Contains(extra + ": its folders are splits") &&
                                                                 Catch::Contains("'more' is none of the split names"));
  CHECK_THAT(message_of([&] { find_split_folders(twice); }), Catch::Contains("'val' and 'valid' are the same split"));
  CHECK_THAT(message_of([&] { find_split_folders(no_train); }), Catch::Contains("none is a training split"));
}

TEST_CASE("image folder: class folders holding class folders are refused naming both, hidden names are skipped",
          "[data][image_folder]") {
  TempDir dir;
  // a split tree read as one ImageFolder: before, its classes were 'test' and 'train'
  const std::string split = dir.file("split");
  for (const char* s : {"train", "test"}) two_classes(split + "/" + s);
  CHECK_THAT(message_of([&] { ImageFolder x(split); }),
             Catch::Contains("the class folder '" + split + "/test' has a sub-folder 'a' with images (" + split +
                             "/test/a/1.png)") &&
                 Catch::Contains("'test' looks like a split: read '" + split + "/test' itself"));
  // one level too deep under names that are no split
  const std::string deep = dir.file("deep");
  for (const char* s : {"part1", "part2"}) two_classes(deep + "/" + s);
  CHECK_THAT(message_of([&] { ImageFolder x(deep); }),
             Catch::Contains("the class folder '" + deep + "/part1' has a sub-folder 'a' with images") &&
                 Catch::Contains("are the classes one level deeper?"));

  // .ipynb_checkpoints, .DS_Store, macOS's ._ files (not images, though named .png), hidden sub-folders
  const std::string root = dir.file("hidden");
  two_classes(root);
  namespace fs = std::filesystem;
  fs::create_directories(root + "/.ipynb_checkpoints");
  fs::create_directories(root + "/b/.cache");
  testing::write_bytes(root + "/.ipynb_checkpoints/x.png", {1, 2, 3});
  testing::write_bytes(root + "/a/.DS_Store", {0, 0, 0, 1});
  testing::write_bytes(root + "/a/._1.png", {0, 5, 22, 7});
  testing::write_bytes(root + "/b/.cache/1.png", {9});
  ImageFolder ds(root);
  CHECK(ds.classes() == std::vector<std::string>{"a", "b"});
  CHECK(ds.size() == 2);
  CHECK(load_image_folder(ds, FolderLoadOptions{})->size() == 2);
  CHECK_FALSE(find_split_folders(root).has_value());
}

TEST_CASE("packed: ember_pack packs one split of a tree split by folder, never the splits as classes",
          "[data][packed]") {
  const std::string tool = ember_pack_tool();
  if (tool.empty()) return;
  TempDir dir;
  const std::string root = dir.file("tree"), out = dir.file("p.epk");
  two_classes(root + "/train");
  write_png(root + "/train/b/2.png", 4, 4, 1);
  two_classes(root + "/Valid");
  auto [rc, so, se] = run_pack(tool, dir, root + " " + out);
  INFO(se);
  CHECK(rc == 0);
  CHECK_THAT(so, Catch::Contains(root + " is split by folder (train/, Valid/): packing " + root + "/train"));
  auto packed = InMemoryDataset::load(out);
  CHECK(packed->classes() == std::vector<std::string>{"a", "b"});
  CHECK(packed->size() == 3);
  std::tie(rc, so, se) = run_pack(tool, dir, root + " " + out + " --split val");
  CHECK(rc == 0);
  CHECK(InMemoryDataset::load(out)->size() == 2);
  std::tie(rc, so, se) = run_pack(tool, dir, root + " " + out + " --split test");
  CHECK(rc == 2);
  CHECK(se == "ember_pack: error: --split test: " + root + " has no such split (it has train/, Valid/) (see --help)\n");
  // class folders holding class folders: refused, naming both levels
  const std::string deep = dir.file("deep");
  for (const char* s : {"part1", "part2"}) two_classes(deep + "/" + s);
  std::tie(rc, so, se) = run_pack(tool, dir, deep + " " + dir.file("d.epk"));
  CHECK(rc == 1);
  CHECK_THAT(se, Catch::StartsWith("ember_pack: error: ImageFolder: the class folder '" + deep +
                                   "/part1' has a sub-folder 'a' with images"));
  CHECK_FALSE(std::filesystem::exists(dir.file("d.epk")));
}

TEST_CASE("image folder: a class folder whose name is not UTF-8 is refused up front, its bytes shown escaped",
          "[data][image_folder][packed]") {
  TempDir dir;
  const std::string root = dir.file("names"), bad = root + "/caf\xE9";
  two_classes(root);
  std::filesystem::rename(root + "/b", bad);
  CHECK_THAT(
      message_of([&] { ImageFolder x(root); }),
      Catch::Contains("the class folder '" + root + "/caf\\xE9' has a name that is not UTF-8 (byte 3 is \\xE9)"));
  std::filesystem::rename(bad, root + "/caf\xC3\xA9");  // UTF-8: a name like any other
  CHECK(ImageFolder(root).classes() == std::vector<std::string>{"a", "caf\xC3\xA9"});
  // packed files hold UTF-8 names: not written otherwise
  auto ds = std::make_shared<InMemoryDataset>(zeros({1, 1, 2, 2}, TensorOptions(DType::u8)), tensor_i64({0}, {1}),
                                              std::vector<std::string>{"x\xFF"});
  CHECK_THAT(message_of([&] { ds->save(dir.file("bad.epk")); }), Catch::Contains("class name 0 is not UTF-8"));
  // nor read: a name made not UTF-8 after the pack, its CRCs made right again
  InMemoryDataset(zeros({1, 1, 2, 2}, TensorOptions(DType::u8)), tensor_i64({0}, {1}), {"xy"}).save(dir.file("x.epk"));
  std::vector<uint8_t> b = read_file(dir.file("x.epk"));
  auto u64 = [&](size_t at) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | b[at + static_cast<size_t>(i)];
    return v;
  };
  auto put_crc = [&](size_t at, uint64_t from, uint64_t n) {
    const auto c = static_cast<uint32_t>(crc32(0L, b.data() + from, static_cast<uInt>(n)));
    for (int i = 0; i < 4; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(c >> (8 * i));
  };
  b[u64(40) + 5] = 0xFF;                         // the 'y' of the first name
  put_crc(92, u64(40), u64(56) + 16 - u64(40));  // the classes and the one index record
  put_crc(96, 0, 96);                            // the header, which holds that CRC
  testing::write_bytes(dir.file("x.epk"), b);
  CHECK_THAT(message_of([&] { InMemoryDataset::load(dir.file("x.epk")); }),
             Catch::Contains("x.epk: class name 0 of 1 is not UTF-8 (byte 1)"));

  const std::string tool = ember_pack_tool();
  if (tool.empty()) return;
  std::filesystem::rename(root + "/caf\xC3\xA9", bad);
  auto [rc, so, se] = run_pack(tool, dir, "'" + root + "' " + dir.file("n.epk"));
  CHECK(rc == 1);
  CHECK_THAT(se, Catch::Contains("the class folder '" + root + "/caf\\xE9' has a name that is not UTF-8"));
  CHECK(so.find("decoding") == std::string::npos);  // refused before any image
  CHECK_FALSE(std::filesystem::exists(dir.file("n.epk")));
}
