// The blocked CPU GEMM (kernels/gemm/cpu_gemm.h) on every micro-kernel ISA this CPU supports,
// against matmul's reference loop: sizes around the register and cache blocks, strided and
// transposed operands, broadcast batches, f16/bf16 panels, the fused linear epilogue.
#include <catch2/catch.hpp>

#include <sstream>

#include "core/rng.h"

#include "kernels/functional.h"
#include "kernels/ops/linear.h"  // LinearAttrs
#include "kernels/gemm/cpu_gemm.h"
#include "kernels/registry.h"
#include "tests/op_driver.h"

using namespace ember;

namespace {

std::vector<std::string> isas() {
  std::vector<std::string> out;
  std::stringstream ss(gemm::supported_cpu_isas());
  std::string s;
  while (std::getline(ss, s, ',')) {
    while (!s.empty() && s[0] == ' ') s.erase(0, 1);
    out.push_back(s);
  }
  return out;
}

const Variant& cpu_variant(OpId op, const std::string& name) {
  for (const Variant& v : op_info(op).variants)
    if (v.device == DeviceType::cpu && v.name == name) return v;
  FAIL("no CPU variant " << name);
  throw;
}

struct IsaScope {
  explicit IsaScope(const std::string& isa) { gemm::set_cpu_isa(isa); }
  ~IsaScope() { gemm::set_cpu_isa(""); }
};

Tol tol_for(DType dt, int64_t K) {
  if (dt == DType::f64) return {1e-12, 1e-12};
  if (dt == DType::f32) return {1e-5, 1e-5 * std::max<int64_t>(1, K / 16)};
  // both round a float sum once; the sums differ in order only
  return {dt == DType::f16 ? 1e-3 : 1.6e-2, 1e-4};
}

void check_matmul(const Tensor& a, const Tensor& b, int64_t K, const std::string& what) {
  const Variant& ref = cpu_variant(OpId::matmul, "cpu");
  const Variant& blk = cpu_variant(OpId::matmul, "cpu_blocked");
  Tensor want = call_variant(ref, OpId::matmul, {a, b})[0];
  for (const std::string& isa : isas()) {
    IsaScope scope(isa);
    Tensor got = call_variant(blk, OpId::matmul, {a, b})[0];
    std::string msg = testing::compare(got, want, tol_for(a.dtype(), K));
    INFO(what << " isa " << isa << " " << a.dtype());
    CHECK(msg == "");
  }
}

}  // namespace

TEST_CASE("cpu gemm: sizes around the blocks, every ISA and dtype", "[gemm]") {
  std::vector<int64_t> ms{1, 5, 6, 7, 12, 13, 17, 97, 200};
  std::vector<int64_t> ns{1, 3, 8, 16, 17, 31, 33, 65, 520};
  std::vector<int64_t> ks{1, 2, 127, 129, 300};
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (size_t i = 0; i < ms.size(); ++i) {
      int64_t M = ms[i], N = ns[(i * 3 + 1) % ns.size()], K = ks[i % ks.size()];
      manual_seed(++seed);
      Tensor a = uniform({M, K}, -1, 1).to(dt), b = uniform({K, N}, -1, 1).to(dt);
      check_matmul(a, b, K, str("[", M, ",", K, "] x [", K, ",", N, "]"));
    }
  }
  // every M, N across two register tiles with a K that crosses a K block
  for (int64_t M = 1; M <= 26; M += 5)
    for (int64_t N = 1; N <= 66; N += 13) {
      manual_seed(++seed);
      Tensor a = uniform({M, 260}, -1, 1), b = uniform({260, N}, -1, 1);
      check_matmul(a, b, 260, str("[", M, ",260] x [260,", N, "]"));
    }
}

TEST_CASE("cpu gemm: large enough for several threads and tiles", "[gemm]") {
  manual_seed(5);
  Tensor a = uniform({301, 517}, -1, 1), b = uniform({517, 1100}, -1, 1);
  check_matmul(a, b, 517, "[301,517] x [517,1100]");
  Tensor ah = a.to(DType::bf16), bh = b.to(DType::bf16);
  check_matmul(ah, bh, 517, "bf16 [301,517] x [517,1100]");
}

TEST_CASE("cpu gemm: strided, transposed and broadcast operands", "[gemm]") {
  manual_seed(11);
  Tensor a = uniform({40, 70}, -1, 1), b = uniform({50, 70}, -1, 1);
  check_matmul(a, b.t(), 70, "b transposed");
  check_matmul(a.t().contiguous().t(), b.t(), 70, "a and b transposed (column-major a)");
  Tensor wide = uniform({40, 140}, -1, 1);
  check_matmul(wide.slice(1, 0, 140, 2), b.t(), 70, "a every other column");
  Tensor tall = uniform({140, 50}, -1, 1);
  check_matmul(a, tall.slice(0, 0, 140, 2), 70, "b every other row");
  // batches: broadcast b, broadcast a, both batched, batch dims broadcast against each other
  check_matmul(uniform({3, 4, 13, 70}, -1, 1), uniform({70, 9}, -1, 1), 70, "b broadcast over [3, 4]");
  check_matmul(uniform({13, 70}, -1, 1), uniform({5, 70, 9}, -1, 1), 70, "a broadcast over [5]");
  check_matmul(uniform({2, 1, 33, 70}, -1, 1), uniform({3, 70, 40}, -1, 1), 70, "[2,1] x [3] batches");
  check_matmul(uniform({6, 200, 64}, -1, 1), uniform({6, 64, 200}, -1, 1), 64, "6 large batches");
  check_matmul(uniform({64, 8, 8}, -1, 1), uniform({64, 8, 8}, -1, 1).transpose(-1, -2), 8, "64 tiny batches");
  // expanded (zero-stride) operand
  check_matmul(uniform({1, 70}, -1, 1).expand({30, 70}), uniform({70, 20}, -1, 1), 70, "a rows expanded");
}

TEST_CASE("cpu gemm: empty dims", "[gemm]") {
  check_matmul(zeros({0, 5}), zeros({5, 4}), 5, "M = 0");
  check_matmul(zeros({4, 5}), zeros({5, 0}), 5, "N = 0");
  check_matmul(uniform({4, 0}, -1, 1), uniform({0, 6}, -1, 1), 0, "K = 0 gives zeros");
  check_matmul(zeros({0, 4, 5}), zeros({5, 3}), 5, "no batches");
}

TEST_CASE("cpu gemm: the fused linear epilogue on every ISA", "[gemm]") {
  const Variant& ref = cpu_variant(OpId::linear, "cpu");
  const Variant& fused = cpu_variant(OpId::linear, "cpu_fused");
  uint64_t seed = 40;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (int act = 0; act <= 2; ++act)
      for (bool bias : {true, false})
        for (auto [rows, in_f, out_f] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                 {1, 1, 1}, {13, 129, 17}, {64, 784, 128}, {7, 0, 5}, {200, 40, 10}}) {
          manual_seed(++seed);
          Tensor x = uniform({rows, in_f}, -1, 1).to(dt), w = uniform({out_f, in_f}, -1, 1).to(dt);
          Tensor b = bias ? uniform({out_f}, -1, 1).to(dt) : Tensor();
          Attrs attrs = LinearAttrs{act};
          Tensor want = call_variant(ref, OpId::linear, {x, w, b}, attrs)[0];
          for (const std::string& isa : isas()) {
            IsaScope scope(isa);
            Tensor got = call_variant(fused, OpId::linear, {x, w, b}, attrs)[0];
            INFO("linear [" << rows << "," << in_f << "] -> " << out_f << " act " << act << " bias " << bias << " "
                            << dt << " isa " << isa);
            CHECK(testing::compare(got, want, tol_for(dt, in_f)) == "");
          }
        }
}

TEST_CASE("cpu gemm: ISA selection", "[gemm]") {
  std::string auto_isa = gemm::cpu_isa();
  CHECK(auto_isa == gemm::default_cpu_isa());
  CHECK(gemm::supported_cpu_isas().find(auto_isa) != std::string::npos);
  CHECK_THROWS_WITH(gemm::set_cpu_isa("sse9"), Catch::Contains("unknown ISA 'sse9'"));
  gemm::set_cpu_isa("generic");
  CHECK(gemm::cpu_isa() == "generic");
  gemm::set_cpu_isa("");
  CHECK(gemm::cpu_isa() == auto_isa);
}
