#include "data/packed.h"

#include <zlib.h>

#include <cstring>

#include "data/file_io.h"
#include "io/safetensors.h"
#include "kernels/functional.h"

namespace ember::data {

namespace {

// Note [packed header revisions]: files written before the header had its own CRC have a 96-byte
// header; since then the header is 100 bytes, the last 4 the CRC-32 of bytes [0, 96), so a changed
// field (e.g. height and width swapped: every size check still passes) is caught. Both are read;
// the version field stays 1 (the layout after the header is the same).
constexpr uint64_t kHeaderBytes = 100;
constexpr uint64_t kLegacyHeaderBytes = 96;

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

uint32_t crc(const uint8_t* p, uint64_t n, uint32_t c = 0) {
  uLong v = c == 0 ? crc32(0L, Z_NULL, 0) : c;
  while (n > 0) {
    auto k = static_cast<uInt>(std::min<uint64_t>(n, uint64_t{1} << 30));
    v = crc32(v, p, k);
    p += k;
    n -= k;
  }
  return static_cast<uint32_t>(v);
}

uint64_t align64(uint64_t x) { return (x + 63) / 64 * 64; }

}  // namespace

void write_packed(const std::string& path, const Tensor& images_in, const Tensor& labels_in,
                  const std::vector<std::string>& classes) {
  EMBER_CHECK(images_in.dtype() == DType::u8 && images_in.dim() == 4,
              "write_packed: images must be u8 [N, C, H, W], got ", images_in.describe());
  EMBER_CHECK(labels_in.dim() == 1 && is_integral(labels_in.dtype()) && labels_in.size(0) == images_in.size(0),
              "write_packed: labels must be integers [", images_in.size(0), "], got ", labels_in.describe());
  Tensor images = images_in.cpu().contiguous();
  Tensor labels = labels_in.cpu().to(DType::i64).contiguous();
  const uint64_t n = static_cast<uint64_t>(images.size(0));
  const uint64_t sample = static_cast<uint64_t>(images.size(1) * images.size(2) * images.size(3));
  for (int d = 1; d < 4; ++d)
    EMBER_CHECK(images.size(d) <= 0xFFFFFFFFll, "write_packed: dim ", d, " of ", images.describe(), " exceeds 32 bits");
  for (size_t c = 0; c < classes.size(); ++c)  // the format's names are UTF-8 (readers refuse others)
    EMBER_CHECK(io::first_invalid_utf8({reinterpret_cast<const uint8_t*>(classes[c].data()), classes[c].size()}) < 0,
                "write_packed: class name ", c, " is not UTF-8");
  const int64_t* lp = labels.data<int64_t>();
  for (uint64_t i = 0; i < n && !classes.empty(); ++i)
    EMBER_CHECK(lp[i] >= 0 && lp[i] < static_cast<int64_t>(classes.size()), "write_packed: label ", lp[i],
                " of sample ", i, " is outside the ", classes.size(), " classes");

  uint64_t classes_bytes = 0;
  for (const std::string& c : classes) classes_bytes += 4 + c.size();
  const uint64_t classes_off = kHeaderBytes;
  const uint64_t index_off = classes_off + classes_bytes;
  const uint64_t pixels_off = align64(index_off + 16 * n);
  const uint64_t pixel_bytes = n * sample;
  const uint64_t total = pixels_off + pixel_bytes;

  std::vector<uint8_t> b(static_cast<size_t>(total), 0);
  std::memcpy(b.data(), kPackedMagic, 8);
  put_u32(b, 8, kPackedVersion);
  put_u32(b, 12, static_cast<uint32_t>(kHeaderBytes));
  put_u64(b, 16, n);
  put_u32(b, 24, static_cast<uint32_t>(images.size(1)));
  put_u32(b, 28, static_cast<uint32_t>(images.size(2)));
  put_u32(b, 32, static_cast<uint32_t>(images.size(3)));
  put_u32(b, 36, static_cast<uint32_t>(classes.size()));
  put_u64(b, 40, classes_off);
  put_u64(b, 48, classes_bytes);
  put_u64(b, 56, index_off);
  put_u64(b, 64, pixels_off);
  put_u64(b, 72, pixel_bytes);
  put_u64(b, 80, total);
  size_t at = static_cast<size_t>(classes_off);
  for (const std::string& c : classes) {
    put_u32(b, at, static_cast<uint32_t>(c.size()));
    std::memcpy(b.data() + at + 4, c.data(), c.size());
    at += 4 + c.size();
  }
  for (uint64_t i = 0; i < n; ++i) {
    put_u64(b, static_cast<size_t>(index_off + 16 * i), i * sample);
    put_u64(b, static_cast<size_t>(index_off + 16 * i + 8), static_cast<uint64_t>(lp[i]));
  }
  if (pixel_bytes > 0) std::memcpy(b.data() + pixels_off, images.data_ptr(), static_cast<size_t>(pixel_bytes));
  put_u32(b, 88, crc(b.data() + pixels_off, pixel_bytes));
  put_u32(b, 92, crc(b.data() + classes_off, index_off + 16 * n - classes_off));
  put_u32(b, 96, crc(b.data(), 96));  // the header's own CRC (Note [packed header revisions])
  write_file(path, b);
}

namespace {

// A packed file's header fields, and the sizes derived from them.
struct PackedHeader {
  uint64_t header_bytes = 0, n = 0, c = 0, h = 0, w = 0, k = 0;
  uint64_t classes_off = 0, classes_bytes = 0, index_off = 0, pixels_off = 0, pixel_bytes = 0;
  uint64_t sample = 0, index_bytes = 0;  // bytes of one sample's pixels, of the index section
};

// The header of the `size`-byte file at p: magic, version and sizes, its sections in order and inside the file.
PackedHeader read_header(const uint8_t* p, uint64_t size, const std::string& path) {
  if (std::memcmp(p, kPackedMagic, 8) != 0) {
    EMBER_CHECK(!looks_gzip({p, 2}), path, ": this is gzip-compressed data, not a packed dataset (gunzip it first)");
    EMBER_FAIL(path, ": not an ember packed dataset (expected the magic \"", kPackedMagic, "\" at offset 0)");
  }
  const uint32_t version = get_u32(p + 8);
  EMBER_CHECK(version == kPackedVersion, path, ": packed dataset version ", version, "; this ember reads version ",
              kPackedVersion);
  PackedHeader hd;
  hd.header_bytes = get_u32(p + 12);
  EMBER_CHECK(hd.header_bytes == kHeaderBytes || hd.header_bytes == kLegacyHeaderBytes, path, ": header size ",
              hd.header_bytes, ", expected ", kHeaderBytes, " (or ", kLegacyHeaderBytes,
              " for files without a header CRC)");
  EMBER_CHECK(size >= hd.header_bytes, path, ": too short for a packed dataset: expected at least ", hd.header_bytes,
              " header bytes, got ", size);
  hd.n = get_u64(p + 16);
  hd.c = get_u32(p + 24), hd.h = get_u32(p + 28), hd.w = get_u32(p + 32);
  hd.k = get_u32(p + 36);
  hd.classes_off = get_u64(p + 40), hd.classes_bytes = get_u64(p + 48);
  hd.index_off = get_u64(p + 56), hd.pixels_off = get_u64(p + 64), hd.pixel_bytes = get_u64(p + 72);
  const uint64_t total = get_u64(p + 80);
  EMBER_CHECK(total == size, path, ": the header says the file has ", total, " bytes, got ", size,
              total > size ? " (truncated)" : " (trailing data)");
  const uint64_t n = hd.n, c = hd.c, h = hd.h, w = hd.w;
  uint64_t want_pixels = 0;
  bool overflow = __builtin_mul_overflow(c, h, &hd.sample) || __builtin_mul_overflow(hd.sample, w, &hd.sample) ||
                  __builtin_mul_overflow(hd.sample, n, &want_pixels) ||
                  __builtin_mul_overflow(n, uint64_t{16}, &hd.index_bytes);
  EMBER_CHECK(!overflow, path, ": sizes overflow: ", n, " samples of [", c, ", ", h, ", ", w, "]");
  EMBER_CHECK(hd.pixel_bytes == want_pixels, path, ": pixel section holds ", hd.pixel_bytes, " bytes; ", n,
              " samples of [", c, ", ", h, ", ", w, "] need ", want_pixels);
  EMBER_CHECK(hd.classes_off == hd.header_bytes && hd.classes_bytes <= size - hd.classes_off, path,
              ": classes section [", hd.classes_off, ", +", hd.classes_bytes, ") is outside the file");
  EMBER_CHECK(hd.index_off == hd.classes_off + hd.classes_bytes && hd.index_bytes <= size - hd.index_off, path,
              ": index section at ", hd.index_off, " (", hd.index_bytes, " bytes) is misplaced or outside the file of ",
              size, " bytes");
  EMBER_CHECK(hd.pixels_off % 64 == 0 && hd.pixels_off >= hd.index_off + hd.index_bytes && hd.pixels_off <= size &&
                  hd.pixel_bytes == size - hd.pixels_off,
              path, ": pixel section at ", hd.pixels_off, " (", hd.pixel_bytes, " bytes) does not end the file of ",
              size, " bytes");
  return hd;
}

// The CRCs of the header (files with one), of the classes and index sections, and of the pixels.
void check_crcs(const uint8_t* p, const PackedHeader& hd, const std::string& path) {
  if (hd.header_bytes == kHeaderBytes)
    EMBER_CHECK(get_u32(p + 96) == crc(p, 96), path, ": CRC mismatch in the header (the CRC-32 at offset 96 does not ",
                "match header bytes 0-95, which read ", hd.n, " samples of [", hd.c, ", ", hd.h, ", ", hd.w, "] in ",
                hd.k,
                " classes): the file is corrupt or its header was edited; pack the dataset again with ember_pack");
  EMBER_CHECK(get_u32(p + 92) == crc(p + hd.classes_off, hd.index_off + hd.index_bytes - hd.classes_off), path,
              ": CRC mismatch in the classes/index sections (the file is corrupt)");
  EMBER_CHECK(get_u32(p + 88) == crc(p + hd.pixels_off, hd.pixel_bytes), path,
              ": CRC mismatch in the pixel data (the file is corrupt)");
}

// The k class names, which fill the classes section exactly.
std::vector<std::string> read_classes(const uint8_t* p, const PackedHeader& hd, const std::string& path) {
  std::vector<std::string> classes;
  const uint64_t k = hd.k, index_off = hd.index_off;
  uint64_t at = hd.classes_off;
  for (uint64_t i = 0; i < k; ++i) {
    EMBER_CHECK(index_off - at >= 4, path, ": class name ", i, " of ", k, " runs past the classes section");
    uint32_t len = get_u32(p + at);
    EMBER_CHECK(index_off - at - 4 >= len, path, ": class name ", i, " (", len,
                " bytes) runs past the classes section");
    const int64_t bad = io::first_invalid_utf8({p + at + 4, len});
    EMBER_CHECK(bad < 0, path, ": class name ", i, " of ", k, " is not UTF-8 (byte ", bad,
                "); the file was not written by ember_pack, or is corrupt");
    classes.emplace_back(reinterpret_cast<const char*>(p + at + 4), len);
    at += 4 + len;
  }
  EMBER_CHECK(at == index_off, path, ": ", index_off - at, " unexpected bytes after the class names");
  return classes;
}

// The labels from the index, whose records must point at the samples densely and in order.
Tensor read_labels(const uint8_t* p, const PackedHeader& hd, const std::string& path) {
  const uint64_t n = hd.n, k = hd.k;
  Tensor labels = empty({static_cast<int64_t>(n)}, TensorOptions(DType::i64));
  int64_t* lp = labels.data<int64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* r = p + hd.index_off + 16 * i;
    EMBER_CHECK(get_u64(r) == i * hd.sample, path, ": index record ", i, " points at pixel offset ", get_u64(r),
                ", expected ", i * hd.sample, " (samples are stored densely, in order)");
    lp[i] = static_cast<int64_t>(get_u64(r + 8));
    EMBER_CHECK(k == 0 || (lp[i] >= 0 && static_cast<uint64_t>(lp[i]) < k), path, ": label ", lp[i], " of sample ", i,
                " is outside the ", k, " classes");
  }
  return labels;
}

}  // namespace

PackedDataset read_packed(const std::string& path) {
  const uint64_t size = file_size(path);
  EMBER_CHECK(size >= kLegacyHeaderBytes, path, ": too short for a packed dataset: expected at least ",
              kLegacyHeaderBytes, " header bytes, got ", size);
  // The whole file in one read; the images are a view into these bytes.
  Tensor file = empty({static_cast<int64_t>(size)}, TensorOptions(DType::u8));
  auto* p = static_cast<uint8_t*>(file.data_ptr());
  read_file_into(path, {p, static_cast<size_t>(size)});
  const PackedHeader hd = read_header(p, size, path);
  // After the size checks (they name the field that is off), before the data is trusted: a header
  // whose fields are consistent but changed (height and width swapped) fails here.
  check_crcs(p, hd, path);
  PackedDataset out;
  out.classes = read_classes(p, hd, path);
  out.labels = read_labels(p, hd, path);
  const auto C = static_cast<int64_t>(hd.c), H = static_cast<int64_t>(hd.h), W = static_cast<int64_t>(hd.w);
  out.images = make_view(file, {static_cast<int64_t>(hd.n), C, H, W}, {C * H * W, H * W, W, 1},
                         static_cast<int64_t>(hd.pixels_off));
  return out;
}

}  // namespace ember::data
