#include "data/idx.h"

#include <libdeflate.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "core/error.h"
#include "data/file_io.h"
#include "io/input_file.h"

namespace ember::data {

namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", v);
  return buf;
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof(buf), i == 0 ? "%02x" : " %02x", p[i]);
    s += buf;
  }
  return s;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

bool known_type(uint8_t code) {
  switch (static_cast<IdxType>(code)) {
    case IdxType::u8:
    case IdxType::i8:
    case IdxType::i16:
    case IdxType::i32:
    case IdxType::f32:
    case IdxType::f64: return true;
  }
  return false;
}

// ---- byte sources: memory, a raw file, a gzip stream ----

class Source {
 public:
  virtual ~Source() = default;
  // Reads up to n bytes; fewer only at the end of the data.
  virtual size_t read(uint8_t* dst, size_t n) = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(std::span<const uint8_t> b) : bytes_(b) {}
  size_t read(uint8_t* dst, size_t n) override {
    size_t k = std::min(n, bytes_.size() - pos_);
    if (k > 0) std::memcpy(dst, bytes_.data() + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

class FileSource final : public Source {
 public:
  explicit FileSource(const std::string& path) : path_(path) {
    const int fd = io::open_regular_file(path);  // never blocks on a FIFO (io/input_file.h)
    f_.reset(::fdopen(fd, "rb"));
    if (!f_) ::close(fd);
    EMBER_CHECK(f_ != nullptr, "cannot open '", path, "': ", std::strerror(errno));
  }
  size_t read(uint8_t* dst, size_t n) override {
    size_t k = n == 0 ? 0 : std::fread(dst, 1, n, f_.get());
    EMBER_CHECK(!std::ferror(f_.get()), "error reading '", path_, "': ", std::strerror(errno));
    return k;
  }

 private:
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> f_;
};

// Inflates a gzip file as it is read (concatenated gzip members are one stream, as gunzip does).
class GzipSource final : public Source {
 public:
  explicit GzipSource(const std::string& path) : file_(path), name_(path) {
    EMBER_CHECK(inflateInit2(&z_, 15 + 16) == Z_OK, name_, ": zlib inflateInit2 failed");
    init_ = true;
  }
  ~GzipSource() override {
    if (init_) inflateEnd(&z_);
  }
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  size_t read(uint8_t* dst, size_t n) override {
    size_t done = 0;
    while (done < n) {
      if (z_.avail_in == 0 && !eof_) {
        z_.avail_in = static_cast<uInt>(file_.read(in_, sizeof(in_)));
        z_.next_in = in_;
        eof_ = z_.avail_in == 0;
      }
      if (finished_) {
        // a finished member: another may follow (concatenated gzip)
        if (z_.avail_in == 0) return done;
        produced_before_ += z_.total_out;
        EMBER_CHECK(inflateReset(&z_) == Z_OK, name_, ": zlib inflateReset failed");
        finished_ = false;
      }
      const size_t chunk = std::min<size_t>(n - done, 1u << 30);
      z_.next_out = dst + done;
      z_.avail_out = static_cast<uInt>(chunk);
      int rc = inflate(&z_, Z_NO_FLUSH);
      done += chunk - z_.avail_out;
      if (rc == Z_STREAM_END) {
        finished_ = true;
        continue;
      }
      if (rc == Z_BUF_ERROR && z_.avail_in == 0 && eof_)
        EMBER_FAIL(name_, ": the gzip stream is truncated (the file ends inside compressed data, after ", total_out(),
                   " decompressed bytes)");
      EMBER_CHECK(rc == Z_OK || rc == Z_BUF_ERROR, name_,
                  ": corrupt gzip data (zlib: ", z_.msg != nullptr ? z_.msg : zError(rc), ") after ", total_out(),
                  " decompressed bytes");
    }
    return done;
  }

 private:
  uint64_t total_out() const { return static_cast<uint64_t>(z_.total_out) + produced_before_; }
  FileSource file_;
  std::string name_;
  z_stream z_{};
  bool init_ = false;
  bool eof_ = false;
  bool finished_ = false;
  uint64_t produced_before_ = 0;
  uint8_t in_[1 << 16];
};

size_t read_full(Source& src, uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t k = src.read(dst + got, n - got);
    if (k == 0) break;
    got += k;
  }
  return got;
}

// Note [whole-buffer gzip]: a gzip'd IDX file is inflated in one call of libdeflate when it can
// be: the file read whole, the output sized by the gzip trailer's ISIZE. libdeflate inflates about
// twice as fast as zlib's streaming inflate (Fashion-MNIST's 26 MB of training images: 0.15 s
// against 0.24-0.36 s on the development VM), and that decompression was most of mnist_train's
// start-up on the CPU. Anything else (several gzip members, a damaged or truncated stream, an
// ISIZE that does not fit) takes the streaming path (GzipSource), which also says where a stream
// breaks; libdeflate's errors name no offset.
std::optional<std::vector<uint8_t>> inflate_whole(const std::string& path, uint64_t size) {
  constexpr uint64_t kTrailer = 8, kMinGzip = 18;  // header 10 + trailer 8
  if (size < kMinGzip || size > (uint64_t{1} << 32)) return std::nullopt;
  std::vector<uint8_t> in(static_cast<size_t>(size));
  {
    FileSource file(path);
    if (read_full(file, in.data(), in.size()) != in.size()) return std::nullopt;
  }
  const uint8_t* t = in.data() + in.size() - kTrailer + 4;
  const uint64_t isize = uint64_t{t[0]} | uint64_t{t[1]} << 8 | uint64_t{t[2]} << 16 | uint64_t{t[3]} << 24;
  if (isize > 1032 * size + 1024) return std::nullopt;  // more than deflate can expand to: damaged
  std::vector<uint8_t> out(static_cast<size_t>(isize));
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(libdeflate_alloc_decompressor(),
                                                                                 libdeflate_free_decompressor);
  if (d == nullptr) return std::nullopt;
  size_t in_used = 0, out_len = 0;
  const libdeflate_result rc =
      libdeflate_gzip_decompress_ex(d.get(), in.data(), in.size(), out.data(), out.size(), &in_used, &out_len);
  if (rc != LIBDEFLATE_SUCCESS || in_used != in.size() || out_len != out.size()) return std::nullopt;
  return out;
}

// ---- the parser ----

struct Header {
  uint32_t magic = 0;
  IdxType type = IdxType::u8;
  std::vector<int64_t> dims;
  uint64_t header_bytes = 0;
  uint64_t payload_bytes = 0;
};

// What a magic number is, for messages: "an images file", "a labels file", or its type and rank.
std::string magic_kind(uint32_t magic) {
  if (magic == kIdxImagesMagic) return "an images file";
  if (magic == kIdxLabelsMagic) return "a labels file";
  const uint8_t t = static_cast<uint8_t>(magic >> 8);
  return str("an IDX file of ", known_type(t) ? idx_type_name(static_cast<IdxType>(t)) : "unknown type", " with ",
             magic & 0xff, " dims");
}

std::string magic_role(uint32_t magic) {
  if (magic == kIdxImagesMagic) return "images";
  if (magic == kIdxLabelsMagic) return "labels";
  return str("IDX magic ", hex32(magic));
}

Header read_header(Source& src, const std::string& name, uint32_t expected_magic = 0) {
  uint8_t m[4];
  size_t got = read_full(src, m, 4);
  EMBER_CHECK(got > 0, name, ": the file is empty (0 bytes); expected an IDX header (4 bytes of magic, then the dims)");
  EMBER_CHECK(got == 4, name, ": too short for an IDX header: expected at least 4 bytes, got ", got);
  Header h;
  h.magic = (uint32_t{m[0]} << 24) | (uint32_t{m[1]} << 16) | (uint32_t{m[2]} << 8) | m[3];
  if (m[0] == 0x1f && m[1] == 0x8b)
    EMBER_FAIL(name,
               ": this is gzip-compressed data, not a raw IDX file (it starts with the gzip magic 1f 8b); "
               "name the file *.gz, or gunzip it");
  EMBER_CHECK(m[0] == 0 && m[1] == 0, name, ": not an IDX file: magic ", hex32(h.magic), " (bytes ", hex_bytes(m, 4),
              "); IDX files start with two zero bytes, a type byte and the number "
              "of dims (MNIST images: 0x00000803, labels: 0x00000801)");
  EMBER_CHECK(known_type(m[2]), name, ": unknown IDX element type 0x", hex_bytes(m + 2, 1), " in magic ",
              hex32(h.magic), " (expected 0x08 u8, 0x09 i8, 0x0b i16, 0x0c i32, 0x0d f32 or 0x0e f64)");
  // Checked before the dims are read: a labels file with an images file's magic would otherwise be
  // reported as a nonsense shape (its first labels read as dims).
  if (expected_magic != 0 && h.magic != expected_magic) {
    const bool swapped = (h.magic == kIdxImagesMagic && expected_magic == kIdxLabelsMagic) ||
                         (h.magic == kIdxLabelsMagic && expected_magic == kIdxImagesMagic);
    if (swapped)
      EMBER_FAIL(name, ": this is ", magic_kind(h.magic), " (IDX magic ", hex32(h.magic), "), expected ",
                 magic_role(expected_magic), " (", hex32(expected_magic),
                 "); are the images and labels files swapped or misnamed?");
    EMBER_FAIL(name, ": expected MNIST ", magic_role(expected_magic), " (IDX magic ", hex32(expected_magic), "), got ",
               hex32(h.magic), " (", magic_kind(h.magic), ")");
  }
  h.type = static_cast<IdxType>(m[2]);
  const int n = m[3];
  EMBER_CHECK(n >= 1, name, ": the IDX header (magic ", hex32(h.magic), ") declares 0 dims");
  uint8_t d[4 * 255];
  const size_t want = 4 * static_cast<size_t>(n);
  got = read_full(src, d, want);
  EMBER_CHECK(got == want, name, ": truncated IDX header: magic ", hex32(h.magic), " declares ", n, " dims, expected ",
              4 + want, " header bytes, got ", 4 + got);
  h.header_bytes = 4 + want;
  uint64_t bytes = idx_type_size(h.type);
  bool overflow = false;
  for (int i = 0; i < n; ++i) {
    const uint8_t* p = d + 4 * i;
    uint32_t v = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    h.dims.push_back(v);
    overflow = overflow || __builtin_mul_overflow(bytes, uint64_t{v}, &bytes);
  }
  // Sizes must also fit an int64 element count and a size_t allocation.
  EMBER_CHECK(!overflow && bytes <= (uint64_t{1} << 62), name, ": the IDX header declares dims ", dims_str(h.dims),
              " of ", idx_type_name(h.type), ", which overflows any possible file size");
  h.payload_bytes = bytes;
  return h;
}

std::string declared(const Header& h) {
  return str(dims_str(h.dims), " ", idx_type_name(h.type), " = ", h.payload_bytes, " bytes");
}

void to_host_order(IdxArray& a) {
  const size_t es = idx_type_size(a.type);
  if (es == 1) return;
  uint8_t* p = a.data.data();
  for (size_t i = 0; i + es <= a.data.size(); i += es) std::reverse(p + i, p + i + es);
}

IdxArray make_array(const Header& h, std::vector<uint8_t> data) {
  IdxArray a;
  a.magic = h.magic;
  a.type = h.type;
  a.dims = h.dims;
  a.data = std::move(data);
  to_host_order(a);
  return a;
}

// The payload when the number of bytes left in the source is known: checked before allocating.
IdxArray read_known(Source& src, const Header& h, uint64_t remaining, const std::string& name) {
  EMBER_CHECK(remaining >= h.payload_bytes, name, ": truncated IDX data: the header declares ", declared(h),
              ", expected ", h.payload_bytes, " bytes, got ", remaining);
  EMBER_CHECK(remaining == h.payload_bytes, name, ": ", remaining - h.payload_bytes,
              " unexpected bytes after the IDX data: the header declares ", declared(h), ", expected ", h.payload_bytes,
              " bytes, got ", remaining, " (wrong dims, or two files joined?)");
  std::vector<uint8_t> data(static_cast<size_t>(h.payload_bytes));
  size_t got = read_full(src, data.data(), data.size());
  EMBER_CHECK(got == data.size(), name, ": truncated IDX data: expected ", data.size(), " bytes, got ", got,
              " (was the file changed while being read?)");
  return make_array(h, std::move(data));
}

// zlib's deflate expands data at most ~1032:1; a header declaring more than that for a gzip file
// of `size` bytes cannot be right, and is refused before anything is allocated for it.
void check_gzip_bound(const Header& h, uint64_t size, const std::string& name) {
  const uint64_t bound = 1032 * size + 1024;
  EMBER_CHECK(h.payload_bytes <= bound, name, ": the IDX header declares ", declared(h), ", but a gzip file of ", size,
              " bytes decompresses to at most ~", bound, " bytes");
}

// The payload of a whole decompressed gzip file of `size` bytes (header included) in `bytes`,
// checked as the streaming path checks it, kept without a copy of its payload.
IdxArray read_whole(std::vector<uint8_t> bytes, uint64_t size, uint32_t expected_magic, const std::string& name) {
  MemorySource src(bytes);
  Header h = read_header(src, name, expected_magic);
  check_gzip_bound(h, size, name);
  const uint64_t remaining = bytes.size() - h.header_bytes;
  EMBER_CHECK(remaining >= h.payload_bytes, name, ": truncated IDX data: the header declares ", declared(h),
              ", expected ", h.payload_bytes, " bytes, got ", remaining);
  EMBER_CHECK(remaining == h.payload_bytes, name, ": unexpected bytes after the IDX data: the header declares ",
              declared(h), " but the stream continues (wrong dims, or two files joined?)");
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(h.header_bytes));
  return make_array(h, std::move(bytes));
}

// The payload of a stream of unknown length: collected as it arrives, never reserved from the
// header alone.
IdxArray read_stream(Source& src, const Header& h, const std::string& name) {
  std::vector<uint8_t> data;
  constexpr uint64_t kChunk = uint64_t{1} << 22;
  while (data.size() < h.payload_bytes) {
    size_t old = data.size();
    size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, h.payload_bytes - old));
    data.resize(old + want);
    size_t got = read_full(src, data.data() + old, want);
    EMBER_CHECK(got == want, name, ": truncated IDX data: the header declares ", declared(h), ", expected ",
                h.payload_bytes, " bytes, got ", old + got);
  }
  uint8_t extra[64];
  size_t more = read_full(src, extra, sizeof(extra));
  EMBER_CHECK(more == 0, name, ": unexpected bytes after the IDX data: the header declares ", declared(h),
              " but the stream continues (wrong dims, or two files joined?)");
  return make_array(h, std::move(data));
}

}  // namespace

size_t idx_type_size(IdxType t) {
  switch (t) {
    case IdxType::u8:
    case IdxType::i8: return 1;
    case IdxType::i16: return 2;
    case IdxType::i32:
    case IdxType::f32: return 4;
    case IdxType::f64: return 8;
  }
  EMBER_FAIL("unknown IDX element type ", static_cast<int>(t));
}

const char* idx_type_name(IdxType t) {
  switch (t) {
    case IdxType::u8: return "u8";
    case IdxType::i8: return "i8";
    case IdxType::i16: return "i16";
    case IdxType::i32: return "i32";
    case IdxType::f32: return "f32";
    case IdxType::f64: return "f64";
  }
  return "?";
}

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Tensor IdxArray::to_tensor() const {
  EMBER_CHECK(!dims.empty() && dims.size() <= static_cast<size_t>(kMaxDims), "IdxArray::to_tensor: ", dims.size(),
              " dims; ember tensors have 1 to ", kMaxDims);
  Shape shape;
  for (int64_t d : dims) shape.push_back(d);
  const int64_t n = numel();
  auto copy_as = [&](DType dt) {
    Tensor t = empty(shape, TensorOptions(dt));
    if (n > 0) std::memcpy(t.data_ptr(), data.data(), data.size());
    return t;
  };
  switch (type) {
    case IdxType::u8: return copy_as(DType::u8);
    case IdxType::i32: return copy_as(DType::i32);
    case IdxType::f32: return copy_as(DType::f32);
    case IdxType::f64: return copy_as(DType::f64);
    case IdxType::i8:
    case IdxType::i16: {
      Tensor t = empty(shape, TensorOptions(DType::i32));
      int32_t* p = t.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) {
        if (type == IdxType::i8) {
          p[i] = static_cast<int8_t>(data[static_cast<size_t>(i)]);
        } else {
          int16_t v;
          std::memcpy(&v, data.data() + 2 * i, 2);
          p[i] = v;
        }
      }
      return t;
    }
  }
  EMBER_FAIL("IdxArray::to_tensor: unknown element type");
}

IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& name) {
  MemorySource src(bytes);
  Header h = read_header(src, name);
  return read_known(src, h, bytes.size() - h.header_bytes, name);
}

IdxArray read_idx(const std::string& path, IdxCompression compression, uint32_t expected_magic) {
  const uint64_t size = file_size(path);
  uint8_t head[4] = {};
  size_t head_n = 0;
  {
    FileSource probe(path);
    head_n = read_full(probe, head, sizeof(head));
  }
  const bool is_gzip = looks_gzip({head, head_n});
  bool want_gzip = compression == IdxCompression::gzip;
  if (compression == IdxCompression::by_name) {
    want_gzip = ends_with(path, ".gz");
    if (want_gzip && !is_gzip)
      EMBER_FAIL(path, ": the name ends in .gz but the file is not gzip-compressed (it starts with ",
                 head_n > 0 ? hex_bytes(head, head_n) : std::string("nothing: it is empty"),
                 head_n == 4 && head[0] == 0 && head[1] == 0 ? ", a raw IDX header" : "", "); rename it without .gz");
  }
  if (want_gzip) {
    EMBER_CHECK(is_gzip, path, ": expected gzip-compressed IDX data, but the file starts with ",
                head_n > 0 ? hex_bytes(head, head_n) : std::string("nothing (it is empty)"),
                head_n == 4 && head[0] == 0 && head[1] == 0 ? " (a raw IDX header: the file is not compressed)"
                                                            : " (gzip files start with 1f 8b)");
    if (std::optional<std::vector<uint8_t>> whole = inflate_whole(path, size))
      return read_whole(std::move(*whole), size, expected_magic, path);
    GzipSource src(path);
    Header h = read_header(src, path, expected_magic);
    check_gzip_bound(h, size, path);
    return read_stream(src, h, path);
  }
  FileSource src(path);
  Header h = read_header(src, path, expected_magic);
  return read_known(src, h, size - h.header_bytes, path);
}

}  // namespace ember::data
