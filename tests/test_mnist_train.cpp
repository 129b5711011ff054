// mnist_train end to end: the program is run as a child process (posix_spawn) on small IDX sets
// the tests write themselves (and on a Fashion-MNIST subset when the Debian package is
// installed), and its exit codes, stderr and output files are checked: the CLI's error paths,
// --help, training on raw and gzip'd files, resume vs an uninterrupted run (bit for bit), the
// TensorBoard records (decoded here, CRC-32C computed here), the Chrome trace, the SVG plot, the
// JSONL log, --eval-only and the CPU ablation.
//
// Every run passes --device cpu so the results are the same on machines with and without a GPU.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/runtime.h"
#include "tests/data_test_util.h"
#include "tests/mnist_train_util.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

using namespace ember::testing::app;

// ---- CRC-32C and a TFRecord / Event decoder, written from the formats' definitions ----

uint32_t crc32c_bitwise(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t little_endian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + static_cast<size_t>(i)]);
  return v;
}
uint64_t le64(const std::string& s, size_t at) { return little_endian(s, at, 8); }
uint32_t le32(const std::string& s, size_t at) { return static_cast<uint32_t>(little_endian(s, at, 4)); }

// TFRecord framing: u64 length, u32 masked CRC of the length bytes, payload, u32 masked CRC of the
// payload. Returns the payloads; an error string names the first bad record.
std::vector<std::string> decode_tfrecords(const std::string& file, std::string& error) {
  std::vector<std::string> payloads;
  size_t at = 0;
  while (at < file.size()) {
    const std::string where = "record " + std::to_string(payloads.size()) + " at offset " + std::to_string(at);
    if (file.size() - at < 12) {
      error = where + ": truncated header";
      return payloads;
    }
    const uint64_t len = le64(file, at);
    if (le32(file, at + 8) != masked(crc32c_bitwise(file.data() + at, 8))) {
      error = where + ": bad length CRC";
      return payloads;
    }
    if (file.size() - at - 12 < len + 4) {
      error = where + ": truncated payload";
      return payloads;
    }
    std::string payload = file.substr(at + 12, len);
    if (le32(file, at + 12 + len) != masked(crc32c_bitwise(payload.data(), payload.size()))) {
      error = where + ": bad payload CRC";
      return payloads;
    }
    payloads.push_back(payload);
    at += 12 + len + 4;
  }
  return payloads;
}

// Protocol buffer wire format: the fields of one message as (field number, wire type, bytes).
struct Field {
  int number = 0, wire = 0;
  uint64_t varint = 0;
  std::string bytes;  // length-delimited, fixed32 or fixed64 content
};

bool read_varint(const std::string& s, size_t& at, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && at < s.size(); shift += 7) {
    const auto b = static_cast<uint8_t>(s[at++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

bool decode_message(const std::string& s, std::vector<Field>& fields) {
  size_t at = 0;
  while (at < s.size()) {
    uint64_t key = 0;
    if (!read_varint(s, at, key)) return false;
    Field f;
    f.number = static_cast<int>(key >> 3);
    f.wire = static_cast<int>(key & 7);
    if (f.wire == 0) {
      if (!read_varint(s, at, f.varint)) return false;
    } else if (f.wire == 1 || f.wire == 5) {
      const size_t n = f.wire == 1 ? 8 : 4;
      if (s.size() - at < n) return false;
      f.bytes = s.substr(at, n);
      at += n;
    } else if (f.wire == 2) {
      uint64_t n = 0;
      if (!read_varint(s, at, n) || s.size() - at < n) return false;
      f.bytes = s.substr(at, n);
      at += n;
    } else {
      return false;
    }
    fields.push_back(f);
  }
  return true;
}

// ---- a small XML well-formedness checker (elements nest, attributes are quoted, entities are
// known, no stray '<' or '&'); returns the root element's name, or "" with `error` set ----

bool xml_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ':' || c == '.';
}

bool xml_text_ok(const std::string& t, std::string& error) {
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '<') {
      error = "stray '<' in text or attribute";
      return false;
    }
    if (t[i] == '&') {
      size_t semi = t.find(';', i);
      std::string ent = semi == std::string::npos ? "" : t.substr(i + 1, semi - i - 1);
      static const std::set<std::string> known = {"lt", "gt", "amp", "quot", "apos"};
      bool numeric = ent.size() > 1 && ent[0] == '#';
      if (!known.count(ent) && !numeric) {
        error = "unknown or unterminated entity near '" + t.substr(i, 12) + "'";
        return false;
      }
    }
  }
  return true;
}

std::string check_xml(const std::string& doc, std::string& error, std::map<std::string, int>* counts = nullptr) {
  std::vector<std::string> stack;
  std::string root;
  size_t at = 0;
  bool closed_root = false;
  while (at < doc.size()) {
    size_t lt = doc.find('<', at);
    std::string text = doc.substr(at, lt == std::string::npos ? std::string::npos : lt - at);
    if (!xml_text_ok(text, error)) return "";
    if (stack.empty() && text.find_first_not_of(" \t\r\n") != std::string::npos) {
      error = "text outside the root element";
      return "";
    }
    if (lt == std::string::npos) break;
    if (doc.compare(lt, 4, "<!--") == 0) {
      size_t end = doc.find("-->", lt + 4);
      if (end == std::string::npos) return error = "unterminated comment", "";
      at = end + 3;
      continue;
    }
    if (doc.compare(lt, 2, "<?") == 0) {
      size_t end = doc.find("?>", lt + 2);
      if (end == std::string::npos) return error = "unterminated processing instruction", "";
      at = end + 2;
      continue;
    }
    if (doc.compare(lt, 2, "<!") == 0) {  // a DOCTYPE (no internal subset in SVG files)
      size_t end = doc.find('>', lt);
      if (end == std::string::npos) return error = "unterminated declaration", "";
      at = end + 1;
      continue;
    }
    size_t i = lt + 1;
    const bool closing = i < doc.size() && doc[i] == '/';
    if (closing) ++i;
    size_t name_start = i;
    while (i < doc.size() && xml_name_char(doc[i])) ++i;
    std::string name = doc.substr(name_start, i - name_start);
    if (name.empty()) return error = "a tag without a name at offset " + std::to_string(lt), "";
    if (closing) {
      while (i < doc.size() && std::isspace(static_cast<unsigned char>(doc[i]))) ++i;
      if (i >= doc.size() || doc[i] != '>') return error = "malformed closing tag </" + name, "";
      if (stack.empty() || stack.back() != name)
        return error = "</" + name + "> closes <" + (stack.empty() ? std::string("nothing") : stack.back()) + ">", "";
      stack.pop_back();
      if (stack.empty()) closed_root = true;
      at = i + 1;
      continue;
    }
    if (closed_root) return error = "a second root element <" + name + ">", "";
    if (root.empty()) root = name;
    if (counts) ++(*counts)[name];
    std::set<std::string> attrs;
    for (;;) {
      while (i < doc.size() && std::isspace(static_cast<unsigned char>(doc[i]))) ++i;
      if (i >= doc.size()) return error = "unterminated tag <" + name, "";
      if (doc[i] == '>' || doc.compare(i, 2, "/>") == 0) break;
      size_t a = i;
      while (i < doc.size() && xml_name_char(doc[i])) ++i;
      std::string attr = doc.substr(a, i - a);
      if (attr.empty() || i >= doc.size() || doc[i] != '=')
        return error = "malformed attribute in <" + name + "> at offset " + std::to_string(a), "";
      if (!attrs.insert(attr).second) return error = "duplicate attribute " + attr + " in <" + name + ">", "";
      ++i;
      if (i >= doc.size() || (doc[i] != '"' && doc[i] != '\'')) return error = "unquoted attribute " + attr, "";
      char q = doc[i++];
      size_t end = doc.find(q, i);
      if (end == std::string::npos) return error = "unterminated attribute " + attr, "";
      if (!xml_text_ok(doc.substr(i, end - i), error)) return "";
      i = end + 1;
      if (i < doc.size() && !std::isspace(static_cast<unsigned char>(doc[i])) && doc[i] != '>' && doc[i] != '/')
        return error = "no space after attribute " + attr, "";
    }
    if (doc[i] == '/') {
      if (stack.empty()) closed_root = true;
      at = i + 2;
    } else {
      stack.push_back(name);
      at = i + 1;
    }
  }
  if (!stack.empty()) return error = "<" + stack.back() + "> is never closed", "";
  if (root.empty()) return error = "no root element", "";
  return root;
}

}  // namespace

// ---- the test cases ----

TEST_CASE("mnist_train: --help exits 0 and lists every flag", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  RunResult r = run_app({"--help"}, tmp.path());
  require_success(r);
  CHECK(r.err.empty());
  // every flag declared in options.cpp, found by reading the source, so a new flag is covered too
  std::string src = read_file(EMBER_SOURCE_DIR "/apps/mnist_train/options.cpp");
  std::set<std::string> flags;
  static const std::regex re(R"re("(?:!)?(--[a-z][a-z0-9-]*))re");
  static const std::regex re_alt(R"re(,!?(--[a-z][a-z0-9-]*))re");
  for (const std::regex* e : {&re, &re_alt})
    for (auto it = std::sregex_iterator(src.begin(), src.end(), *e); it != std::sregex_iterator(); ++it)
      flags.insert((*it)[1].str());
  REQUIRE(flags.size() >= 40);
  for (const char* f : {"--data", "--no-pin-memory", "--zero-grad-fill", "--ablation-steps", "--eval-only"})
    CHECK(flags.count(f) == 1);
  for (const std::string& f : flags) {
    INFO("flag " << f);
    static const std::string word_end = " ,=\n[{";
    size_t at = r.out.find(f);
    while (at != std::string::npos && word_end.find(r.out[at + f.size()]) == std::string::npos)
      at = r.out.find(f, at + 1);
    CHECK(at != std::string::npos);
  }
  RunResult h = run_app({"-h"}, tmp.path());
  require_success(h);
  CHECK(h.out == r.out);
}

TEST_CASE("mnist_train: usage errors exit 2 with one line on stderr", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  write_synthetic_set(tmp.path(), false);
  const std::string d = tmp.path();
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"--bogus"}, "--bogus"},
      {{"stray-positional"}, "stray-positional"},
      {{"--epochs"}, "--epochs"},
      {{"--epochs", "0"}, "--epochs"},
      {{"--epochs", "abc"}, "--epochs"},
      {{"--epochs", "1001"}, "--epochs"},
      {{"--batch-size", "0"}, "--batch-size"},
      {{"--batch-size", "-3"}, "--batch-size"},
      {{"--batch-size", "1.5"}, "--batch-size"},
      {{"--lr", "0"}, "--lr"},
      {{"--lr", "-0.1"}, "--lr"},
      {{"--lr", "fast"}, "--lr"},
      {{"--lr", "inf"}, "--lr"},
      {{"--val-split", "nan"}, "--val-split"},
      {{"--momentum", "nan"}, "--momentum"},
      {{"--label-smoothing", "nan"}, "--label-smoothing"},
      {{"--weight-decay", "inf"}, "--weight-decay"},
      {{"--clip-grad", "nan"}, "--clip-grad"},
      {{"--seed", "1.5"}, "--seed"},
      {{"--max-steps", "2.5"}, "--max-steps"},
      {{"--val-split", "0.9"}, "--val-split"},
      {{"--val-split", "-0.1"}, "--val-split"},
      {{"--workers", "-1"}, "--workers"},
      {{"--workers", "65"}, "--workers"},
      {{"--model", "resnet"}, "--model"},
      {{"--optimizer", "lbfgs"}, "--optimizer"},
      {{"--scheduler", "linear"}, "--scheduler"},
      {{"--amp", "fp8"}, "--amp"},
      {{"--backends", "matmul=nope"}, "--backends"},
      {{"--backends", "frobnicate=auto"}, "--backends"},
      {{"--backends", "matmul"}, "--backends"},
      {{"--weight-decay", "-1"}, "--weight-decay"},
      {{"--momentum", "1.5"}, "--momentum"},
      {{"--grad-accum", "0"}, "--grad-accum"},
      {{"--clip-grad", "-1"}, "--clip-grad"},
      {{"--label-smoothing", "1"}, "--label-smoothing"},
      {{"--seed", "-1"}, "--seed"},
      {{"--seed", "x"}, "--seed"},
      {{"--seed", "18446744073709551616"}, "out of range"},  // 2^64: an error, not clamped to 2^64 - 1
      {{"--seed", "99999999999999999999999"}, "out of range"},
      {{"--seed", "+5"}, "--seed"},
      {{"--max-steps", "-1"}, "--max-steps"},
      {{"--log-interval", "0"}, "--log-interval"},
      {{"--ablation-steps", "5"}, "--ablation-steps"},
      {{"--device", "tpu"}, "--device"},
      {{"--device", "cuda:x"}, "--device"},
      {{"--device", ""}, "--device"},
      {{"--eval-only", "a.safetensors", "--resume", "b.safetensors"}, "--eval-only"},
      {{"--ablation", "--resume", "b.safetensors"}, "--ablation"},
      {{"--channels-last", "--model", "mlp"}, "--channels-last"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--data", d};
    args.insert(args.end(), c.args.begin(), c.args.end());
    RunResult r = run_app(args, tmp.path());
    check_error(r, 2, c.needle);
    CHECK(r.err.size() < 300);  // a sentence, not a dump
    CHECK(r.out.empty());       // nothing ran
  }
}

TEST_CASE("mnist_train: runtime errors exit 1 with one line on stderr", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string good = tmp.path() + "/good";
  write_synthetic_set(good, false);

  SECTION("missing data") {
    check_error(run_app(quick(tmp.path() + "/nowhere"), tmp.path()), 1, "not found");
    const std::string only_train = tmp.path() + "/only_train";
    fs::create_directories(only_train);
    fs::copy_file(good + "/train-images-idx3-ubyte", only_train + "/train-images-idx3-ubyte");
    fs::copy_file(good + "/train-labels-idx1-ubyte", only_train + "/train-labels-idx1-ubyte");
    check_error(run_app(quick(only_train), tmp.path()), 1, "test files not found");
  }

  SECTION("malformed IDX files") {
    Synthetic s = make_synthetic(200, 3, 7);
    struct Bad {
      std::string name;
      std::string file;  // which file of the good set is replaced
      std::vector<uint8_t> bytes;
      std::string needle;
    };
    std::vector<uint8_t> truncated = images_idx(s);
    truncated.resize(truncated.size() - 100);
    std::vector<uint8_t> bad_magic = labels_idx(s);
    bad_magic[2] = 0x0D;  // f32 labels
    std::vector<uint8_t> trailing = images_idx(s);
    trailing.push_back(0);
    Synthetic fewer = make_synthetic(199, 3, 7);
    Synthetic bad_label = s;
    bad_label.labels[5] = 12;
    Synthetic test_set = make_synthetic(90, 3, 2), bad_test_label = test_set;
    bad_test_label.labels[5] = 12;
    const std::vector<Bad> bads = {
        {"empty images", "train-images-idx3-ubyte", {}, "empty"},
        {"truncated images", "train-images-idx3-ubyte", truncated, "truncated"},
        {"trailing bytes", "train-images-idx3-ubyte", trailing, "unexpected bytes"},
        {"float labels", "train-labels-idx1-ubyte", bad_magic, "labels"},
        {"label count", "train-labels-idx1-ubyte", labels_idx(fewer), "images but"},
        {"images in the labels file", "t10k-labels-idx1-ubyte", images_idx(s), "labels"},
        {"not an IDX file",
         "t10k-images-idx3-ubyte",
         {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'},
         "not an IDX file"},
        {"32x32 images", "train-images-idx3-ubyte",
         testing::idx_bytes(0x08, {200, 32, 32}, std::vector<uint8_t>(200 * 32 * 32)), "differ in size"},
        {"label 12 of 10 classes", "train-labels-idx1-ubyte", labels_idx(bad_label), "label 12 of training image 5"},
        {"label 12 in the test set", "t10k-labels-idx1-ubyte", labels_idx(bad_test_label), "label 12 of test image 5"},
    };
    for (const Bad& b : bads) {
      INFO("case: " << b.name);
      const std::string dir = tmp.path() + "/bad";
      fs::remove_all(dir);
      fs::create_directories(dir);
      for (const auto& e : fs::directory_iterator(good))
        fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
      if (b.name == "label count" || b.name == "label 12 of 10 classes" || b.name == "32x32 images") {
        // a consistent pair of 200, then the one file replaced
        testing::write_bytes(dir + "/train-images-idx3-ubyte", images_idx(s));
        testing::write_bytes(dir + "/train-labels-idx1-ubyte", labels_idx(s));
      }
      testing::write_bytes(dir + "/" + b.file, b.bytes);
      check_error(run_app(quick(dir, {"--epochs", "1"}), tmp.path()), 1, b.needle);
    }
    // a .gz name over raw bytes, and a truncated gzip stream
    const std::string dir = tmp.path() + "/badgz";
    write_synthetic_set(dir, true);
    testing::write_bytes(dir + "/t10k-labels-idx1-ubyte.gz", labels_idx(s));
    check_error(run_app(quick(dir), tmp.path()), 1, "not gzip");
    std::vector<uint8_t> gz = testing::gzip_bytes(images_idx(s));
    gz.resize(gz.size() / 2);
    write_synthetic_set(dir, true);
    testing::write_bytes(dir + "/train-images-idx3-ubyte.gz", gz);
    check_error(run_app(quick(dir), tmp.path()), 1, "truncated");
  }

  SECTION("--device cuda without a GPU") {
    if (cuda::device_count() > 0) {
      WARN("SKIPPED: this machine has a CUDA device; the no-GPU error path is not reachable here");
    } else {
      for (const char* dev : {"cuda", "cuda:0", "cuda:3"}) {
        std::vector<std::string> a = {"--data", good, "--device", dev};
        check_error(run_app(a, tmp.path()), 1, std::string("--device ") + dev);
      }
    }
  }

  SECTION("checkpoints that are missing, corrupt or of another model") {
    const std::string ck = tmp.path() + "/mlp.safetensors";
    require_success(run_app(quick(good, {"--epochs", "1", "--save", ck}), tmp.path()));
    REQUIRE(fs::exists(ck));
    const std::string missing = tmp.path() + "/missing.safetensors";
    check_error(run_app(quick(good, {"--resume", missing}), tmp.path()), 1, "missing.safetensors");
    check_error(run_app(quick(good, {"--eval-only", missing}), tmp.path()), 1, "missing.safetensors");
    std::string bytes = read_file(ck);
    const std::string corrupt = tmp.path() + "/corrupt.safetensors";
    {
      std::ofstream f(corrupt, std::ios::binary);
      f << bytes.substr(0, bytes.size() / 2);  // cut in half
    }
    check_error(run_app(quick(good, {"--resume", corrupt}), tmp.path()), 1, "corrupt.safetensors");
    check_error(run_app(quick(good, {"--eval-only", corrupt}), tmp.path()), 1, "corrupt.safetensors");
    const std::string garbage = tmp.path() + "/garbage.safetensors";
    {
      std::ofstream f(garbage, std::ios::binary);
      f << std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{not json", 17);
    }
    check_error(run_app(quick(good, {"--resume", garbage}), tmp.path()), 1, "garbage.safetensors");
    // an mlp checkpoint into the cnn: the names or shapes do not match
    RunResult r = run_app(quick(good, {"--model", "cnn", "--eval-only", ck}), tmp.path());
    check_error(r, 1, "missing key(s): \"0.weight\"");
    // on --resume the checkpoint's recorded flags are compared first (tests/test_checkpoint_meaning.cpp)
    r = run_app(quick(good, {"--model", "cnn", "--resume", ck}), tmp.path());
    check_error(r, 1, "--model cnn differs from the checkpoint's mlp");
  }

  SECTION("unwritable outputs and CPU-unsupported options") {
    const std::string no_dir = tmp.path() + "/no/such/dir";
    check_error(run_app(quick(good, {"--log", no_dir + "/log.jsonl"}), tmp.path()), 1, "--log");
    check_error(run_app(quick(good, {"--amp", "fp16"}), tmp.path()), 1, "fp16");
    // a regular file where a directory must be
    const std::string file = tmp.path() + "/a_file";
    testing::write_bytes(file, {1, 2, 3});
    check_error(run_app(quick(good, {"--max-steps", "2", "--tensorboard", file + "/tb"}), tmp.path()), 1, "a_file");
    check_error(run_app(quick(good, {"--max-steps", "2", "--save", file + "/ck.safetensors"}), tmp.path()), 1,
                "a_file");
    check_error(run_app(quick(good, {"--max-steps", "2", "--plot", file + "/p.svg"}), tmp.path()), 1, "a_file");
    check_error(run_app(quick(good, {"--max-steps", "12", "--profile", file + "/t.json"}), tmp.path()), 1, "a_file");
  }
}

TEST_CASE("mnist_train: trains on a synthetic IDX set, raw and gzip'd", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  SECTION("raw files, mlp") {
    write_synthetic_set(tmp.path() + "/raw", false);
    RunResult r = run_app(quick(tmp.path() + "/raw", {"--epochs", "1"}), tmp.path());
    require_success(r);
    INFO(r.out);
    CHECK(r.err.empty());
    CHECK(r.out.find("data: ") == std::string::npos);  // --quiet: no header lines
    CHECK(reported_test_accuracy(r.out) >= 90.0);
    CHECK(r.out.find("epoch 1/1") != std::string::npos);
    CHECK(r.out.find("17 optimizer steps") != std::string::npos);  // ceil(270 / 16)
    // the start-up: from the process's start to the first step, within the process's own time
    const std::regex startup(
        R"(start-up +([0-9.]+) s \(process start to the first step; the process ran ([0-9.]+) s\))");
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, startup));
    CHECK(std::stod(m[1]) > 0);
    CHECK(std::stod(m[1]) <= std::stod(m[2]));
  }
  SECTION("gzip'd files, cnn, not quiet") {
    write_synthetic_set(tmp.path() + "/gz", true);
    std::vector<std::string> a = {"--data", tmp.path() + "/gz", "--device", "cpu",     "--workers", "1", "--batch-size",
                                  "16",     "--epochs",         "1",        "--model", "cnn"};
    RunResult r = run_app(a, tmp.path());
    require_success(r);
    INFO(r.out);
    // 300 images, 10% held out
    CHECK(r.out.find("270 train, 30 validation, 90 test") != std::string::npos);
    CHECK(reported_test_accuracy(r.out) >= 90.0);
  }
}

TEST_CASE("mnist_train: short runs work with every schedule", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  write_synthetic_set(tmp.path(), false);
  // OneCycleLR's warm-up is empty at exactly 4 steps with pct_start 0.25; every length must run
  for (const char* sched : {"onecycle", "cyclic", "cosine", "step", "none"})
    for (int steps = 1; steps <= 5; ++steps) {
      RunResult r = run_app(
          quick(tmp.path(), {"--epochs", "1", "--scheduler", sched, "--max-steps", std::to_string(steps)}), tmp.path());
      require_success(r);
      INFO(r.out);
      CHECK(r.out.find(" " + std::to_string(steps) + " optimizer steps") != std::string::npos);
    }
  // --grad-accum 3 over 17 micro-batches an epoch: groups of 3, 3, 3, 3, 3, 2 (the last group of an
  // epoch steps too), so onecycle's step count matches what the run does
  RunResult r = run_app(quick(tmp.path(), {"--epochs", "2", "--grad-accum", "3"}), tmp.path());
  require_success(r);
  INFO(r.out);
  CHECK(r.out.find("2 epochs, 12 optimizer steps") != std::string::npos);
}

TEST_CASE("mnist_train: the MLP reaches 80% on 10k Fashion-MNIST samples in one CPU epoch", "[mnist_train][mnist]") {
  if (!have_binary()) return;
  if (!testing::has_fashion_mnist()) {
    WARN("SKIPPED: " << testing::kFashionMnist << " is missing (apt-get install dataset-fashion-mnist)");
    return;
  }
  // the first 10,000 training images (all 10,000 test images) as a raw IDX set in a temp dir
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/fashion-mnist-10k";
  fs::create_directories(dir);
  for (auto split : {data::Split::train, data::Split::test}) {
    auto ds = data::load_mnist(testing::kFashionMnist, split);
    const int64_t n = split == data::Split::train ? 10000 : ds->size();
    REQUIRE(ds->size() >= n);
    const auto* px = ds->images().data<uint8_t>();
    const auto* lb = ds->labels().data<int64_t>();
    std::vector<uint8_t> images(px, px + n * 784), labels(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<uint8_t>(lb[i]);
    const std::string prefix = split == data::Split::train ? "/train" : "/t10k";
    testing::write_bytes(dir + prefix + "-images-idx3-ubyte",
                         testing::idx_bytes(0x08, {static_cast<uint32_t>(n), 28, 28}, images));
    testing::write_bytes(dir + prefix + "-labels-idx1-ubyte",
                         testing::idx_bytes(0x08, {static_cast<uint32_t>(n)}, labels));
  }
  // the default recipe (adamw, lr 3e-3, onecycle) at batch 64 (157 steps; at the default 128 the
  // 79 steps land near 80% itself, 79.4-80.0% over seeds), all 10k samples trained on
  std::vector<std::string> a = {"--data",      dir, "--device",  "cpu", "--epochs",     "1",
                                "--val-split", "0", "--workers", "1",   "--batch-size", "64"};
  RunResult r = run_app(a, tmp.path(), 240);
  require_success(r);
  INFO(r.out);
  CHECK(r.out.find("10000 train, 0 validation, 10000 test") != std::string::npos);
  CHECK(r.out.find("T-shirt/top") != std::string::npos);  // the class names follow the directory name
  const double acc = reported_test_accuracy(r.out);
  WARN("Fashion-MNIST 10k subset, mlp, one CPU epoch: test accuracy " << acc << "%");
  CHECK(acc >= 80.0);
}

TEST_CASE("mnist_train: resuming gives the same weights as an uninterrupted run", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.path() + "/data";
  write_synthetic_set(d, false);
  // The schedule is --scheduler none: onecycle and the others are laid out over --epochs, so a
  // run stopped by --epochs 1 has a different schedule from the 3-epoch run by design.
  auto args = [&](const std::string& epochs, std::vector<std::string> more) {
    std::vector<std::string> a =
        quick(d, {"--epochs", epochs, "--deterministic", "--scheduler", "none", "--seed", "11"});
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const std::string full = tmp.path() + "/full.safetensors", part = tmp.path() + "/part.safetensors";
  RunResult a = run_app(args("3", {"--save", full}), tmp.path());
  require_success(a);
  RunResult b1 = run_app(args("1", {"--save", part}), tmp.path());
  require_success(b1);
  const std::string after_one = read_file(part);
  REQUIRE(!after_one.empty());
  CHECK(after_one != read_file(full));  // the comparison below can fail
  RunResult b2 = run_app(args("3", {"--resume", part, "--save", part}), tmp.path());
  require_success(b2);
  INFO(b2.out);
  const std::string resumed = read_file(part), uninterrupted = read_file(full);
  REQUIRE(!uninterrupted.empty());
  CHECK(resumed.size() == uninterrupted.size());
  CHECK(resumed == uninterrupted);
  CHECK(reported_test_accuracy(b2.out) == reported_test_accuracy(a.out));
  // the resumed run trains epochs 2 and 3 only
  CHECK(b2.out.find("epoch 1/3") == std::string::npos);
  CHECK(b2.out.find("epoch 3/3") != std::string::npos);
  // the same with --grad-accum 3, whose last group of an epoch is short
  const std::string full_acc = tmp.path() + "/full_acc.safetensors", part_acc = tmp.path() + "/part_acc.safetensors";
  require_success(run_app(args("2", {"--grad-accum", "3", "--save", full_acc}), tmp.path()));
  require_success(run_app(args("1", {"--grad-accum", "3", "--save", part_acc}), tmp.path()));
  require_success(run_app(args("2", {"--grad-accum", "3", "--resume", part_acc, "--save", part_acc}), tmp.path()));
  CHECK(read_file(part_acc) == read_file(full_acc));
  // resuming a finished run trains nothing and reports the loaded model's accuracy
  RunResult done = run_app(args("3", {"--resume", full}), tmp.path());
  require_success(done);
  INFO(done.out);
  CHECK(done.out.find("train loss") == std::string::npos);  // no epoch line
  CHECK(done.out.find("0 epochs, 51 optimizer steps") != std::string::npos);
  CHECK(done.out.find("nothing left to train") != std::string::npos);
  CHECK(reported_test_accuracy(done.out) == reported_test_accuracy(a.out));
  // --max-steps stopping in the middle of epoch 2 keeps the checkpoint of epoch 1 (a resume must
  // not skip the rest of epoch 2)
  const std::string mid = tmp.path() + "/mid.safetensors";
  RunResult m = run_app(args("2", {"--max-steps", "25", "--save", mid}), tmp.path());
  require_success(m);
  INFO(m.out);
  CHECK(m.out.find("no checkpoint for the partial epoch") != std::string::npos);
  CHECK(read_file(mid) == after_one);
  // and the same run twice is bitwise the same (what makes the comparison meaningful)
  const std::string again = tmp.path() + "/again.safetensors";
  require_success(run_app(args("3", {"--save", again}), tmp.path()));
  CHECK(read_file(again) == uninterrupted);
}

TEST_CASE("mnist_train: a CRC-32C test vector and the decoder's own failure modes", "[mnist_train]") {
  const std::string v = "123456789";
  CHECK(crc32c_bitwise(v.data(), v.size()) == 0xE3069283u);
  CHECK(crc32c_bitwise("", 0) == 0u);
  // the 32 bytes of zeros vector from RFC 3720 (iSCSI), B.4
  std::string zeros(32, '\0');
  CHECK(crc32c_bitwise(zeros.data(), zeros.size()) == 0x8A9136AAu);
  // a hand-framed record decodes; flipping any byte of it is detected
  std::string payload = "payload";
  std::string rec(8, '\0');
  for (int i = 0; i < 8; ++i) rec[static_cast<size_t>(i)] = static_cast<char>((payload.size() >> (8 * i)) & 0xff);
  auto put32 = [](std::string& s, uint32_t x) {
    for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
  };
  put32(rec, masked(crc32c_bitwise(rec.data(), 8)));
  rec += payload;
  put32(rec, masked(crc32c_bitwise(payload.data(), payload.size())));
  std::string error;
  auto got = decode_tfrecords(rec, error);
  REQUIRE(error.empty());
  REQUIRE(got == std::vector<std::string>{payload});
  for (size_t i = 0; i < rec.size(); ++i) {
    std::string bad = rec;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    error.clear();
    decode_tfrecords(bad, error);
    CHECK(!error.empty());
  }
}

TEST_CASE("mnist_train: observability outputs (TensorBoard, JSONL, profile, plot)", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.path() + "/data";
  write_synthetic_set(d, false);
  const std::string tb = tmp.path() + "/tb", log = tmp.path() + "/log.jsonl", prof = tmp.path() + "/trace.json",
                    plot = tmp.path() + "/curves.svg";
  // 2 epochs of 17 steps: the profile window (steps 10 to 20) spans the epoch boundary
  RunResult r = run_app(quick(d, {"--epochs", "2", "--log-interval", "5", "--tensorboard", tb, "--log", log,
                                  "--profile", prof, "--plot", plot}),
                        tmp.path());
  require_success(r);
  INFO(r.out);

  SECTION("TensorBoard records carry valid masked CRC-32Cs and the expected scalars") {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(tb))
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path());
    REQUIRE(files.size() == 1);
    const std::string bytes = read_file(files[0].string());
    std::string error;
    std::vector<std::string> payloads = decode_tfrecords(bytes, error);
    INFO(files[0].string() << ": " << error);
    REQUIRE(error.empty());
    REQUIRE(payloads.size() > 1);
    // Event: 1 wall_time (double), 2 step (varint), 3 file_version (string), 5 summary
    std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;
    std::string version;
    for (const std::string& p : payloads) {
      std::vector<Field> ev;
      REQUIRE(decode_message(p, ev));
      int64_t step = 0;
      bool has_time = false;
      for (const Field& f : ev) {
        if (f.number == 1 && f.wire == 1) {
          double t = 0;
          std::memcpy(&t, f.bytes.data(), 8);
          has_time = t > 1.5e9;  // a Unix time after 2017
        }
        if (f.number == 2 && f.wire == 0) step = static_cast<int64_t>(f.varint);
        if (f.number == 3 && f.wire == 2) version = f.bytes;
      }
      CHECK(has_time);
      for (const Field& f : ev) {
        if (f.number != 5) continue;
        REQUIRE(f.wire == 2);
        std::vector<Field> summary;
        REQUIRE(decode_message(f.bytes, summary));
        for (const Field& v : summary) {
          REQUIRE((v.number == 1 && v.wire == 2));
          std::vector<Field> value;
          REQUIRE(decode_message(v.bytes, value));
          std::string tag;
          float x = NAN;
          for (const Field& g : value) {
            if (g.number == 1 && g.wire == 2) tag = g.bytes;
            if (g.number == 2 && g.wire == 5) std::memcpy(&x, g.bytes.data(), 4);
          }
          REQUIRE(!tag.empty());
          CHECK(std::isfinite(x));
          scalars[tag].emplace_back(step, x);
        }
      }
    }
    CHECK(version == "brain.Event:2");
    for (const char* tag : {"train/loss", "train/accuracy", "train/lr", "train/samples_per_s", "epoch/train_loss",
                            "epoch/val_accuracy", "epoch/test_accuracy", "epoch/samples_per_s"})
      CHECK(scalars.count(tag) == 1);
    REQUIRE(scalars["epoch/test_accuracy"].size() == 2);
    CHECK(scalars["epoch/test_accuracy"][0].first == 1);
    CHECK(scalars["epoch/test_accuracy"][1].first == 2);
    // the last epoch's test accuracy is the one the summary reports
    CHECK(std::abs(scalars["epoch/test_accuracy"][1].second - reported_test_accuracy(r.out)) < 0.01);
    // train/loss: one per log interval, steps increasing, the loss falling
    const auto& loss = scalars["train/loss"];
    REQUIRE(loss.size() >= 6);
    for (size_t i = 1; i < loss.size(); ++i) CHECK(loss[i].first > loss[i - 1].first);
    CHECK(loss.back().second < loss.front().second);
  }

  SECTION("the JSONL log: one object per line with the expected keys") {
    std::vector<std::string> ls = lines_of(read_file(log));
    REQUIRE(ls.size() > 2);
    int steps = 0, epochs = 0, summaries = 0;
    int64_t last_step = -1;
    for (const std::string& l : ls) {
      INFO("line: " << l);
      nlohmann::json j;
      REQUIRE_NOTHROW(j = nlohmann::json::parse(l));
      REQUIRE(j.is_object());
      REQUIRE(j.contains("type"));
      std::vector<const char*> keys;
      if (j["type"] == "step") {
        ++steps;
        keys = {"epoch", "step", "loss", "accuracy", "lr", "samples_per_s"};
        CHECK(j["step"].get<int64_t>() > last_step);
        last_step = j["step"].get<int64_t>();
      } else if (j["type"] == "summary") {
        // the last line: how the run ended (Note [stopping on a signal] in trainer.h)
        ++summaries;
        CHECK(l == ls.back());
        CHECK(j["status"] == "completed");
        CHECK(j["epochs"] == 2);
        CHECK(j["steps"] == 34);
        // a warm-up of one step, then training and evaluation on the clock (Note [the timing rule])
        const double warmup = j["warmup_seconds"], timed = j["timed_seconds"], total = j["total_seconds"];
        CHECK(j["startup_seconds"].get<double>() > 0);
        CHECK(warmup > 0);
        CHECK(timed > 0);
        CHECK(timed + warmup <= total);
        // the samples after the warm-up step: 2 epochs of 270 training images, less one batch of 16
        CHECK(j["timed_samples_per_s"].get<double>() == Approx((2 * 270 - 16) / timed).epsilon(1e-6));
        continue;
      } else {
        REQUIRE(j["type"] == "epoch");
        ++epochs;
        keys = {"epoch",         "train_loss", "train_accuracy", "val_accuracy",
                "test_accuracy", "seconds",    "samples_per_s",  "lr"};
        CHECK(j["epoch"].get<int>() == epochs);
      }
      CHECK(j.size() == keys.size() + 1);
      for (const char* k : keys) {
        INFO("key " << k);
        REQUIRE(j.contains(k));
        REQUIRE(j[k].is_number());
        CHECK(std::isfinite(j[k].get<double>()));
      }
    }
    CHECK(epochs == 2);
    CHECK(summaries == 1);
    CHECK(steps >= 6);  // 17 steps an epoch, every 5 and at the end of the epoch
    CHECK(last_step == 34);
  }

  SECTION("the profile: Chrome trace JSON with the ops of the step") {
    nlohmann::json j;
    REQUIRE_NOTHROW(j = nlohmann::json::parse(read_file(prof)));
    REQUIRE(j.contains("traceEvents"));
    REQUIRE(j["traceEvents"].is_array());
    std::set<std::string> names;
    size_t timed = 0;
    std::map<std::pair<int, int>, int> open;  // B/E balance per (pid, tid)
    for (const auto& e : j["traceEvents"]) {
      REQUIRE(e.contains("ph"));
      const std::string ph = e["ph"];
      INFO("event " << e.dump());
      CHECK((ph == "X" || ph == "B" || ph == "E" || ph == "M" || ph == "i"));
      if (ph == "M") continue;
      REQUIRE(e.contains("name"));
      REQUIRE(e.contains("ts"));
      CHECK(e["ts"].get<double>() >= 0);
      const auto key = std::make_pair(e.value("pid", 0), e.value("tid", 0));
      if (ph == "X") {
        REQUIRE(e.contains("dur"));
        CHECK(e["dur"].get<double>() >= 0);
      }
      if (ph == "B") ++open[key];
      if (ph == "E") CHECK(--open[key] >= 0);
      if (ph == "X" || ph == "B") ++timed;
      std::string name = e["name"];
      names.insert(name.substr(0, name.find(' ')));
    }
    for (const auto& [k, n] : open) CHECK(n == 0);
    CHECK(timed > 20);
    INFO("names in the trace: " << nlohmann::json(names).dump());
    const bool has_matmul =
        names.count("linear") || names.count("matmul") || names.count("addmm") || names.count("gemm");
    CHECK(has_matmul);
    CHECK(names.count("relu") == 0);  // fused into linear (Note [fused activations] in nn/sequential.h)
    CHECK(names.count("mlp") == 1);   // the stack as one op (Note [fused MLP stacks] in nn/sequential.h)
    CHECK(std::any_of(names.begin(), names.end(),
                      [](const std::string& n) { return n.find("cross_entropy") != std::string::npos; }));
    CHECK(r.out.find("profile: ") != std::string::npos);
  }

  SECTION("a short run is profiled too") {
    const std::string short_prof = tmp.path() + "/short.json";
    RunResult s = run_app(quick(d, {"--epochs", "1", "--max-steps", "4", "--grad-accum", "2", "--profile", short_prof}),
                          tmp.path());
    require_success(s);
    nlohmann::json j;
    REQUIRE_NOTHROW(j = nlohmann::json::parse(read_file(short_prof)));
    int steps = 0;
    for (const auto& e : j["traceEvents"])
      if (e["ph"] == "X" && e["name"].get<std::string>().rfind("adam_step", 0) == 0) ++steps;
    CHECK(steps == 4);  // every step of the run, each once
  }

  SECTION("the plot: well-formed SVG with both charts") {
    const std::string svg = read_file(plot);
    std::string error;
    std::map<std::string, int> counts;
    std::string root = check_xml(svg, error, &counts);
    INFO(error);
    REQUIRE(root == "svg");
    CHECK(svg.find("http://www.w3.org/2000/svg") != std::string::npos);
    CHECK(counts["polyline"] + counts["path"] >= 4);  // a loss curve and three accuracy curves
    CHECK(svg.find("training loss") != std::string::npos);
    CHECK(svg.find("validation") != std::string::npos);
  }
}

TEST_CASE("mnist_train: the XML checker rejects malformed documents", "[mnist_train]") {
  std::string error;
  CHECK(check_xml(R"(<?xml version="1.0"?><svg a="1"><g><text>a &amp; b</text></g><path d="M0 0"/></svg>)", error) ==
        "svg");
  for (const char* bad : {"<svg><g></svg>", "<svg a=1></svg>", "<svg>a & b</svg>", "<svg><g></g>", "<svg></svg><svg/>",
                          "<svg a=\"1\" a=\"2\"/>", "<svg>x < y</svg>", "text<svg/>", "<svg a=\"<\"/>", ""}) {
    INFO(bad);
    error.clear();
    CHECK(check_xml(bad, error).empty());
    CHECK(!error.empty());
  }
}

TEST_CASE("mnist_train: --eval-only on a saved checkpoint reproduces the test accuracy", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.path() + "/data";
  write_synthetic_set(d, false, 40);  // 36 training images: 3 steps of 16 in the one epoch
  const std::string ck = tmp.path() + "/ck.safetensors";
  // few steps, so the accuracy is not simply 100% and a wrong model would show
  RunResult t = run_app(quick(d, {"--epochs", "1", "--lr", "1e-3", "--save", ck}), tmp.path());
  require_success(t);
  const double trained = reported_test_accuracy(t.out);
  REQUIRE(trained >= 0);
  RunResult e = run_app(quick(d, {"--eval-only", ck}), tmp.path());
  require_success(e);
  INFO(t.out << "\n" << e.out);
  CHECK(reported_test_accuracy(e.out) == trained);
  CHECK(e.out.find("on 90 images") != std::string::npos);
  CHECK(e.out.find("confusion matrix") != std::string::npos);
  CHECK(e.out.find("epoch ") == std::string::npos);  // nothing trained
  // the same checkpoint evaluated with loader workers gives the same answer
  RunResult e2 = run_app({"--data", d, "--device", "cpu", "--workers", "2", "--eval-only", ck}, tmp.path());
  require_success(e2);
  CHECK(reported_test_accuracy(e2.out) == trained);
}

TEST_CASE("mnist_train: the ablation on the CPU prints its table and the skipped GPU rungs", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.path() + "/data";
  write_synthetic_set(d, false, 600, 60);
  RunResult r = run_app({"--data", d, "--device", "cpu", "--ablation", "--ablation-steps", "20"}, tmp.path(), 180);
  require_success(r);
  INFO(r.out);
  CHECK(r.out.find("ablation: model mlp, 20 optimizer steps per rung") != std::string::npos);
  // the rows that run on the CPU, each with a speed-up column; the baseline's is 1.00x
  int rows = 0;
  static const std::regex row(R"(^(baseline|\+ ).*\s(\d+)\s+(\d+)\s+([0-9.]+)x\s+(\S+)\s+([0-9.]+)%\s+([0-9.]+)%$)");
  for (const std::string& l : lines_of(r.out)) {
    std::smatch m;
    if (!std::regex_match(l, m, row)) continue;
    ++rows;
    CHECK(std::stod(m[3].str()) > 0);  // samples/s
    if (rows == 1) CHECK(m[4].str() == "1.00");
    CHECK(m[5].str() == "-");  // no GPU idle time on the CPU
  }
  CHECK(rows == 10);
  for (const char* skipped : {"skipped: + pinned memory, non-blocking copies: needs a CUDA device",
                              "skipped: + device-resident uint8 data, normalised on the GPU: needs a CUDA device",
                              "skipped: + CUDA graph (one step per launch): needs a CUDA device",
                              "skipped: + many steps per graph launch (up to the log interval): needs a CUDA device"})
    CHECK(r.out.find(skipped) != std::string::npos);
  CHECK(r.out.find("+ mixed precision (bf16 autocast on the CPU)") != std::string::npos);
  CHECK(r.out.find("+ ReLU fused into Linear and max pooling, each way") != std::string::npos);
  CHECK(r.out.find("+ each Linear/ReLU stack as one op") != std::string::npos);
  CHECK(r.out.find("+ each Conv2d or BatchNorm2d/ReLU/pool as one op") != std::string::npos);
}

TEST_CASE("mnist_train: without a validation split the log and the plot have no validation values", "[mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data"), log = tmp.file("run.jsonl"), plot = tmp.file("run.svg");
  write_synthetic_set(d, false);
  require_success(run_app(quick(d, {"--epochs", "1", "--val-split", "0", "--log", log, "--plot", plot}), tmp.path()));
  // a missing metric is null, not a 0 that reads as measured (ember_tune tells them apart)
  CHECK(read_file(log).find("\"val_accuracy\":null") != std::string::npos);
  CHECK(read_file(plot).find("validation") == std::string::npos);
  CHECK(read_file(plot).find("test") != std::string::npos);
  // with one, both are there
  require_success(run_app(quick(d, {"--epochs", "1", "--log", log + "2", "--plot", plot + "2"}), tmp.path()));
  CHECK(read_file(log + "2").find("\"val_accuracy\":null") == std::string::npos);
  CHECK(read_file(plot + "2").find("validation") != std::string::npos);
}

TEST_CASE("mnist_train: CPU kernels are measured once per machine, kept in the cache and named in the summary",
          "[mnist_train][autotune]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data"), cache = tmp.file("cache");
  write_synthetic_set(d, false);
  const std::vector<std::string> env = {"EMBER_CPU_DEFAULTS=measured", "EMBER_CACHE_DIR=" + cache};
  const std::vector<std::string> args = quick(d, {"--model", "cnn", "--epochs", "1"});
  RunResult first = run_app(args, tmp.path(), 300, env);
  require_success(first);
  const std::string file = cache + "/kernel-choices.tsv", choices = read_file(file);
  CHECK(choices.rfind("# ember autotune cache v1\n", 0) == 0);
  CHECK(choices.find("conv2d|cpu:") != std::string::npos);
  const auto kernels = [](const std::string& out) {
    const size_t at = out.find("  kernels ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  CHECK(kernels(first.out).find("conv2d=") != std::string::npos);
  CHECK(first.out.find("kernel choices        0 from the cache, ") != std::string::npos);
  // the next run on this machine measures nothing again and makes the same choices
  RunResult second = run_app(args, tmp.path(), 300, env);
  require_success(second);
  CHECK(read_file(file) == choices);
  CHECK(kernels(second.out) == kernels(first.out));
  CHECK(second.out.find(" from the cache, 0 measured in 0.00 s (" + file + ")") != std::string::npos);
  // --autotune keeps its choices in the same cache: with the fixed defaults it finds them there
  std::vector<std::string> tuned = args;
  tuned.push_back("--autotune");
  RunResult third = run_app(tuned, tmp.path(), 300, {"EMBER_CPU_DEFAULTS=fixed", "EMBER_CACHE_DIR=" + cache});
  require_success(third);
  CHECK(third.out.find(" from the cache, 0 measured in 0.00 s") != std::string::npos);
  CHECK(kernels(third.out) == kernels(first.out));
  // fixed defaults: nothing measured or kept; a bad value is named
  RunResult fixed = run_app(args, tmp.path(), 300, {"EMBER_CPU_DEFAULTS=fixed", "EMBER_CACHE_DIR=" + tmp.file("c2")});
  require_success(fixed);
  CHECK(!fs::exists(tmp.file("c2")));
  check_error(run_app(args, tmp.path(), 60, {"EMBER_CPU_DEFAULTS=fastest"}), 2,
              "EMBER_CPU_DEFAULTS is 'fastest', expected measured or fixed");
}
