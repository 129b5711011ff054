// The one translation unit that compiles stb_image and stb_image_resize (as static functions, so
// they cannot clash with another copy linked into the same program).
#include "data/image_decode.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "data/file_io.h"

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_NO_STDIO
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
// Refuse absurd sizes before allocating (a corrupt header could claim 2^24 x 2^24 pixels); the
// checks before stb_image refuse them first, with the file's numbers (kMaxImageSide).
#define STBI_MAX_DIMENSIONS (1 << 15)
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wtype-limits"
#if defined(__GNUC__) && !defined(__clang__)
// (kept to the end of the file: GCC reports stb code where it is inlined into ours)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>

namespace ember::data {

namespace {

template <class... Args>
[[noreturn]] void fail(const std::string& name, const Args&... why) {
  EMBER_FAIL("cannot decode '", name, "': ", why...);
}

uint32_t be16(const uint8_t* p) { return uint32_t{p[0]} << 8 | p[1]; }
uint32_t be32(const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }
uint32_t le16(const uint8_t* p) { return uint32_t{p[1]} << 8 | p[0]; }
uint32_t le32(const uint8_t* p) { return uint32_t{p[3]} << 24 | uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | p[0]; }

std::string hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*X", digits, v);
  return buf;
}

// A chunk type as text when it is four letters (every real one is), else its bytes in hex.
std::string chunk_name(const uint8_t* p) {
  for (int i = 0; i < 4; ++i)
    if (!std::isalpha(p[i])) return hex(be32(p), 8);
  return std::string(reinterpret_cast<const char*>(p), 4);
}

// Before anything is allocated for the image (stb_image allocates width x height x channels).
void check_dimensions(const std::string& name, const char* format, int64_t width, int64_t height, int64_t max_pixels) {
  if (width <= 0 || height <= 0)
    fail(name, "the ", format, " header claims width ", width, " x height ", height, " (an empty image)");
  if (width > kMaxImageSide || height > kMaxImageSide)
    fail(name, "the ", format, " header claims width ", width, " x height ", height, ", more than the ", kMaxImageSide,
         " per side that ember decodes");
  if (width * height > max_pixels)
    fail(name, "the ", format, " header claims width ", width, " x height ", height, " = ", width * height,
         " pixels, more than the limit of ", max_pixels,
         " pixels (ImageFolderOptions::max_pixels, ember_pack --max-pixels)");
}

uint32_t crc32_of(const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), p, static_cast<uInt>(n)));
}

// What check_png learns from a PNG's chunks.
struct PngInfo {
  bool apple = false;  // Apple's "CgBI" PNGs (stb_image reads them): raw deflate, no zlib wrapper
  uint32_t width = 0, height = 0, depth = 0, color = 0, interlace = 0;
  std::vector<std::span<const uint8_t>> idat;
  uint64_t idat_bytes = 0;
};

// IHDR's 13 bytes: dimensions within the limits, and a colour type, bit depth, compression, filter and interlace
// method PNG defines.
void read_ihdr(const uint8_t* data, PngInfo& png, const std::string& name, int64_t max_pixels) {
  png.width = be32(data);
  png.height = be32(data + 4);
  png.depth = data[8];
  png.color = data[9];
  png.interlace = data[12];
  check_dimensions(name, "PNG", png.width, png.height, max_pixels);
  const uint32_t color = png.color, depth = png.depth;
  const bool valid = (color == 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16)) ||
                     (color == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
                     ((color == 2 || color == 4 || color == 6) && (depth == 8 || depth == 16));
  if (!valid) fail(name, "IHDR has colour type ", color, " with bit depth ", depth, ", which PNG does not define");
  if (data[10] != 0 || data[11] != 0 || png.interlace > 1)
    fail(name, "IHDR has compression ", int{data[10]}, ", filter ", int{data[11]}, ", interlace ", png.interlace,
         " (PNG defines 0, 0 and 0 or 1)");
}

// The chunks up to IEND, each whole and with its CRC right; IHDR first (after Apple's CgBI), the IDAT chunks kept.
PngInfo read_png_chunks(std::span<const uint8_t> b, const std::string& name, int64_t max_pixels) {
  const size_t size = b.size();
  size_t at = 8;
  bool ihdr = false;
  PngInfo png;
  for (;;) {
    const size_t left = size - at;
    if (left == 0) fail(name, "truncated: the file ends at offset ", at, " without an IEND chunk");
    if (left < 12) fail(name, "truncated at offset ", at, ": a PNG chunk needs at least 12 bytes, ", left, " left");
    const uint32_t len = be32(b.data() + at);
    const std::string type = chunk_name(b.data() + at + 4);
    if (len > 0x7FFFFFFFu) fail(name, "chunk ", type, " at offset ", at, " claims ", len, " bytes (PNG allows 2^31-1)");
    if (len > left - 12)
      fail(name, "truncated: chunk ", type, " at offset ", at, " claims ", len, " data bytes and a 4-byte CRC, only ",
           left - 8, " bytes follow its header");
    const uint32_t stored = be32(b.data() + at + 8 + len), computed = crc32_of(b.data() + at + 4, len + 4);
    if (stored != computed)
      fail(name, "bad CRC in chunk ", type, " at offset ", at, " (stored ", hex(stored, 8), ", computed ",
           hex(computed, 8), "): the file is corrupt");
    const uint8_t* data = b.data() + at + 8;
    if (!ihdr && type == "CgBI") {
      png.apple = true;
    } else if (!ihdr) {
      if (type != "IHDR" || len != 13)
        fail(name, "the first chunk is ", type, " (", len, " bytes), expected IHDR (13 bytes)");
      ihdr = true;
      read_ihdr(data, png, name, max_pixels);
    } else if (type == "IDAT") {
      png.idat.emplace_back(data, len);
      png.idat_bytes += len;
    } else if (type == "IEND") {
      break;
    }
    at += 12 + len;
  }
  return png;
}

// The bytes the filtered scanlines inflate to (Adam7 passes each have their rows).
uint64_t png_image_bytes(const PngInfo& png) {
  const uint32_t color = png.color, width = png.width, height = png.height;
  const uint64_t channels = color == 2 ? 3 : color == 4 ? 2 : color == 6 ? 4 : 1;
  const uint64_t bits = channels * png.depth;
  auto rows = [&](uint64_t w, uint64_t h) { return w == 0 || h == 0 ? 0 : h * (1 + (w * bits + 7) / 8); };
  if (png.interlace == 0) return rows(width, height);
  uint64_t raw = 0;
  const int x0[7] = {0, 4, 0, 2, 0, 1, 0}, y0[7] = {0, 0, 4, 0, 2, 0, 1};
  const int dx[7] = {8, 8, 4, 4, 2, 2, 1}, dy[7] = {8, 8, 8, 4, 4, 2, 2};
  for (int p = 0; p < 7; ++p)
    raw += rows(width > uint32_t(x0[p]) ? (width - x0[p] + dx[p] - 1) / dx[p] : 0,
                height > uint32_t(y0[p]) ? (height - y0[p] + dy[p] - 1) / dy[p] : 0);
  return raw;
}

// Inflates the IDAT data without keeping the output: a valid zlib stream (or raw deflate for Apple's PNGs), to its
// end, with its checksum, giving at least the `raw` bytes the image needs.
void check_png_stream(const PngInfo& png, uint64_t raw, const std::string& name) {
  z_stream z{};
  if (inflateInit2(&z, png.apple ? -MAX_WBITS : MAX_WBITS) != Z_OK) fail(name, "zlib cannot start inflating");
  std::vector<uint8_t> sink(size_t{1} << 16);
  uint64_t produced = 0;
  int ret = Z_OK;
  std::string error;
  for (size_t k = 0; k < png.idat.size() && ret != Z_STREAM_END && error.empty(); ++k) {
    z.next_in = const_cast<Bytef*>(png.idat[k].data());
    z.avail_in = static_cast<uInt>(png.idat[k].size());
    do {  // until this chunk is used up and no output is pending (a full sink may hide some)
      z.next_out = sink.data();
      z.avail_out = static_cast<uInt>(sink.size());
      ret = inflate(&z, Z_NO_FLUSH);
      produced += sink.size() - z.avail_out;
      if (ret == Z_NEED_DICT) error = "the stream asks for a preset dictionary, which PNG forbids";
      else if (ret == Z_DATA_ERROR) error = z.msg != nullptr ? z.msg : "invalid data";
      else if (ret == Z_MEM_ERROR) error = "out of memory";
      if (ret != Z_OK) break;  // the end, an error, or (Z_BUF_ERROR) no progress possible
    } while (z.avail_in > 0 || z.avail_out == 0);
  }
  inflateEnd(&z);
  if (error == "incorrect data check")
    fail(name, "zlib checksum mismatch (the adler32 at the end of the IDAT data does not match the ", produced,
         " bytes it decompresses to): the file is corrupt");
  if (!error.empty())
    fail(name, "corrupt zlib/deflate data in IDAT (zlib: ", error, ") after ", produced, " of ", raw, " image bytes");
  if (ret != Z_STREAM_END)
    fail(name, "truncated: the zlib stream in the IDAT chunks (", png.idat_bytes, " bytes) stops before its end after ",
         produced, " of ", raw, " image bytes");
  if (produced < raw)
    fail(name, "the image data decompresses to ", produced, " bytes, width ", png.width, " x height ", png.height,
         " needs ", raw, ": the file is truncated or corrupt");
}

// PNG: every chunk's CRC, IHDR's fields, that the compressed data can hold what IHDR claims, and
// the zlib stream itself (inflated here without keeping the output: stb_image's own inflate checks
// neither the adler32 nor much of the deflate structure, and quietly takes a cut-short stream).
void check_png(std::span<const uint8_t> b, const std::string& name, int64_t max_pixels) {
  const PngInfo png = read_png_chunks(b, name, max_pixels);
  if (png.idat.empty()) fail(name, "no IDAT chunk: the file holds no image data");
  const uint64_t raw = png_image_bytes(png);
  // Deflate's densest code is a 258-byte match in 2 bits: no stream expands more than 1032 times.
  if (raw > png.idat_bytes * 1032)
    fail(name, "the header claims width ", png.width, " x height ", png.height, " (", raw,
         " bytes of image data) but its ", png.idat_bytes, " bytes of compressed data can hold at most ",
         png.idat_bytes * 1032, ": the file is truncated or corrupt");
  check_png_stream(png, raw, name);
}

// BMP: the headers, the dimensions, and that the rows of an uncompressed bitmap lie inside the file
// (stb_image reads past the end as zeros).
void check_bmp(std::span<const uint8_t> b, const std::string& name, int64_t max_pixels) {
  const size_t size = b.size();
  if (size < 18)
    fail(name, "truncated: a BMP needs 18 bytes for its file header and info header size, the file has ", size);
  const uint32_t offset = le32(b.data() + 10), hsz = le32(b.data() + 14);
  if (hsz != 12 && hsz != 40 && hsz != 56 && hsz != 108 && hsz != 124)
    fail(name, "a BMP info header of ", hsz, " bytes, which ember does not read (12, 40, 56, 108 or 124)");
  if (14 + uint64_t{hsz} > size)
    fail(name, "truncated: the BMP info header needs bytes [14, ", 14 + uint64_t{hsz}, "), the file ends at ", size);
  int64_t width = 0, height = 0;
  uint32_t bpp = 0, compression = 0;
  if (hsz == 12) {
    width = le16(b.data() + 18);
    height = le16(b.data() + 20);
    bpp = le16(b.data() + 24);
  } else {
    width = static_cast<int32_t>(le32(b.data() + 18));
    height = static_cast<int32_t>(le32(b.data() + 22));  // negative: rows stored top-down
    bpp = le16(b.data() + 28);
    compression = le32(b.data() + 30);
  }
  check_dimensions(name, "BMP", width, height < 0 ? -height : height, max_pixels);
  const bool uncompressed = compression == 0 || compression == 3;  // BI_RGB, BI_BITFIELDS
  if (!uncompressed || (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32))
    return;  // stb_image refuses these
  const uint64_t rows = static_cast<uint64_t>(height < 0 ? -height : height);
  const uint64_t stride = (static_cast<uint64_t>(width) * bpp + 31) / 32 * 4;
  // The last row's padding is not required: some writers leave it out, and it holds no pixels.
  const uint64_t end = offset + (rows - 1) * stride + (static_cast<uint64_t>(width) * bpp + 7) / 8;
  if (offset < 14 + uint64_t{hsz} || offset > size)
    fail(name, "the pixel data offset ", offset, " lies ",
         offset > size ? "past the end of the file (" : "inside the headers (",
         offset > size ? size : 14 + uint64_t{hsz}, " bytes)");
  if (end > size)
    fail(name, "truncated: width ", width, " x height ", rows, " at ", bpp, " bits per pixel needs pixel bytes [",
         offset, ", ", end, "), the file ends at ", size);
}

// JPEG: the marker segments lie inside the file, a frame header with sane dimensions comes before
// the first scan, and the file runs to its EOI marker (stb_image decodes a cut-short scan as if the
// missing data were zeros, and allocates what the frame header claims).
void check_jpeg(std::span<const uint8_t> b, const std::string& name, int64_t max_pixels) {
  const size_t size = b.size();
  size_t at = 2;  // after SOI
  bool frame = false, scan = false, sequential = false;
  uint64_t min_blocks = 0;  // blocks of the component with the fewest
  for (;;) {
    if (at >= size) fail(name, "truncated: the file ends at offset ", size, " before the EOI marker");
    if (b[at] != 0xFF && !frame) {  // padding between header segments, which stb_image skips there
      const auto* ff = static_cast<const uint8_t*>(std::memchr(b.data() + at, 0xFF, size - at));
      if (ff == nullptr) fail(name, "truncated: the file ends at offset ", size, " before a frame header (SOF)");
      at = static_cast<size_t>(ff - b.data());
    }
    if (b[at] != 0xFF) fail(name, "expected a JPEG marker (0xFF) at offset ", at, ", found ", hex(b[at], 2));
    while (at < size && b[at] == 0xFF) ++at;  // fill bytes
    if (at >= size) fail(name, "truncated: the file ends at offset ", size, " inside a marker, before the EOI marker");
    const uint8_t m = b[at];
    const size_t pos = at - 1;
    ++at;
    if (m == 0xD9) break;                                 // EOI
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) continue;  // TEM, RSTn, SOI: no segment
    if (m == 0x00) fail(name, "a stray 0xFF00 at offset ", pos, " where a marker should be");
    if (size - at < 2)
      fail(name, "truncated: marker ", hex(0xFF00u | m, 4), " at offset ", pos,
           " needs a 2-byte length, the file ends at ", size);
    const uint32_t len = be16(b.data() + at);
    if (len < 2) fail(name, "marker ", hex(0xFF00u | m, 4), " at offset ", pos, " has length ", len, " (at least 2)");
    if (len > size - at)
      fail(name, "truncated: segment ", hex(0xFF00u | m, 4), " at offset ", pos, " claims ", len, " bytes, only ",
           size - at, " remain");
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof && !frame && len >= 8) {
      frame = true;
      const uint8_t* f = b.data() + at;
      const uint32_t height = be16(f + 3), width = be16(f + 5), n = f[7];
      if (height == 0)
        fail(name, "the JPEG frame header gives height 0 (a later DNL marker height), which ember does not read");
      check_dimensions(name, "JPEG", width, height, max_pixels);
      sequential = (m == 0xC0 || m == 0xC1) && n > 0 && len >= 8 + 3 * n;
      uint32_t hmax = 1, vmax = 1;
      for (uint32_t i = 0; sequential && i < n; ++i) {
        const uint32_t h = f[9 + 3 * i] >> 4, v = f[9 + 3 * i] & 15;
        if (h == 0 || v == 0) sequential = false;
        hmax = std::max(hmax, h);
        vmax = std::max(vmax, v);
      }
      for (uint32_t i = 0; sequential && i < n; ++i) {
        const uint64_t h = f[9 + 3 * i] >> 4, v = f[9 + 3 * i] & 15;
        const uint64_t cw = (width * h + hmax - 1) / hmax, ch = (height * v + vmax - 1) / vmax;
        const uint64_t blocks = (cw + 7) / 8 * ((ch + 7) / 8);
        min_blocks = i == 0 ? blocks : std::min(min_blocks, blocks);
      }
      // A sequential scan codes every block of its components in at least 2 bits (a DC code and an
      // AC code, each at least 1 bit): a file of N bytes holds at most 4 N blocks of a component.
      if (sequential && min_blocks > 4 * uint64_t{size})
        fail(name, "the JPEG header claims width ", width, " x height ", height, " (", min_blocks,
             " 8x8 blocks in its smallest component) but the file's ", size, " bytes can hold at most ",
             4 * uint64_t{size}, ": the file is truncated or corrupt");
    }
    at += len;
    if (m != 0xDA) continue;
    if (!frame) fail(name, "a scan (SOS) at offset ", pos, " comes before any frame header (SOF)");
    scan = true;
    // The entropy-coded data runs to the next marker that is neither a stuffed 0xFF00 nor RSTn.
    for (;;) {
      const auto* ff = static_cast<const uint8_t*>(std::memchr(b.data() + at, 0xFF, size - at));
      if (ff == nullptr || ff + 1 >= b.data() + size)
        fail(name, "truncated: the entropy-coded data of the scan at offset ", pos, " runs to the end of the file (",
             size, " bytes) without reaching the EOI marker");
      const uint8_t next = ff[1];
      at = static_cast<size_t>(ff - b.data());
      if (next == 0x00 || (next >= 0xD0 && next <= 0xD7) || next == 0xFF) {
        at += next == 0xFF ? 1 : 2;
        continue;
      }
      break;
    }
  }
  if (!scan) fail(name, "no image data: the EOI marker comes before any scan (SOS)");
}

}  // namespace

Image decode_image(std::span<const uint8_t> bytes, const std::string& name, int channels, int64_t max_pixels) {
  EMBER_CHECK(channels == 0 || channels == 1 || channels == 3 || channels == 4,
              "decode_image: channels must be 0 "
              "(as stored), 1, 3 or 4; got ",
              channels);
  EMBER_CHECK(max_pixels >= 1 && max_pixels <= kMaxImagePixelsLimit, "decode_image: max_pixels must be in [1, ",
              kMaxImagePixelsLimit, "], got ", max_pixels);
  EMBER_CHECK(!bytes.empty(), "cannot decode '", name, "': the file is empty");
  EMBER_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX), "cannot decode '", name, "': ", bytes.size(),
              " bytes is more than stb_image reads");
  static constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSignature, 8) == 0) check_png(bytes, name, max_pixels);
  else if (bytes.size() >= 2 && bytes[0] == 'B' && bytes[1] == 'M') check_bmp(bytes, name, max_pixels);
  else if (bytes.size() >= 2 && bytes[0] == 0xFF && bytes[1] == 0xD8) check_jpeg(bytes, name, max_pixels);
  // else stb_image says what it is not ("unknown image type")
  int w = 0, h = 0, stored = 0;
  unsigned char* px = stbi_load_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &stored, channels);
  EMBER_CHECK(px != nullptr, "cannot decode '", name, "': ",
              stbi_failure_reason() != nullptr && *stbi_failure_reason() != 0 ? stbi_failure_reason() : "unknown error",
              " (ember reads PNG, JPEG and BMP)");
  const int c = channels == 0 ? stored : channels;
  Image img(c, h, w);
  // stb_image gives HWC (interleaved); ember keeps CHW.
  const int64_t plane = static_cast<int64_t>(h) * w;
  for (int64_t i = 0; i < plane; ++i)
    for (int k = 0; k < c; ++k) img.pixels[static_cast<size_t>(k * plane + i)] = px[i * c + k];
  stbi_image_free(px);
  return img;
}

Image load_image(const std::string& path, int channels, int64_t max_pixels) {
  std::vector<uint8_t> bytes = read_file(path);  // "cannot open '<path>': <reason>"
  return decode_image(bytes, path, channels, max_pixels);
}

Image resize_image(const Image& image, int64_t height, int64_t width) {
  EMBER_CHECK(height > 0 && width > 0 && height <= kMaxImageSide && width <= kMaxImageSide,
              "resize_image: target size ", height, " x ", width, " must be in [1, ", kMaxImageSide, "]");
  EMBER_CHECK(image.height > 0 && image.width > 0, "resize_image: the image is empty (", image.height, " x ",
              image.width, ")");
  if (image.height == height && image.width == width) return image;
  Image out(image.channels, height, width);
  for (int64_t c = 0; c < image.channels; ++c) {
    const uint8_t* src = image.pixels.data() + c * image.height * image.width;
    uint8_t* dst = out.pixels.data() + c * height * width;
    int ok = stbir_resize_uint8(src, static_cast<int>(image.width), static_cast<int>(image.height), 0, dst,
                                static_cast<int>(width), static_cast<int>(height), 0, 1);
    EMBER_CHECK(ok == 1, "resize_image: stb_image_resize failed for ", image.height, " x ", image.width, " -> ", height,
                " x ", width);
  }
  return out;
}

}  // namespace ember::data

#pragma GCC diagnostic pop
