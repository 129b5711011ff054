// The roofline prediction (bench/model/roofline.h) and the kernel efficiency gate's file format
// and check (bench/model/expectations.h) on hand-made counters: every term of the model against
// numbers worked out by hand on a made-up GPU with round peaks, and every error the gate can give.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "bench/model/expectations.h"
#include "bench/model/roofline.h"
#include "tests/model_toy_gpu.h"

using namespace ember;
using namespace ember::model;
using ember::model::testing::toy_gpu;

namespace {

sim::LaunchCounters launch(const std::string& name, uint64_t sectors, uint64_t ideal, uint64_t wavefronts = 0,
                           uint64_t ideal_wavefronts = 0) {
  sim::LaunchCounters l;
  l.kernel = name;
  l.grid[0] = 10;
  l.block[0] = 256;
  l.global_load = {sectors / 2, sectors, ideal, ideal * 32};
  l.shared_load = {wavefronts / 2, wavefronts, ideal_wavefronts, ideal_wavefronts * 128};
  l.barriers = 3;
  return l;
}

PredictionInput input(double bytes, double flops, std::vector<KernelStats> k, std::vector<double> occ,
                      MathUnit unit = MathUnit::fp32_simt) {
  return {bytes, flops, bytes, flops, std::move(k), std::move(occ), unit};
}

std::string all(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

}  // namespace

TEST_CASE("roofline: efficiencies and grouping of launches by kernel", "[model]") {
  sim::GlobalCounters g{10, 100, 80, 2560};
  CHECK(sector_efficiency(g) == Approx(0.8));
  CHECK(sector_efficiency({}) == 1.0);  // no request: nothing wasted
  sim::SharedCounters s{4, 12, 4, 512};
  CHECK(conflict_factor(s) == Approx(3.0));
  CHECK(conflict_factor({}) == 1.0);

  std::vector<KernelStats> k =
      group_by_kernel({launch("a", 100, 50), launch("b", 10, 10), launch("a", 100, 100, 8, 4)});
  REQUIRE(k.size() == 2);
  CHECK(k[0].kernel == "a");  // order of first launch
  CHECK(k[0].launches == 2);
  CHECK(k[0].blocks == 20);
  CHECK(k[0].barriers == 6);
  CHECK(k[0].threads_per_block == 256);
  CHECK(k[0].global_load.sectors == 200);
  CHECK(k[0].global_load_efficiency() == Approx(0.75));
  CHECK(k[0].global_store_efficiency() == 1.0);
  CHECK(k[0].shared_conflict_factor() == Approx(2.0));
  CHECK(k[1].launches == 1);
}

TEST_CASE("roofline: resource-table entries found by the simulator's kernel names", "[model]") {
  auto entry = [](const std::string& name, int regs) {
    KernelResources k;
    k.kernel = name;
    k.registers = regs;
    return k;
  };
  std::vector<KernelResources> table = {
      entry("void ns::vec<4, float>(long, float*)", 22),
      entry("ns::plain(ns::(anonymous namespace)::Table, float*)", 32),
      entry("void ns::twin<float>(A<(1)>)", 40),
      entry("void ns::twin<float>(A<(2)>)", 40),  // same shortened name, same resources: fine
      entry("void ns::clash<float>(B<(1)>)", 40),
      entry("void ns::clash<float>(B<(2)>)", 48),  // same shortened name, different: unknown
  };
  CHECK(simulator_kernel_name("void ns::vec<4, float>(long, float*)") == "ns::vec<4, float>");
  // the simulator cuts at the last '(', also when it is inside the parameter list
  CHECK(simulator_kernel_name("ns::plain(ns::(anonymous namespace)::Table, float*)") == "ns::plain(ns::");
  REQUIRE(match_resources(table, "ns::vec<4, float>") != nullptr);
  CHECK(match_resources(table, "ns::vec<4, float>")->registers == 22);
  CHECK(match_resources(table, "ns::vec<4, float>(long, float*)") == nullptr);
  CHECK(match_resources(table, "void ns::vec<4, float>(long, float*)")->registers == 22);  // exact
  CHECK(match_resources(table, "ns::plain(ns::")->registers == 32);
  CHECK(match_resources(table, "ns::twin<float>(A<")->registers == 40);
  CHECK(match_resources(table, "ns::clash<float>(B<") == nullptr);
  CHECK(match_resources(table, "ns::missing") == nullptr);
}

TEST_CASE("roofline: math unit per variant and dtype", "[model]") {
  CHECK(math_unit_for("simt", "f16") == MathUnit::fp32_simt);
  CHECK(math_unit_for("mma_sync", "f16") == MathUnit::f16_tensor);
  CHECK(math_unit_for("igemm_mma", "bf16") == MathUnit::bf16_tensor);
  CHECK(math_unit_for("mma_sync", "f32") == MathUnit::tf32_tensor);
  CHECK(peak_flops(toy_gpu(), MathUnit::bf16_tensor) == 4e14);
}

TEST_CASE("roofline: memory-bound prediction charges wasted sectors and launches", "[model]") {
  // 1 GB minimum, half of every sector wasted: 2 GB from DRAM at 1 TB/s = 2 ms, plus one launch
  std::vector<KernelStats> k = group_by_kernel({launch("copy", 200, 100)});
  Prediction p = predict(toy_gpu(), input(1e9, 0, k, {0.5}));
  CHECK(p.sector_efficiency == Approx(0.5));
  CHECK(p.lower_bound_s == Approx(1e-3));
  CHECK(p.dram_bytes == Approx(2e9));
  CHECK(p.memory_s == Approx(2e-3));
  CHECK(p.launch_s == Approx(kLaunchOverheadSeconds));
  CHECK(p.predicted_s == Approx(2e-3 + kLaunchOverheadSeconds));
  CHECK(p.pct_of_roofline == Approx(100 * 1e-3 / (2e-3 + kLaunchOverheadSeconds)));
  CHECK(std::string(p.bound) == "memory");
  CHECK(p.issue_efficiency == 1.0);  // 50% occupancy hides latency

  // 12.5% occupancy: half the issue rate, so twice the time
  Prediction low = predict(toy_gpu(), input(1e9, 0, k, {0.125}));
  CHECK(low.issue_efficiency == Approx(0.5));
  CHECK(low.memory_s == Approx(4e-3));

  // a kernel missing from the resource table: full rate assumed, and flagged
  Prediction unknown = predict(toy_gpu(), input(1e9, 0, k, {-1}));
  CHECK(unknown.occupancy_unknown);
  CHECK(unknown.occupancy < 0);
  CHECK(unknown.memory_s == Approx(2e-3));

  // a tiny op is launch bound
  Prediction tiny = predict(toy_gpu(), input(1e3, 0, k, {1}));
  CHECK(std::string(tiny.bound) == "launch");
}

TEST_CASE("roofline: traffic ratio is the bytes the kernels asked for over the op's minimum", "[model]") {
  // two launches of a kernel that each read 100 sectors' worth (3200 bytes) and a second kernel
  // reading 50 (1600): 8000 bytes asked for an op that must move 4000 at the shape that ran
  std::vector<KernelStats> k =
      group_by_kernel({launch("pass1", 100, 100), launch("pass1", 100, 100), launch("pass2", 50, 50)});
  PredictionInput in = input(4000, 0, k, {1, 1});
  CHECK(predict(toy_gpu(), in).traffic_ratio == Approx(2.0));
  // the shape predicted does not matter, the shape that ran does
  in.bytes = 4e9;
  CHECK(predict(toy_gpu(), in).traffic_ratio == Approx(2.0));
  in.run_bytes = 8000;
  CHECK(predict(toy_gpu(), in).traffic_ratio == Approx(1.0));
  // no cost-model bytes: no ratio
  in.run_bytes = 0;
  CHECK(predict(toy_gpu(), in).traffic_ratio == 0);
}

TEST_CASE("roofline: compute-bound prediction uses the variant's peak", "[model]") {
  std::vector<KernelStats> k = group_by_kernel({launch("gemm", 100, 100)});
  // 1e12 FLOPs on f16 tensor cores (2e14/s) = 5 ms; 1 MB of traffic is nothing beside it
  Prediction p = predict(toy_gpu(), input(1e6, 1e12, k, {0.25}, MathUnit::f16_tensor));
  CHECK(p.lower_bound_s == Approx(5e-3));
  CHECK(p.compute_s == Approx(5e-3));
  CHECK(std::string(p.bound) == "compute");
  // the same on the SIMT pipes (1e13/s): 100 ms
  Prediction simt = predict(toy_gpu(), input(1e6, 1e12, k, {0.25}));
  CHECK(simt.compute_s == Approx(0.1));
}

TEST_CASE("roofline: L1 time scales from the shape that ran to the shape predicted", "[model]") {
  // 2e6 shared wavefronts (twice the ideal: 2-way conflicts) and 400 global sectors (100
  // wavefronts' worth) counted on a 1e6-FLOP run; the predicted shape has 1e9 FLOPs, so 1000 times
  // as many: (2e6 + 100) x 1000 wavefronts over 100 SMs at 1 GHz = 20 ms, above the compute time
  // (1e9 / 1e13 = 0.1 ms)
  std::vector<KernelStats> k = group_by_kernel({launch("gemm", 400, 400, 2000000, 1000000)});
  PredictionInput in{1e3, 1e9, 1e3, 1e6, k, {1}, MathUnit::fp32_simt};
  Prediction p = predict(toy_gpu(), in);
  CHECK(p.conflict_factor == Approx(2.0));
  CHECK(p.l1_s == Approx((2e6 + 100) * 1000 / 1e11));
  CHECK(std::string(p.bound) == "L1");
  // a naive kernel: no shared memory, but every FMA's operands come through L1 as sectors
  std::vector<KernelStats> naive = group_by_kernel({launch("naive", 4000000, 4000000)});
  Prediction q = predict(toy_gpu(), {1e3, 1e9, 1e3, 1e6, naive, {1}, MathUnit::fp32_simt});
  CHECK(q.l1_s == Approx(1e6 * 1000 / 1e11));
  CHECK(std::string(q.bound) == "L1");

  PredictionInput bad = in;
  bad.occupancy.clear();
  CHECK_THROWS_WITH(predict(toy_gpu(), bad), Catch::Contains("one occupancy per kernel"));
  GpuSpec none = toy_gpu();
  none.hbm_bytes_per_s = 0;
  CHECK_THROWS_WITH(predict(none, in), Catch::Contains("no bandwidth"));
}

TEST_CASE("gate: globs match whole kernel names, brackets are literal", "[model]") {
  CHECK(glob_match("*elementwise*", "void ember::elementwise_kernel<float>(float*)"));
  CHECK(glob_match("void ember::gemm::dev::simt_kernel<*", "void ember::gemm::dev::simt_kernel<float, 128>(int)"));
  CHECK_FALSE(glob_match("ember::gemm*", "void ember::gemm::x"));  // anchored at the start
  CHECK_FALSE(glob_match("*kernel", "kernel2"));                   // and at the end
  CHECK(glob_match("a?c", "abc"));
  CHECK(glob_match("*[4]*", "f(float[4])"));
  CHECK_FALSE(glob_match("*[4]*", "f(float4)"));
  CHECK(glob_match("*", ""));
}

TEST_CASE("gate: the expectations file format and its errors name the line", "[model]") {
  std::vector<Expectation> e = parse_expectations(
      "# header\n\n*elementwise*  global_load_efficiency  >=  0.9   # vector loads\n"
      "*gemm*\tshared_conflict_factor == 1 # swizzled tiles\n*x* spills <= 0 # none\n",
      "exp.txt");
  REQUIRE(e.size() == 3);
  CHECK(e[0].glob == "*elementwise*");
  CHECK(e[0].counter == "global_load_efficiency");
  CHECK(e[0].cmp == Expectation::Cmp::ge);
  CHECK(e[0].value == 0.9);
  CHECK(e[0].why == "vector loads");
  CHECK(e[0].where() == "exp.txt:3");
  CHECK(e[1].cmp == Expectation::Cmp::eq);
  CHECK(e[2].where() == "exp.txt:5");
  CHECK(e[0].call_glob == "*");
  std::vector<Expectation> narrowed = parse_expectations("*gemm*@matmul/* global_efficiency >= 1 # aligned\n", "n");
  REQUIRE(narrowed.size() == 1);
  CHECK(narrowed[0].glob == "*gemm*");
  CHECK(narrowed[0].call_glob == "matmul/*");
  CHECK_THROWS_WITH(parse_expectations("*gemm*@ occupancy >= 0.5 # x\n", "f"),
                    Catch::Contains("f:1: empty kernel or call glob"));
  CHECK(needs_resources("spills"));
  CHECK_FALSE(needs_resources("global_efficiency"));

  CHECK_THROWS_WITH(parse_expectations("\n*a* occupancy >= 0.5\n", "f"), Catch::Contains("f:2: no reason"));
  CHECK_THROWS_WITH(parse_expectations("*a* occupancy >= 0.5 #  \n", "f"), Catch::Contains("f:1: empty reason"));
  CHECK_THROWS_WITH(parse_expectations("*a* occupancy > 0.5 # x\n", "f"),
                    Catch::Contains("f:1: unknown comparison '>'"));
  CHECK_THROWS_WITH(parse_expectations("*a* coalescing >= 0.5 # x\n", "f"),
                    Catch::Contains("f:1: unknown counter 'coalescing'"));
  CHECK_THROWS_WITH(parse_expectations("*a* occupancy >= half # x\n", "f"), Catch::Contains("f:1: the value 'half'"));
  CHECK_THROWS_WITH(parse_expectations("*a* occupancy >= # x\n", "f"), Catch::Contains("f:1: expected"));
  CHECK_THROWS_WITH(parse_expectations("*a* occupancy >= 1 2 # x\n", "f"), Catch::Contains("f:1: unexpected '2'"));
  CHECK_THROWS_WITH(load_expectations("/nonexistent/exp.txt"), Catch::Contains("cannot open"));
}

TEST_CASE("gate: violations name the kernel, the counter, the bar and the line", "[model]") {
  KernelResources res;
  res.kernel = "k_good";
  res.registers = 40;
  res.spill_stores = 8;
  std::vector<GateSubject> subjects;
  subjects.push_back({group_by_kernel({launch("k_good", 100, 100)})[0], "op/v/case f32", &res, 0.5});
  subjects.push_back({group_by_kernel({launch("k_bad", 100, 50, 30, 10)})[0], "op/v/case f16", nullptr, -1});
  std::vector<Expectation> lines = parse_expectations(
      "k_* global_load_efficiency >= 0.9 # coalesced\n"     // line 1: k_bad fails
      "k_* shared_conflict_factor <= 1.0 # no conflicts\n"  // line 2: k_bad fails (3.0)
      "k_good occupancy >= 0.5 # as claimed\n"              // line 3: holds (equal)
      "k_good spills == 0 # none\n"                         // line 4: fails (8)
      "k_bad occupancy >= 0.25 # x\n"                       // line 5: unknown for k_bad
      "gone_* global_efficiency >= 0.5 # renamed\n",        // line 6: matches nothing
      "g.txt");
  std::vector<std::string> p = check_expectations(lines, subjects);
  INFO(all(p));
  REQUIRE(p.size() == 5);
  CHECK(p[0] == "kernel k_bad [op/v/case f16]: counter global_load_efficiency = 0.5, expected >= 0.9 (g.txt:1)");
  CHECK(p[1] == "kernel k_bad [op/v/case f16]: counter shared_conflict_factor = 3, expected <= 1 (g.txt:2)");
  CHECK(p[2] == "kernel k_good [op/v/case f32]: counter spills = 8, expected == 0 (g.txt:4)");
  CHECK(p[3] ==
        "kernel k_bad [op/v/case f16]: counter occupancy unknown: the kernel is not in the resource table, expected >= "
        "0.25 (g.txt:5)");
  CHECK_THAT(p[4], Catch::StartsWith("g.txt:6: no kernel that ran matches 'gone_*'"));

  // a call glob narrows a line to some calls: k_bad ran in an f16 call only
  std::vector<std::string> narrowed =
      check_expectations(parse_expectations("k_*@*f32 global_load_efficiency >= 0.9 # x\n"
                                            "k_bad@*f32 global_load_efficiency >= 0.9 # x\n",
                                            "n.txt"),
                         subjects);
  REQUIRE(narrowed.size() == 1);
  CHECK_THAT(narrowed[0], Catch::StartsWith("n.txt:2: no kernel that ran matches 'k_bad@*f32'"));

  // all good: nothing reported
  CHECK(check_expectations(parse_expectations("k_good global_load_efficiency >= 1 # x\n", "g"), subjects).empty());
}
