// safetensors: exact layout, round trips of every dtype, one test per kind of bad input, and the
// atomic-write guarantee (a crash mid-save keeps the previous file).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <fstream>

#include "core/rng.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "kernels/functional.h"
#include "nn/linear.h"

using namespace ember;

namespace {

// A scratch directory under the build tree, removed when the test program exits.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    std::string pattern = std::string(EMBER_BINARY_DIR) + "/test_safetensors.XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

std::string temp_dir() {
  static ScratchDir dir;
  REQUIRE(!dir.path.empty());
  return dir.path;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A file from a raw header string and data bytes (length field = header size unless given).
std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes, int64_t length_field = -1) {
  uint64_t n = length_field < 0 ? header.size() : static_cast<uint64_t>(length_field);
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

// A tensor's entry in a hand-written header: shape and offsets as JSON arrays, spaced as typed.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": " + offsets +
         "}";
}

// The header object of these entries, in order.
std::string header(const std::vector<std::string>& entries) {
  std::string h = "{";
  for (size_t i = 0; i < entries.size(); ++i) h += (i > 0 ? ", " : "") + entries[i];
  return h + "}";
}

// Checks that the bytes are rejected with `msg`, both from memory and from a file.
void rejects(const std::vector<uint8_t>& bytes, const std::string& msg) {
  INFO("expecting: " << msg);
  CHECK_THROWS_WITH(io::from_safetensors_bytes(bytes), Catch::Contains(msg));
  std::string path = temp_dir() + "/bad.safetensors";
  write_file(path, bytes);
  CHECK_THROWS_WITH(io::load_safetensors(path), Catch::Contains(msg) && Catch::Contains(path));
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
  closedir(d);
  return out;
}

}  // namespace

TEST_CASE("safetensors layout: LE header length, padded JSON, metadata, exact offsets", "[safetensors]") {
  TensorDict d;
  d.insert("b", tensor({1, 2, 3}, DType::f16));
  d.insert("a", tensor({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64));
  d.insert("mask", tensor({1, 0, 1}, DType::boolean));
  std::vector<uint8_t> bytes = io::to_safetensors_bytes(d, {{"note", "hello"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  CHECK(n % 8 == 0);
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  CHECK(header.front() == '{');
  CHECK(header.find("\"__metadata__\":{\"ember.version\":\"0.1.0\",\"format\":\"pt\",\"note\":\"hello\"}") !=
        std::string::npos);
  // widest dtype first: a (F64, 48 bytes) at 0, then b (F16, 6 bytes), then mask (BOOL, 3 bytes)
  CHECK(header.find("\"a\":{\"data_offsets\":[0,48],\"dtype\":\"F64\",\"shape\":[2,3]}") != std::string::npos);
  CHECK(header.find("\"b\":{\"data_offsets\":[48,54],\"dtype\":\"F16\",\"shape\":[3]}") != std::string::npos);
  CHECK(header.find("\"mask\":{\"data_offsets\":[54,57],\"dtype\":\"BOOL\",\"shape\":[3]}") != std::string::npos);
  CHECK(bytes.size() == 8 + n + 57);
  io::SafetensorsHeader h = io::parse_safetensors_header(std::span(bytes).subspan(8, n), 57);
  REQUIRE(h.entries.size() == 3);
  CHECK(h.metadata.at("format") == "pt");
  // 1.0 as f64 little-endian at the start of the buffer
  double first;
  std::memcpy(&first, bytes.data() + 8 + n, 8);
  CHECK(first == 1.0);
}

TEST_CASE("safetensors round trip of every dtype, scalars, empty and non-contiguous tensors", "[safetensors]") {
  manual_seed(4);
  TensorDict d;
  d.insert("f32", randn({3, 4}));
  d.insert("f64", randn({5}, DType::f64));
  d.insert("f16", randn({2, 2}).to(DType::f16));
  d.insert("bf16", randn({7}).to(DType::bf16));
  d.insert("i32", tensor({-1, 2, 3}, DType::i32));
  d.insert("i64", tensor_i64({1LL << 40, -5}, {2}));
  d.insert("u8", tensor({0, 255, 7}, DType::u8));
  d.insert("bool", tensor({1, 0}, DType::boolean));
  d.insert("scalar", scalar_tensor(3.5));
  d.insert("empty", zeros({0, 3}));
  d.insert("transposed", randn({3, 5}).t());
  std::string path = temp_dir() + "/all.safetensors";
  io::save_safetensors(path, d, {{"k", "v"}});
  io::SafetensorsFile f = io::load_safetensors(path);
  CHECK(f.metadata.at("k") == "v");
  CHECK(f.metadata.at("format") == "pt");
  REQUIRE(f.tensors.size() == d.size());
  for (const auto& [name, t] : d) {
    INFO(name);
    const Tensor& g = f.tensors.at(name);
    CHECK(g.dtype() == t.dtype());
    CHECK(g.shape() == t.shape());
    CHECK(g.to_vector<double>() == t.to_vector<double>());
  }
  // the same bytes from memory
  io::SafetensorsFile m = io::from_safetensors_bytes(read_file(path));
  CHECK(m.tensors.at("f32").to_vector<float>() == d.at("f32").to_vector<float>());
  CHECK(io::read_safetensors_header(path).entries.size() == d.size());
  // module weights through a file
  nn::Linear a(nn::LinearOptions(3, 2)), b(nn::LinearOptions(3, 2));
  io::save_safetensors(path, a->state_dict());
  b->load_state_dict(io::load_safetensors(path).tensors);
  CHECK(b->weight.to_vector<float>() == a->weight.to_vector<float>());
  CHECK_THROWS_WITH(io::save_safetensors(path, TensorDict{{"__metadata__", zeros({1})}}), Catch::Contains("reserved"));
}

TEST_CASE("safetensors bad input: fewer than 8 bytes", "[safetensors][bad]") {
  rejects({1, 2, 3}, "is 3 bytes; a safetensors file starts with an 8-byte header length");
  rejects({}, "is 0 bytes");
}

TEST_CASE("safetensors bad input: header length beyond the file", "[safetensors][bad]") {
  rejects(make_file("{}      ", 0, 64), "header length 64 goes beyond the file (16 bytes");
}

TEST_CASE("safetensors bad input: header length over 100 MB", "[safetensors][bad]") {
  rejects(make_file("{}      ", 0, 200'000'000), "over the 100 MB limit");
}

TEST_CASE("safetensors bad input: non-UTF-8 header", "[safetensors][bad]") {
  rejects(make_file("{\"a\xff\":1}", 0), "not valid UTF-8 (byte 3 of the header)");
  rejects(make_file("{\"\xed\xa0\x80\":1}", 0), "not valid UTF-8");  // a UTF-16 surrogate
  rejects(make_file("{\"\xc0\xaf\":1}", 0), "not valid UTF-8");      // overlong '/'
}

TEST_CASE("safetensors bad input: malformed JSON", "[safetensors][bad]") {
  rejects(make_file("{\"a\": {\"dtype\": \"F32\",", 0), "not valid JSON");
  rejects(make_file("[1, 2, 3]", 0), "must be a JSON object starting with '{'");
  rejects(make_file("{\"a\": 3}", 0), "tensor 'a' must map to an object");
  rejects(make_file("{\"__metadata__\": {\"k\": 1}}", 0), "__metadata__ value of 'k' must be a string");
  rejects(make_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 0), "lacks the field 'data_offsets'");
  rejects(make_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"x\": 1}}", 4),
          "unexpected field 'x'");
  rejects(make_file(header({entry("a", "F32", "[-1]", "[0, 4]")}), 4), "must be a non-negative integer, got -1");
  rejects(make_file(header({entry("a", "F32", "[1,1,1,1,1,1,1,1,1]", "[0, 4]")}), 4),
          "has 9 dimensions; ember tensors have at most 8");
}

TEST_CASE("safetensors bad input: unknown dtype", "[safetensors][bad]") {
  rejects(make_file(header({entry("w", "F33", "[1]", "[0, 4]")}), 4), "tensor 'w' has unknown dtype 'F33'");
  rejects(make_file(header({entry("w", "I16", "[2]", "[0, 4]")}), 4),
          "dtype I16, a valid safetensors dtype that ember does not support");
}

TEST_CASE("safetensors bad input: offsets with a gap", "[safetensors][bad]") {
  rejects(make_file(header({entry("a", "F32", "[1]", "[0, 4]"), entry("b", "F32", "[1]", "[8, 12]")}), 12),
          "gap in the byte buffer: bytes [4, 8) before tensor 'b'");
  rejects(make_file(header({entry("a", "F32", "[1]", "[4, 8]")}), 8), "bytes [0, 4)");
}

TEST_CASE("safetensors bad input: overlapping offsets", "[safetensors][bad]") {
  rejects(make_file(header({entry("a", "F32", "[2]", "[0, 8]"), entry("b", "F32", "[1]", "[4, 8]")}), 8),
          "tensor 'b' [4, 8) overlaps tensor 'a' which ends at 8");
}

TEST_CASE("safetensors bad input: offsets out of range", "[safetensors][bad]") {
  rejects(make_file(header({entry("a", "F32", "[2]", "[0, 8]")}), 4),
          "data_offsets [0, 8] out of range: the byte buffer after the header is 4 bytes");
  rejects(make_file(header({entry("a", "F32", "[0]", "[8, 4]")}), 8), "begin after end");
  rejects(make_file(header({entry("a", "F32", "[1]", "[0]")}), 4), "data_offsets must be an array [begin, end]");
}

TEST_CASE("safetensors bad input: shape x dtype size mismatch", "[safetensors][bad]") {
  rejects(make_file(header({entry("a", "F64", "[2]", "[0, 8]")}), 8),
          "tensor 'a' of shape [2] and dtype F64 needs 16 bytes but its data_offsets [0, 8] span 8");
}

TEST_CASE("safetensors bad input: shape x dtype size overflow", "[safetensors][bad]") {
  rejects(make_file(header({entry("a", "F32", "[4294967296, 4294967296]", "[0, 8]")}), 8),
          "has a byte size that overflows 64 bits");
  rejects(make_file(header({entry("a", "F64", "[4611686018427387904]", "[0, 8]")}), 8), "overflows 64 bits");
}

TEST_CASE("safetensors bad input: trailing bytes", "[safetensors][bad]") {
  rejects(make_file(header({entry("a", "F32", "[1]", "[0, 4]")}), 6), "2 trailing bytes after the last tensor");
  rejects(make_file("{}", 3), "3 trailing bytes");
}

TEST_CASE("safetensors bad input: duplicate names", "[safetensors][bad]") {
  rejects(make_file(header({entry("a", "F32", "[1]", "[0, 4]"), entry("a", "F32", "[1]", "[4, 8]")}), 8),
          "duplicate tensor name 'a'");
  rejects(make_file("{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4),
          "duplicate key 'dtype'");
}

TEST_CASE("safetensors bad input: missing and unexpected keys under strict loading", "[safetensors][bad]") {
  nn::Linear a(nn::LinearOptions(3, 2)), b(nn::LinearOptions(3, 2).bias(false));
  std::string path = temp_dir() + "/linear.safetensors";
  io::save_safetensors(path, b->state_dict());
  CHECK_THROWS_WITH(a->load_state_dict(io::load_safetensors(path).tensors),
                    Catch::Contains("missing key(s): \"bias\""));
  io::save_safetensors(path, a->state_dict());
  CHECK_THROWS_WITH(b->load_state_dict(io::load_safetensors(path).tensors),
                    Catch::Contains("unexpected key(s): \"bias\""));
  b->load_state_dict(io::load_safetensors(path).tensors, /*strict=*/false);
  CHECK(b->weight.to_vector<float>() == a->weight.to_vector<float>());
}

TEST_CASE("safetensors bad input: shape mismatch against the module", "[safetensors][bad]") {
  nn::Linear a(nn::LinearOptions(3, 2)), b(nn::LinearOptions(4, 2));
  std::string path = temp_dir() + "/linear.safetensors";
  io::save_safetensors(path, a->state_dict());
  CHECK_THROWS_WITH(b->load_state_dict(io::load_safetensors(path).tensors),
                    Catch::Contains("weight: the checkpoint has shape [2, 3], the module [2, 4]"));
}

TEST_CASE("safetensors bad input: a file truncated after validation of its size", "[safetensors][bad]") {
  TensorDict d{{"x", randn({100})}};
  std::vector<uint8_t> bytes = io::to_safetensors_bytes(d);
  bytes.resize(bytes.size() - 10);
  rejects(bytes, "data_offsets [0, 400] out of range: the byte buffer after the header is 390 bytes");
}

TEST_CASE("safetensors atomic save: an interrupted write keeps the previous file", "[safetensors][atomic]") {
  const std::string dir = temp_dir() + "/atomic";
  ::mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/ckpt.safetensors";
  TensorDict v1{{"w", full({1000}, 1.0)}}, v2{{"w", full({1000}, 2.0)}};
  io::save_safetensors(path, v1);
  std::vector<uint8_t> original = read_file(path);

  // An I/O error half way: the exception reaches the caller, the temporary file is removed.
  io::set_write_fault_for_testing(io::WriteFault::kThrow, 2000);
  CHECK_THROWS_WITH(io::save_safetensors(path, v2), Catch::Contains("injected write fault after 2000 bytes"));
  io::set_write_fault_for_testing(io::WriteFault::kNone);
  CHECK(read_file(path) == original);
  CHECK(list_dir(dir) == std::vector<std::string>{"ckpt.safetensors"});

  // A crash half way (the process dies inside write: no destructor, no cleanup).
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    io::set_write_fault_for_testing(io::WriteFault::kExit, 2000);
    io::save_safetensors(path, v2);
    _exit(0);  // not reached
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 99);
  CHECK(read_file(path) == original);
  CHECK(io::load_safetensors(path).tensors.at("w").to_vector<float>()[999] == 1.0f);
  std::vector<std::string> files = list_dir(dir);
  CHECK(files.size() == 2);  // the target and the torn temporary file, never renamed
  for (const std::string& f : files)
    if (f != "ckpt.safetensors") {
      CHECK(f.find(".ckpt.safetensors.tmp.") == 0);
      ::unlink((dir + "/" + f).c_str());
    }

  // A complete save replaces it.
  io::save_safetensors(path, v2);
  CHECK(io::load_safetensors(path).tensors.at("w").to_vector<float>()[0] == 2.0f);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  CHECK_THROWS_WITH(io::save_safetensors(dir + "/no/such/dir/x.safetensors", v1),
                    Catch::Contains("cannot create a temporary file next to"));
}
