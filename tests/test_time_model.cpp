// The time model of bench/model/time_model.h (Note [launch time model]) on hand-made inputs: each
// regime (memory, compute on a small grid, latency, launch) worked out by hand on a made-up GPU,
// the fit recovering known parameters, the error report, and the parameter file's format and errors.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "bench/model/time_model.h"
#include "tests/model_toy_gpu.h"

using namespace ember;
using namespace ember::model;
using ember::model::testing::toy_gpu;

namespace {

TimeParams toy_params() {
  TimeParams p;
  p.launch_s = 2e-6;
  p.wave_s = 1e-6;
  p.step_s = 0.1e-6;
  p.hbm_fraction = 0.5;
  p.tensor_fraction = 0.25;
  p.simt_fraction = 0.5;
  return p;
}

KernelLatency kernel(double blocks, double steps, int threads, int resident, int launches = 1) {
  KernelLatency k;
  k.launches = launches;
  k.blocks_per_launch = blocks;
  k.steps_per_block = steps;
  k.threads_per_block = threads;
  k.resident_blocks_per_sm = resident;
  return k;
}

TimeInput input(double memory_us, double compute_us, double l1_us, std::vector<KernelLatency> k,
                MathUnit unit = MathUnit::fp32_simt) {
  TimeInput in;
  in.roofline.memory_s = memory_us * 1e-6;
  in.roofline.compute_s = compute_us * 1e-6;
  in.roofline.l1_s = l1_us * 1e-6;
  in.roofline.issue_efficiency = 1;
  in.unit = unit;
  in.kernels = std::move(k);
  return in;
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = std::string(EMBER_BINARY_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string load_error(const std::string& text) {
  std::string path = write_file("time_model_bad.txt", text);
  try {
    load_time_params(path);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("time model: a large grid is bound by memory at the measured bandwidth", "[model]") {
  // 1000 blocks of 256 threads, 4 resident per SM: ceil(1000 / 400) = 3 waves of 1 us; memory
  // 100 us at the data sheet's bandwidth is 200 us at half of it; plus one 2 us launch.
  TimeBreakdown t = predict_time(toy_gpu(), toy_params(), input(100, 10, 5, {kernel(1000, 0, 256, 4)}));
  CHECK(t.waves == 3);
  CHECK(t.latency_s == Approx(3e-6));
  CHECK(t.throughput_s == Approx(200e-6));
  CHECK(t.predicted_s == Approx(202e-6));
  CHECK(std::string(t.bound) == "memory");
}

TEST_CASE("time model: a small grid has the math of the SMs it occupies", "[model]") {
  // 5 blocks of 8 warps: 5 of 100 SMs, one block each, 8 of 64 warps = half the issue rate of the
  // 25% that hides latency. 1 us of fp32 math at the data sheet's peak: / 0.5 (simt_fraction)
  // / 0.5 (issue) / 0.05 (SMs) = 80 us. The latency, 1 wave of (1 + 40 x 0.1) us, is hidden.
  TimeBreakdown t = predict_time(toy_gpu(), toy_params(), input(0.5, 1, 0.2, {kernel(5, 40, 256, 2)}));
  CHECK(t.throughput_s == Approx(80e-6));
  CHECK(t.latency_s == Approx(5e-6));
  CHECK(t.predicted_s == Approx(82e-6));
  CHECK(std::string(t.bound) == "compute");
  // tensor-core math takes tensor_fraction instead
  TimeBreakdown m =
      predict_time(toy_gpu(), toy_params(), input(0.5, 1, 0.2, {kernel(5, 40, 256, 2)}, MathUnit::bf16_tensor));
  CHECK(m.throughput_s == Approx(160e-6));
}

TEST_CASE("time model: little math leaves the block's serial steps, then the launch", "[model]") {
  TimeBreakdown t = predict_time(toy_gpu(), toy_params(), input(0.01, 0.01, 0.01, {kernel(5, 40, 256, 2)}));
  CHECK(t.latency_s == Approx(5e-6));
  CHECK(t.predicted_s == Approx(7e-6));
  CHECK(std::string(t.bound) == "latency");
  // two kernels, the second launched 3 times: 4 launches of 2 us match (1 + 4) + 3 x 1 us of latency,
  // and a tie goes to the launches
  TimeBreakdown l =
      predict_time(toy_gpu(), toy_params(), input(0.01, 0.01, 0.01, {kernel(5, 40, 256, 2), kernel(50, 0, 128, 8, 3)}));
  CHECK(l.launch_s == Approx(8e-6));
  CHECK(l.latency_s == Approx(8e-6));
  CHECK(std::string(l.bound) == "launch");
}

TEST_CASE("time model: counters from a smaller shape scale the blocks", "[model]") {
  TimeInput in = input(0.01, 0.01, 0.01, {kernel(10, 4, 256, 2)});
  in.work_scale = 100;  // 1000 blocks: 5 waves of 200
  TimeBreakdown t = predict_time(toy_gpu(), toy_params(), in);
  CHECK(t.waves == 5);
  CHECK(t.latency_s == Approx(5 * 1.4e-6));
}

TEST_CASE("time model: kernels share the call's terms by their L1 traffic", "[model]") {
  KernelStats a, b;
  a.kernel = "gemm";
  a.launches = 1;
  a.blocks = 6;
  a.barriers = 60;
  a.threads_per_block = 256;
  a.shared_load.wavefronts = 300;
  a.global_load.sectors = 400;  // 100 wavefronts' worth
  b.kernel = "reduce";
  b.launches = 2;
  b.blocks = 64;
  b.threads_per_block = 128;
  b.global_store.sectors = 400;
  b.mbarrier_phases = 64;  // a pipeline's steps count like barriers
  std::vector<KernelLatency> k = kernel_latencies({a, b}, {2, 0});
  REQUIRE(k.size() == 2);
  CHECK(k[0].share == Approx(0.8));
  CHECK(k[1].share == Approx(0.2));
  CHECK(k[0].steps_per_block == Approx(10));
  CHECK(k[1].blocks_per_launch == Approx(32));
  CHECK(k[1].steps_per_block == Approx(1));
  CHECK(k[1].resident_blocks_per_sm == 0);
  CHECK_THROWS_AS(kernel_latencies({a, b}, {2}), std::invalid_argument);
}

TEST_CASE("time model: the fit recovers the parameters that made the times", "[model]") {
  TimeParams truth = toy_params();
  truth.launch_s = 3e-6;
  truth.wave_s = 1.5e-6;
  truth.step_s = 0.07e-6;
  std::vector<TimedCall> calls;
  auto add = [&](TimeInput in, bool small) {
    TimedCall c;
    c.label = "call " + std::to_string(calls.size());
    c.in = std::move(in);
    c.measured_s = predict_time(toy_gpu(), truth, c.in).predicted_s;
    c.small = small;
    calls.push_back(c);
  };
  add(input(1e-4, 1e-4, 1e-4, {kernel(1, 0, 32, 8)}), true);       // launch and one wave
  add(input(0.01, 0.01, 0.01, {kernel(5, 200, 256, 2)}), true);    // steps
  add(input(0.01, 0.01, 0.01, {kernel(4000, 2, 256, 2)}), true);   // waves
  add(input(0.01, 0.01, 0.01, {kernel(900, 100, 256, 1)}), true);  // both
  add(input(300, 10, 10, {kernel(10000, 0, 256, 8)}), false);      // memory
  add(input(1, 200, 10, {kernel(2000, 30, 256, 2)}), false);       // compute
  add(input(0.01, 0.01, 0.01, {kernel(3, 10, 64, 2, 3), kernel(1, 0, 32, 8)}), true);
  TimeParams start = toy_params();
  TimeParams fit = fit_time_params(toy_gpu(), start, calls);
  CHECK(fit.launch_s == Approx(truth.launch_s).epsilon(0.01));
  CHECK(fit.wave_s == Approx(truth.wave_s).epsilon(0.01));
  CHECK(fit.step_s == Approx(truth.step_s).epsilon(0.01));
  CHECK(fit.hbm_fraction == start.hbm_fraction);  // measured, not fitted

  FitReport r = fit_report(toy_gpu(), fit, calls, 0.35, true);
  CHECK(r.calls == 7);
  CHECK(r.small == 5);
  CHECK(r.within == 7);
  CHECK(r.small_within == 5);
  CHECK(r.loo_small_within == 5);
  CHECK(r.median_abs_error < 0.01);
  // the start is off: 2 + 1 us where 3 + 1.5 were measured misses the first call by a third
  std::vector<double> e = relative_errors(toy_gpu(), start, calls);
  CHECK(e[0] == Approx(1.0 / 3).epsilon(0.01));
  CHECK_THROWS_AS(fit_time_params(toy_gpu(), start, {calls[0], calls[1]}), std::invalid_argument);
}

TEST_CASE("time model: the parameter file round-trips and its errors name the line", "[model]") {
  TimeParams p = toy_params();
  p.header = {"# made by the test", "# second line"};
  p.stale = {"linear mma_sync [64,128] -> 10 bf16"};
  std::string path = std::string(EMBER_BINARY_DIR) + "/time_model_roundtrip.txt";
  save_time_params(path, p);
  TimeParams q = load_time_params(path);
  CHECK(q.launch_s == Approx(p.launch_s));
  CHECK(q.wave_s == Approx(p.wave_s));
  CHECK(q.step_s == Approx(p.step_s));
  CHECK(q.hbm_fraction == Approx(p.hbm_fraction));
  CHECK(q.tensor_fraction == Approx(p.tensor_fraction));
  CHECK(q.simt_fraction == Approx(p.simt_fraction));
  CHECK(q.header == p.header);
  CHECK(q.stale == p.stale);
  std::remove(path.c_str());

  const std::string good =
      "launch_us 2\nwave_us 1\nstep_us 0.1\nhbm_fraction 0.8\ntensor_fraction 0.8\nsimt_fraction 0.8\n";
  CHECK(load_error(good).empty());
  CHECK_THAT(load_error(good + "warp_us 3\n"), Catch::Contains("time_model_bad.txt:7: unknown key 'warp_us'"));
  CHECK_THAT(load_error(good + "wave_us 3\n"), Catch::Contains(":7: 'wave_us' given twice"));
  CHECK_THAT(load_error("launch_us -2\n"), Catch::Contains(":1: expected a positive number for launch_us, got '-2'"));
  CHECK_THAT(load_error("launch_us 2us\n"), Catch::Contains("got '2us'"));
  CHECK_THAT(load_error("launch_us 2 3\n"), Catch::Contains(":1: expected '<key> <value>'"));
  CHECK_THAT(load_error("launch_us 2\n"), Catch::Contains("the key 'wave_us' is missing"));
  CHECK_THAT(load_error(good + "stale linear\n"), Catch::Contains(":7: expected 'stale <op> <variant> <case>'"));
  CHECK_THROWS_WITH(load_time_params(std::string(EMBER_BINARY_DIR) + "/no_such_params.txt"),
                    Catch::Contains("cannot open the time model's parameters"));
}
