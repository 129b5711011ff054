#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/autograd/node.h"
#include "io/atomic_file.h"
#include "io/input_file.h"
#include "kernels/functional.h"

namespace ember::io {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {{"F32", DType::f32}, {"F16", DType::f16},     {"BF16", DType::bf16},
                                 {"F64", DType::f64}, {"I32", DType::i32},     {"I64", DType::i64},
                                 {"U8", DType::u8},   {"BOOL", DType::boolean}};
// In the spec, but not ember dtypes.
constexpr const char* kForeignDTypes[] = {"I8",      "I16",     "U16", "U32",     "U64",     "F8_E4M3",
                                          "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void check_header_length(uint64_t n, uint64_t file_size, const std::string& where) {
  EMBER_CHECK(n <= kMaxSafetensorsHeader, where, ": header length ", n, " bytes is over the 100 MB limit (",
              kMaxSafetensorsHeader, "); the file is corrupt or not a safetensors file");
  EMBER_CHECK(n <= file_size - 8, where, ": header length ", n, " goes beyond the file (", file_size,
              " bytes, so at most ", file_size - 8, " bytes of header)");
}

DType parse_dtype_name(const std::string& s, const std::string& tensor, const std::string& where) {
  for (const auto& d : kDTypes)
    if (s == d.name) return d.dtype;
  for (const char* f : kForeignDTypes)
    EMBER_CHECK(s != f, where, ": tensor '", tensor, "' has dtype ", s,
                ", a valid safetensors dtype that ember does not support (ember has F32 F16 BF16 F64 I32 I64 U8 BOOL)");
  EMBER_FAIL(where, ": tensor '", tensor, "' has unknown dtype '", s, "'");
}

uint64_t as_u64(const json& v, const std::string& what, const std::string& where) {
  EMBER_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), where, ": ", what,
              " must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

}  // namespace

int64_t first_invalid_utf8(std::span<const uint8_t> s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
    else return static_cast<int64_t>(i);
    if (i + static_cast<size_t>(len) > s.size()) return static_cast<int64_t>(i);
    for (int k = 1; k < len; ++k) {
      uint8_t cc = s[i + static_cast<size_t>(k)];
      if ((cc & 0xC0) != 0x80) return static_cast<int64_t>(i);
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return static_cast<int64_t>(i);
    i += static_cast<size_t>(len);
  }
  return -1;
}

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  EMBER_FAIL("safetensors: no name for dtype ", t);
}

// ---- header validation ----

namespace {

// The header as JSON: valid UTF-8, one object, no key given twice in any object (nlohmann silently keeps the last
// one).
json parse_header_json(std::span<const uint8_t> bytes, const std::string& where) {
  int64_t bad = first_invalid_utf8(bytes);
  EMBER_CHECK(bad < 0, where, ": the header is not valid UTF-8 (byte ", bad, " of the header)");
  size_t first = 0;
  while (first < bytes.size() &&
         (bytes[first] == ' ' || bytes[first] == '\t' || bytes[first] == '\n' || bytes[first] == '\r'))
    ++first;
  EMBER_CHECK(first < bytes.size() && bytes[first] == '{', where,
              ": the header must be a JSON object starting with '{' (", bytes.size(), " header bytes)");

  // Parse, noting duplicate keys in any object.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  size_t duplicate_depth = 0;
  json j;
  try {
    j = json::parse(bytes.begin(), bytes.end(), [&](int, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::object_start) {
        keys.emplace_back();
      } else if (ev == json::parse_event_t::object_end) {
        if (!keys.empty()) keys.pop_back();
      } else if (ev == json::parse_event_t::key && !keys.empty()) {
        if (!keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
          duplicate_depth = keys.size();
        }
      }
      return true;
    });
  } catch (const json::exception& e) {
    EMBER_FAIL(where, ": the header is not valid JSON: ", e.what());
  }
  EMBER_CHECK(duplicate.empty(), where, duplicate_depth == 1 ? ": duplicate tensor name '" : ": duplicate key '",
              duplicate, duplicate_depth == 1 ? "' in the header" : "' inside an entry of the header");
  EMBER_CHECK(j.is_object(), where, ": the header must be a JSON object, got ", j.type_name());
  return j;
}

void read_metadata(const json& v, Metadata& metadata, const std::string& where) {
  EMBER_CHECK(v.is_object(), where, ": __metadata__ must be an object of strings, got ", v.type_name());
  for (auto m = v.begin(); m != v.end(); ++m) {
    EMBER_CHECK(m.value().is_string(), where, ": __metadata__ value of '", m.key(), "' must be a string, got ",
                m.value().dump());
    metadata[m.key()] = m.value().get<std::string>();
  }
}

// One tensor's entry: its fields, a dtype ember has, a shape whose byte size fits 64 bits, and data_offsets inside the
// byte buffer spanning exactly that size.
SafetensorsEntry parse_entry(const std::string& name, const json& v, uint64_t data_size, const std::string& where) {
  EMBER_CHECK(v.is_object(), where, ": tensor '", name,
              "' must map to an object with dtype, shape and data_offsets, got ", v.type_name());
  for (auto f = v.begin(); f != v.end(); ++f)
    EMBER_CHECK(f.key() == "dtype" || f.key() == "shape" || f.key() == "data_offsets", where, ": tensor '", name,
                "' has an unexpected field '", f.key(), "'");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    EMBER_CHECK(v.contains(field), where, ": tensor '", name, "' lacks the field '", field, "'");
  SafetensorsEntry e;
  e.name = name;
  EMBER_CHECK(v["dtype"].is_string(), where, ": tensor '", name, "': dtype must be a string, got ", v["dtype"].dump());
  e.dtype = parse_dtype_name(v["dtype"].get<std::string>(), name, where);
  const json& shape = v["shape"];
  EMBER_CHECK(shape.is_array(), where, ": tensor '", name, "': shape must be an array, got ", shape.dump());
  EMBER_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), where, ": tensor '", name, "' has ", shape.size(),
              " dimensions; ember tensors have at most ", kMaxDims);
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : shape) {
    uint64_t dim = as_u64(d, str("a dimension of tensor '", name, "'"), where);
    EMBER_CHECK(dim <= static_cast<uint64_t>(INT64_MAX), where, ": tensor '", name, "' has dimension ", dim,
                ", too large");
    e.shape.push_back(static_cast<int64_t>(dim));
    overflow = overflow || __builtin_mul_overflow(numel, dim, &numel);
  }
  uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes);
  overflow = overflow || numel > static_cast<uint64_t>(INT64_MAX);
  EMBER_CHECK(!overflow, where, ": tensor '", name, "' of shape ", shape.dump(), " and dtype ",
              v["dtype"].get<std::string>(), " has a byte size that overflows 64 bits");
  const json& off = v["data_offsets"];
  EMBER_CHECK(off.is_array() && off.size() == 2, where, ": tensor '", name,
              "': data_offsets must be an array [begin, end], got ", off.dump());
  e.begin = as_u64(off[0], str("data_offsets[0] of tensor '", name, "'"), where);
  e.end = as_u64(off[1], str("data_offsets[1] of tensor '", name, "'"), where);
  EMBER_CHECK(e.begin <= e.end, where, ": tensor '", name, "' has data_offsets [", e.begin, ", ", e.end,
              "] with begin after end");
  EMBER_CHECK(e.end <= data_size, where, ": tensor '", name, "' has data_offsets [", e.begin, ", ", e.end,
              "] out of range: the byte buffer after the header is ", data_size, " bytes");
  EMBER_CHECK(e.end - e.begin == nbytes, where, ": tensor '", name, "' of shape ", shape.dump(), " and dtype ",
              v["dtype"].get<std::string>(), " needs ", nbytes, " bytes but its data_offsets [", e.begin, ", ", e.end,
              "] span ", e.end - e.begin);
  return e;
}

// Sorts the entries by offset and checks that they tile the byte buffer exactly: no gap, no overlap, nothing after.
void check_tiling(std::vector<SafetensorsEntry>& entries, uint64_t data_size, const std::string& where) {
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : (a.end != b.end ? a.end < b.end : a.name < b.name);
  });
  uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries) {
    EMBER_CHECK(e.begin <= pos, where, ": gap in the byte buffer: bytes [", pos, ", ", e.begin, ") before tensor '",
                e.name, "' belong to no tensor");
    EMBER_CHECK(e.begin >= pos, where, ": tensor '", e.name, "' [", e.begin, ", ", e.end, ") overlaps tensor '",
                prev != nullptr ? prev->name : std::string("?"), "' which ends at ", pos);
    pos = e.end;
    if (e.end > e.begin) prev = &e;
  }
  EMBER_CHECK(pos == data_size, where, ": ", data_size - pos,
              " trailing bytes after the last tensor (the tensors end at ", pos, " of a ", data_size, "-byte buffer)");
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t data_size,
                                           const std::string& where) {
  SafetensorsHeader h;
  h.header_size = bytes.size();
  h.data_size = data_size;
  const json j = parse_header_json(bytes, where);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") read_metadata(it.value(), h.metadata, where);
    else h.entries.push_back(parse_entry(it.key(), it.value(), data_size, where));
  }
  check_tiling(h.entries, data_size, where);
  return h;
}

// ---- writing ----

namespace {

struct Layout {
  std::string header;  // padded JSON
  std::vector<std::pair<const std::string*, Tensor>> order;
};

Layout make_layout(const TensorDict& tensors, const Metadata& metadata) {
  Layout L;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    EMBER_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    L.order.emplace_back(&name, t);
  }
  // Widest dtypes first so every tensor starts at a multiple of its element size (the buffer starts
  // 8-byte aligned); then by name, for a deterministic file.
  std::stable_sort(L.order.begin(), L.order.end(), [](const auto& a, const auto& b) {
    size_t sa = a.second.element_size(), sb = b.second.element_size();
    return sa != sb ? sa > sb : *a.first < *b.first;
  });
  json h = json::object();
  json meta = json::object();
  meta["format"] = "pt";
  meta["ember.version"] = "0.1.0";
  for (const auto& [k, v] : metadata) meta[k] = v;
  h["__metadata__"] = meta;
  uint64_t pos = 0;
  for (const auto& [name, t] : L.order) {
    json e = json::object();
    e["dtype"] = safetensors_dtype_name(t.dtype());
    json shape = json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    e["shape"] = shape;
    e["data_offsets"] = json::array({pos, pos + t.nbytes()});
    pos += t.nbytes();
    h[*name] = e;
  }
  L.header = h.dump();
  while (L.header.size() % 8 != 0) L.header.push_back(' ');
  return L;
}

// The bytes of t: contiguous, on the host.
Tensor host_bytes(const Tensor& t) {
  autograd::NoGradGuard ng;
  Tensor c = t.detach();
  if (!c.is_cpu()) c = c.to(kCPU);
  if (!c.is_contiguous()) c = c.contiguous();
  return c;
}

void le_u64(uint64_t v, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

std::vector<uint8_t> to_safetensors_bytes(const TensorDict& tensors, const Metadata& metadata) {
  Layout L = make_layout(tensors, metadata);
  size_t total = 8 + L.header.size();
  for (const auto& entry : L.order) total += entry.second.nbytes();
  std::vector<uint8_t> out(total);
  le_u64(L.header.size(), out.data());
  std::memcpy(out.data() + 8, L.header.data(), L.header.size());
  size_t pos = 8 + L.header.size();
  for (const auto& entry : L.order) {
    Tensor c = host_bytes(entry.second);
    if (c.nbytes() > 0) std::memcpy(out.data() + pos, c.data_ptr(), c.nbytes());
    pos += c.nbytes();
  }
  return out;
}

void save_safetensors(const std::string& path, const TensorDict& tensors, const Metadata& metadata) {
  Layout L = make_layout(tensors, metadata);
  AtomicFile f(path);
  uint8_t len[8];
  le_u64(L.header.size(), len);
  f.write(len, 8);
  f.write(L.header.data(), L.header.size());
  for (const auto& [name, t] : L.order) {
    Tensor c = host_bytes(t);
    if (c.nbytes() > 0) f.write(c.data_ptr(), c.nbytes());
  }
  f.commit();
}

// ---- reading ----

namespace {

// Creates the tensors after validation; `read(entry, dst)` fills dst with the entry's bytes.
template <class Read>
SafetensorsFile materialize(SafetensorsHeader&& h, Device device, Read&& read) {
  SafetensorsFile f;
  f.metadata = std::move(h.metadata);
  for (const SafetensorsEntry& e : h.entries) {
    Tensor t = empty(e.shape, TensorOptions(e.dtype));
    if (t.nbytes() > 0) read(e, t.data_ptr());
    if (e.dtype == DType::boolean) {
      // A bool byte other than 0/1 would be an invalid C++ bool: normalise.
      auto* p = static_cast<uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0 ? 1 : 0;
    }
    if (!device.is_cpu()) t = t.to(device);
    f.tensors.insert(e.name, t);
  }
  return f;
}

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(open_regular_file(path)) {}  // never blocks on a FIFO
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

uint64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  EMBER_CHECK(::fstat(fd, &st) == 0, "cannot stat '", path, "': ", std::strerror(errno));
  EMBER_CHECK(S_ISREG(st.st_mode), "'", path, "' is ", file_kind_name(st.st_mode), ", not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

void pread_all(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    EMBER_CHECK(
        r > 0, "reading '", path, "' at offset ", offset, " failed: ",
        r == 0 ? std::string("unexpected end of file (was it truncated while reading?)") : std::strerror(errno));
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

SafetensorsHeader read_header_fd(int fd, const std::string& path) {
  const std::string where = "safetensors file '" + path + "'";
  uint64_t size = file_size(fd, path);
  EMBER_CHECK(size >= 8, where, " is ", size, " bytes; a safetensors file starts with an 8-byte header length");
  uint8_t len[8];
  pread_all(fd, len, 8, 0, path);
  uint64_t n = read_u64_le(len);
  check_header_length(n, size, where);
  std::vector<uint8_t> header(static_cast<size_t>(n));
  if (n > 0) pread_all(fd, header.data(), n, 8, path);
  return parse_safetensors_header(header, size - 8 - n, where);
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  Fd fd(path);
  return read_header_fd(fd.get(), path);
}

SafetensorsFile load_safetensors(const std::string& path, Device device) {
  Fd fd(path);
  SafetensorsHeader h = read_header_fd(fd.get(), path);
  const uint64_t base = 8 + h.header_size;
  return materialize(std::move(h), device, [&](const SafetensorsEntry& e, void* dst) {
    pread_all(fd.get(), dst, e.end - e.begin, base + e.begin, path);
  });
}

SafetensorsFile from_safetensors_bytes(std::span<const uint8_t> bytes, Device device, const std::string& where) {
  EMBER_CHECK(bytes.size() >= 8, where, " is ", bytes.size(),
              " bytes; a safetensors file starts with an 8-byte header length");
  uint64_t n = read_u64_le(bytes.data());
  check_header_length(n, bytes.size(), where);
  SafetensorsHeader h = parse_safetensors_header(bytes.subspan(8, static_cast<size_t>(n)), bytes.size() - 8 - n, where);
  const uint8_t* base = bytes.data() + 8 + n;
  return materialize(std::move(h), device, [&](const SafetensorsEntry& e, void* dst) {
    std::memcpy(dst, base + e.begin, static_cast<size_t>(e.end - e.begin));
  });
}

}  // namespace ember::io
