// Interop with the reference safetensors implementation (Hugging Face's Python package): files
// ember writes load there with the right dtypes, shapes, bytes and metadata, and files it writes
// load in ember. Skipped, with a visible message, when python3 cannot import safetensors and
// numpy (install them with: python3 -m pip install safetensors numpy).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "kernels/functional.h"

using namespace ember;

namespace {

struct Result {
  int status;
  std::string output;
};

Result run(const std::string& cmd) {
  Result r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) r.output += buf;
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string script() { return std::string(EMBER_SOURCE_DIR) + "/tests/interop/safetensors_interop.py"; }

}  // namespace

TEST_CASE("safetensors interop with the reference implementation (Python safetensors)", "[safetensors][interop]") {
  Result probe = run("python3 -c 'import safetensors, numpy; print(safetensors.__version__)'");
  if (probe.status != 0) {
    WARN("skipped: python3 cannot import safetensors and numpy (python3 -m pip install safetensors numpy): "
         << probe.output);
    return;
  }
  const std::string dir = std::string(EMBER_BINARY_DIR);
  const std::string from_ember = dir + "/interop_from_ember." + std::to_string(::getpid()) + ".safetensors";
  const std::string from_python = dir + "/interop_from_python." + std::to_string(::getpid()) + ".safetensors";

  // ember -> reference
  TensorDict d;
  std::vector<double> f32;
  for (int i = 0; i < 12; ++i) f32.push_back(i * 0.5 - 1.0);
  d.insert("f32", tensor(f32, {3, 4}));
  d.insert("f64", tensor({-0.5, -0.125, 0.25, 0.625, 1.0}, DType::f64));
  d.insert("f16", tensor({-1.0, -0.5, 0.0, 0.5, 1.0, 1.5}, {2, 3}, DType::f16));
  d.insert("i32", tensor({-3, -2, -1, 0, 1, 2}, DType::i32));
  d.insert("i64", tensor_i64({int64_t{1} << 40, -7}, {2}));
  d.insert("u8", tensor({0, 1, 255}, DType::u8));
  d.insert("bool", tensor({1, 0, 1}, DType::boolean));
  d.insert("scalar", scalar_tensor(3.25));
  d.insert("empty", zeros({0, 4}));
  d.insert("bf16", tensor({1.0, -2.5, 0.1, 3.0e38}, DType::bf16));
  io::save_safetensors(from_ember, d, {{"origin", "ember"}});
  Result chk = run("python3 '" + script() + "' check '" + from_ember + "'");
  INFO(chk.output);
  CHECK(chk.status == 0);

  // reference -> ember
  Result wr = run("python3 '" + script() + "' write '" + from_python + "'");
  INFO(wr.output);
  REQUIRE(wr.status == 0);
  io::SafetensorsFile f = io::load_safetensors(from_python);
  CHECK(f.metadata.at("origin") == "python");
  CHECK(f.tensors.size() == 9);
  for (const auto& [name, t] : d) {
    if (name == "bf16") continue;  // numpy has no bfloat16
    INFO(name);
    REQUIRE(f.tensors.contains(name));
    const Tensor& g = f.tensors.at(name);
    CHECK(g.dtype() == t.dtype());
    CHECK(g.shape() == t.shape());
    CHECK(g.to_vector<double>() == t.to_vector<double>());
  }
  std::remove(from_ember.c_str());
  std::remove(from_python.c_str());
}
