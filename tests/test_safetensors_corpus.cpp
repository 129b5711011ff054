// Runs every file of the safetensors seed corpus (tests/corpus/safetensors, written by
// make_corpus.py there, also the fuzzer's starting point) through the parser: it must either load
// or throw ember::Error - never crash or throw anything else. valid_* files must load, bad_* and
// unsupported_* files must be rejected.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "io/safetensors.h"

using namespace ember;

TEST_CASE("safetensors seed corpus: every file loads or is rejected with ember::Error", "[safetensors][corpus]") {
  const std::filesystem::path dir = std::filesystem::path(EMBER_SOURCE_DIR) / "tests" / "corpus" / "safetensors";
  REQUIRE(std::filesystem::is_directory(dir));
  int valid = 0, rejected = 0;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    const std::string name = path.filename().string();
    INFO(name);
    std::ifstream f(path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    bool loaded = false;
    std::string error;
    try {
      io::SafetensorsFile sf = io::from_safetensors_bytes(bytes, kCPU, name);
      loaded = true;
    } catch (const Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      FAIL_CHECK("threw something other than ember::Error: " << e.what());
      continue;
    }
    // The file path reads the same way.
    bool loaded_file = false;
    try {
      io::load_safetensors(path.string());
      loaded_file = true;
    } catch (const Error&) {
    }
    CHECK(loaded_file == loaded);
    if (name.rfind("valid_", 0) == 0) {
      CHECK(loaded);
      ++valid;
    } else {
      INFO("error: " << error);
      CHECK(!loaded);
      CHECK(error.find(name) != std::string::npos);  // the message names the file
      ++rejected;
    }
  }
  CHECK(valid >= 5);
  CHECK(rejected >= 15);
  WARN("safetensors corpus: " << valid << " valid files loaded, " << rejected << " invalid files rejected");
}
