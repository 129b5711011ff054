#include "logging/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace ember::logging {

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> tab{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
      tab[i] = c;
    }
    return tab;
  }();
  return t;
}

// ---- protobuf encoding (just what the Event message needs) ----

void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}
void put_tag(std::string& s, int field, int wire) {
  put_varint(s, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire));
}
void put_fixed64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_fixed32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_bytes(std::string& s, int field, const std::string& b) {
  put_tag(s, field, 2);
  put_varint(s, b.size());
  s += b;
}
void put_double(std::string& s, int field, double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  put_tag(s, field, 1);
  put_fixed64(s, u);
}

std::string event(double wall, int64_t step, const std::string* file_version, const std::string* summary) {
  std::string e;
  put_double(e, 1, wall);
  put_tag(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  if (file_version != nullptr) put_bytes(e, 3, *file_version);
  if (summary != nullptr) put_bytes(e, 5, *summary);
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- decoding (tests and tools) ----

struct Reader {
  const std::string& s;
  size_t pos = 0;
  bool done() const { return pos >= s.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      EMBER_CHECK(pos < s.size(), "protobuf: truncated varint");
      auto b = static_cast<uint8_t>(s[pos++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    EMBER_FAIL("protobuf: varint too long");
  }
  std::string bytes() {
    uint64_t n = varint();
    EMBER_CHECK(n <= s.size() - pos, "protobuf: length ", n, " beyond the message");
    std::string b = s.substr(pos, n);
    pos += n;
    return b;
  }
  void skip(int wire) {
    if (wire == 0) varint();
    else if (wire == 1) pos += 8;
    else if (wire == 2) bytes();
    else if (wire == 5) pos += 4;
    else EMBER_FAIL("protobuf: unsupported wire type ", wire);
    EMBER_CHECK(pos <= s.size(), "protobuf: truncated field");
  }
  uint32_t fixed32() {
    EMBER_CHECK(s.size() - pos >= 4, "protobuf: truncated fixed32");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[pos++])) << (8 * i);
    return v;
  }
};

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = crc_table()[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  EMBER_CHECK(!ec, "tensorboard: cannot create directory ", dir, ": ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) +
                                         "." + host + "." + std::to_string(getpid())))
              .string();
  out_ = std::make_unique<io::AppendFile>(path_);
  std::string version = "brain.Event:2";
  write_record(event(now_seconds(), 0, &version, nullptr));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() = default;

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  std::string v;
  put_bytes(v, 1, tag);
  float f = static_cast<float>(value);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  put_tag(v, 2, 5);
  put_fixed32(v, u);
  std::string summary;
  put_bytes(summary, 1, v);
  write_record(event(now_seconds(), step, nullptr, &summary));
}

void TensorBoardWriter::flush() {}  // every record is written at once (no user-space buffer)

void TensorBoardWriter::write_record(const std::string& payload) {
  std::string header;
  put_fixed64(header, payload.size());
  std::string crc1, crc2;
  put_fixed32(crc1, masked_crc32c(header.data(), header.size()));
  put_fixed32(crc2, masked_crc32c(payload.data(), payload.size()));
  out_->append(header + crc1 + payload + crc2);
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EMBER_CHECK(f.good(), "tfrecord: cannot open ", path);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t pos = 0;
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(all[at + i])) << (8 * i);
    return v;
  };
  while (pos < all.size()) {
    EMBER_CHECK(all.size() - pos >= 12, path, ": truncated record header at offset ", pos);
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<uint8_t>(all[pos + i])) << (8 * i);
    EMBER_CHECK(u32(pos + 8) == masked_crc32c(all.data() + pos, 8), path, ": bad length CRC in record ", out.size(),
                " at offset ", pos);
    EMBER_CHECK(len <= all.size() - pos - 12 && all.size() - pos - 12 - len >= 4, path, ": record ", out.size(),
                " at offset ", pos, " declares ", len, " bytes beyond the end of the file");
    std::string payload = all.substr(pos + 12, len);
    EMBER_CHECK(u32(pos + 12 + len) == masked_crc32c(payload.data(), payload.size()), path, ": bad data CRC in record ",
                out.size(), " at offset ", pos);
    out.push_back(std::move(payload));
    pos += 12 + len + 4;
  }
  return out;
}

std::vector<ScalarEvent> decode_scalars(const std::string& payload) {
  std::vector<ScalarEvent> out;
  Reader r{payload};
  int64_t step = 0;
  std::vector<std::string> summaries;
  while (!r.done()) {
    uint64_t key = r.varint();
    int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 2 && wire == 0) step = static_cast<int64_t>(r.varint());
    else if (field == 5 && wire == 2) summaries.push_back(r.bytes());
    else r.skip(wire);
  }
  for (const std::string& s : summaries) {
    Reader sr{s};
    while (!sr.done()) {
      uint64_t key = sr.varint();
      if ((key >> 3) == 1 && (key & 7) == 2) {
        std::string v = sr.bytes();
        Reader vr{v};
        ScalarEvent ev;
        ev.step = step;
        while (!vr.done()) {
          uint64_t k = vr.varint();
          if ((k >> 3) == 1 && (k & 7) == 2) ev.tag = vr.bytes();
          else if ((k >> 3) == 2 && (k & 7) == 5) {
            uint32_t u = vr.fixed32();
            std::memcpy(&ev.value, &u, 4);
          } else vr.skip(static_cast<int>(k & 7));
        }
        out.push_back(ev);
      } else {
        sr.skip(static_cast<int>(key & 7));
      }
    }
  }
  return out;
}

}  // namespace ember::logging
