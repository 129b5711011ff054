// CUDA GEMM tests beyond the generic parity of the samples: shapes large enough for many tiles
// (the grouped tile order, several waves), every operand layout, more batches than gridDim.z
// holds, cuBLAS handles used from several threads, and autotuning on the device (including a CUDA
// graph capture, during which nothing may be timed).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <thread>
#include <tuple>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/rng.h"
#include "kernels/autotune.h"
#include "kernels/functional.h"
#include "kernels/ops/linear.h"  // LinearAttrs
#include "kernels/ops/mlp.h"     // MlpAttrs
#include "kernels/registry.h"
#include "nn/nn.h"
#include "tests/op_driver.h"

#if EMBER_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/gemm/cuda_gemm.h"
#include "tests/launch_count_util.h"
#endif

using namespace ember;

namespace {

using testing::find_variant;

// Every CUDA variant of matmul that accepts (a, b) against the CPU reference (but the TF32 ones,
// which read f32 with 10 mantissa bits: the parity samples bound them, Note [TF32 parity]).
void check_all_variants(const Tensor& a_cpu, const Tensor& b_cpu, Tol tol, const std::string& what) {
  const Variant* ref = find_variant(OpId::matmul, DeviceType::cpu, "cpu");
  REQUIRE(ref != nullptr);
  Tensor want = call_variant(*ref, OpId::matmul, {a_cpu, b_cpu})[0];
  Tensor a = testing::to_device_same_layout(a_cpu, kCUDA), b = testing::to_device_same_layout(b_cpu, kCUDA);
  std::vector<Tensor> in{a, b};
  std::vector<Tensor> probe_out{empty({0}, TensorOptions(a.dtype()).device(kCUDA))};
  KernelCall probe{OpId::matmul, in, probe_out, Attrs{}};
  int ran = 0, vendor = 0;
  for (const Variant& v : op_info(OpId::matmul).variants) {
    if (v.device != DeviceType::cuda || (v.flags & kTf32) || !v.accepts(probe)) continue;
    Tensor got = call_variant(v, OpId::matmul, {a, b})[0].to(kCPU);
    INFO(what << " variant " << v.name << " " << a_cpu.dtype());
    CHECK(testing::compare(got, want, tol) == "");
    ++ran;
    vendor += (v.flags & kVendor) != 0;
  }
  // naive, tiled (, tensor cores) and the vendor ones (the simulator's emulation of cuBLAS and
  // cuBLASLt in the simulator build)
  CHECK(ran >= 3);
  CHECK(vendor >= 1);
}

Tol gemm_tol(DType dt) {
  switch (dt) {
    case DType::f64: return {1e-10, 1e-10};
    case DType::f32: return {1e-5, 2e-4};
    case DType::f16: return {1e-3, 2e-4};
    default: return {1.6e-2, 2e-4};
  }
}

}  // namespace

TEST_CASE("cuda gemm: many tiles, every layout, every dtype", "[gpu][gemm]") {
  manual_seed(3);
  // 9 x 6 tiles of 128: a partial group of tile rows. The simulator keeps the 9 tile rows (the
  // grouped tile order) and ragged edges in every dim, with fewer columns and k tiles.
  const int64_t M = 1100, K = testing::kSimulator ? 72 : 520, N = testing::kSimulator ? 136 : 700;
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    Tensor a = uniform({M, K}, -1, 1).to(dt), b = uniform({K, N}, -1, 1).to(dt);
    Tensor at = uniform({K, M}, -1, 1).to(dt).t(), bt = uniform({N, K}, -1, 1).to(dt).t();
    check_all_variants(a, b, gemm_tol(dt), "row-major x row-major");
    check_all_variants(at, b, gemm_tol(dt), "transposed x row-major");
    check_all_variants(a, bt, gemm_tol(dt), "row-major x transposed");
    check_all_variants(at, bt, gemm_tol(dt), "transposed x transposed");
  }
}

TEST_CASE("cuda gemm: more batches than one grid dimension holds", "[gpu][gemm]") {
  manual_seed(4);
  // 70000 > 65535 blocks along z: the kernels loop over batches. (f32 only in the simulator: the
  // grid-z loop is the same code for every dtype, and 70000 blocks of 256 threads are slow there.)
  for (DType dt : {DType::f32, DType::f16}) {
    if (testing::kSimulator && dt != DType::f32) continue;
    Tensor a = uniform({70000, 3, 8}, -1, 1).to(dt), b = uniform({70000, 8, 2}, -1, 1).to(dt);
    check_all_variants(a, b, gemm_tol(dt), "70000 batches");
  }
}

TEST_CASE("cuda gemm: cuBLAS from several threads", "[gpu][gemm]") {
  manual_seed(5);
  // smaller and fewer in the simulator (its cuBLAS computes on the CPU), the same handle pool
  const int64_t m = testing::kSimulator ? 60 : 300, iterations = testing::kSimulator ? 4 : 20;
  Tensor a = uniform({m, 200}, -1, 1).cuda(), b = uniform({200, 100}, -1, 1).cuda();
  const Variant* cublas = find_variant(OpId::matmul, DeviceType::cuda, "cublas");
  REQUIRE(cublas != nullptr);
  Tensor want = call_variant(*cublas, OpId::matmul, {a, b})[0].to(kCPU);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int64_t i = 0; i < iterations; ++i) {
          Tensor got = call_variant(*cublas, OpId::matmul, {a, b})[0].to(kCPU);
          std::string msg = testing::compare(got, want, {0, 0});
          if (!msg.empty()) errors[static_cast<size_t>(t)] = msg;
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (const std::string& e : errors) CHECK(e == "");
}

#if EMBER_WITH_CUDA  // (a CPU-only build has no cuBLASLt to ask)
TEST_CASE("cuda autotune: a GPU's key names the driver, runtime, cuBLASLt and cuDNN it runs with", "[gpu][autotune]") {
  std::vector<Tensor> in{uniform({3, 4}, -1, 1).cuda(), uniform({5, 4}, -1, 1).cuda(), Tensor()};
  std::vector<Tensor> out{empty({3, 5}, TensorOptions().device(in[0].device()))};
  Attrs relu = LinearAttrs{1};
  const std::string k = autotune::key(op_info(OpId::linear), KernelCall{OpId::linear, in, out, relu});
  INFO(k);
  CHECK(k.find("linear|cuda:0:") == 0);
  CHECK(k.find(" sm_") != std::string::npos);
  CHECK(k.find(" driver ") != std::string::npos);
  CHECK(k.find(" runtime ") != std::string::npos);
  CHECK(k.find(" cublasLt " + std::to_string(cublasLtGetVersion()) + " ") != std::string::npos);
#if EMBER_WITH_CUDNN
  CHECK(k.find(" cudnn ") != std::string::npos);
#endif
  CHECK(k.find(" ember ") != std::string::npos);
}
#endif

TEST_CASE("cuda autotune: tunes once per key, never while a graph is captured", "[gpu][autotune]") {
  // Autotune needs two candidates: for matmul f32, ours and the vendor ones (cuBLAS, cuBLASLt; in
  // the simulator its emulation of them, with smaller matrices).
  const OpId op = OpId::matmul;
  auto run = [](const Tensor& x, const Tensor& w) { return matmul(x, w); };
  manual_seed(6);
  const int64_t m = testing::kSimulator ? 64 : 256, k = testing::kSimulator ? 96 : 384;
  Tensor a = uniform({m, k}, -1, 1).cuda(), b = uniform({k, 128}, -1, 1).cuda();
  // the CPU reference by its variant: "auto" would tune the CPU's matmul too (oneDNN beside ours)
  const Variant* cpu = find_variant(op, DeviceType::cpu, "cpu");
  REQUIRE(cpu != nullptr);
  auto ref = [&](const Tensor& x, const Tensor& w) { return call_variant(*cpu, op, {x.cpu(), w.cpu()})[0]; };
  Tensor want = ref(a, b);
  REQUIRE(find_variant(op, DeviceType::cuda, "cublas") != nullptr);
  REQUIRE(find_variant(op, DeviceType::cuda, "cublaslt") != nullptr);
  autotune::clear();
  autotune::reset_stats();
  set_backend(op, "auto");
  Tensor y = run(a, b);
  CHECK(testing::compare(y.cpu(), want, {1e-5, 1e-4}) == "");
  CHECK(autotune::stats().tunings == 1);
  // every candidate, cuBLAS and cuBLASLt among them, ran (one that throws is skipped quietly)
  CHECK(autotune::stats().failures == 0);
  auto es = autotune::entries();
  REQUIRE(es.size() == 1);
  CHECK(es[0].key.find(std::string(op_info(op).name) + "|cuda:0:") == 0);
  CHECK(es[0].ms > 0);
  run(a, b);
  CHECK(autotune::stats().tunings == 1);
  CHECK(autotune::stats().hits >= 1);
#if EMBER_WITH_CUDA
  // a new key while capturing: the default variant is recorded, nothing is timed
  cudaStream_t s = static_cast<cudaStream_t>(cuda::current_stream(0).handle());
  Tensor a2 = uniform({testing::kSimulator ? 40 : 96, k}, -1, 1).cuda();
  cuda::current_stream(0).synchronize();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  Tensor y2;
  bool threw = false;
  try {
    y2 = run(a2, b);
  } catch (const std::exception&) {
    threw = true;
  }
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  CHECK(!threw);
  CHECK(autotune::stats().capture_skips == 1);
  CHECK(autotune::stats().tunings == 1);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  cuda::current_stream(0).synchronize();
  CHECK(testing::compare(y2.cpu(), ref(a2, b), {1e-5, 1e-4}) == "");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  // eagerly, the same key is tuned
  run(a2, b);
  CHECK(autotune::stats().tunings == 2);
#endif
  set_backend(op, "default");
  autotune::clear();
}

#if EMBER_WITH_CUDA
// Split-K's last block per tile sums the partials in the GEMM's own launch (Note [split-K], Note
// [stream tickets]): one kernel where the reduce kernel made two, the same sums bit for bit, and
// the tickets back at 0 for the next call. A capture on a stream that has no tickets yet takes the
// two-kernel way, which is the reference here.
TEST_CASE("cuda gemm: split-K sums its partials within the launch, bit for bit as the reduce kernel", "[gpu][gemm]") {
  manual_seed(13);
  for (auto [variant, dt] : std::vector<std::pair<const char*, DType>>{
           {"simt", DType::f32}, {"simt", DType::f64}, {"mma_sync", DType::bf16}}) {
    INFO(variant << " " << dt);
    const Variant* v = find_variant(OpId::linear, DeviceType::cuda, variant);
    REQUIRE(v != nullptr);
    const TensorOptions o = TensorOptions(dt).device(kCUDA);
    // [64, 784] -> 128: one output tile, K long enough to split
    Tensor x = uniform({64, 784}, -1, 1, o), w = uniform({128, 784}, -0.1, 0.1, o), b = uniform({128}, -1, 1, o);
    const Attrs relu = LinearAttrs{static_cast<int64_t>(Activation::relu)};
    Tensor once = call_variant(*v, OpId::linear, {x, w, b}, relu)[0];
    CHECK(test::kernels_launched_by([&] { call_variant(*v, OpId::linear, {x, w, b}, relu); }) == 1);
    // again, and a batch of 3 (3 tiles, 3 tickets): the tickets went back to 0
    Tensor again = call_variant(*v, OpId::linear, {x, w, b}, relu)[0];
    CHECK(std::memcmp(again.cpu().data_ptr(), once.cpu().data_ptr(), once.nbytes()) == 0);
    Tensor x3 = uniform({3, 64, 784}, -1, 1, o);
    const Variant* cpu = find_variant(OpId::linear, DeviceType::cpu, "cpu");
    REQUIRE(cpu != nullptr);
    Tensor y3 = call_variant(*v, OpId::linear, {x3, w, b}, relu)[0];
    CHECK(testing::compare(y3.cpu(), call_variant(*cpu, OpId::linear, {x3.cpu(), w.cpu(), b.cpu()}, relu)[0],
                           gemm_tol(dt)) == "");
    // the two-kernel way: on a new stream, which has no tickets yet
    Tensor two = empty({64, 128}, o);
    CHECK(test::kernels_run_on_a_fresh_stream([&] {
            call_variant_into(*v, OpId::linear, {x, w, b}, {two}, relu);
          }) == 2);
    CHECK(std::memcmp(two.cpu().data_ptr(), once.cpu().data_ptr(), once.nbytes()) == 0);
  }
}
#endif

#if EMBER_WITH_CUDA
// mma_cluster splits K over the blocks of a thread-block cluster and adds the partials through
// distributed shared memory (Note [cluster split-K] in gemm_mma.cu): 8 and 3 splits, ragged tiles
// in M, N and K, every operand layout, batches, each epilogue; one launch, the same bits twice.
TEST_CASE("cuda gemm: mma_cluster splits K over a cluster, every layout, ragged edges", "[gpu][gemm]") {
  if (!gemm::mma_cluster_supported(0)) {
    SUCCEED("not sm_90: no clusters");
    return;
  }
  manual_seed(17);
  const Variant* v = find_variant(OpId::matmul, DeviceType::cuda, "mma_cluster");
  const Variant* lin = find_variant(OpId::linear, DeviceType::cuda, "mma_cluster");
  const Variant* mm_cpu = find_variant(OpId::matmul, DeviceType::cpu, "cpu");
  const Variant* lin_cpu = find_variant(OpId::linear, DeviceType::cpu, "cpu");
  REQUIRE((v && lin && mm_cpu && lin_cpu));
  for (DType dt : {DType::f16, DType::bf16}) {
    // 2 x 2 tiles of 64, 16 k tiles: 8 splits of 2; 3 batches of 2 x 1 tiles, 6 k tiles: 3 of 2
    for (auto [batch, M, K, N] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{{1, 100, 1000, 72}, {3, 70, 330, 40}}) {
      const Shape sa = batch == 1 ? Shape{M, K} : Shape{batch, M, K};
      const Shape sb = batch == 1 ? Shape{K, N} : Shape{batch, K, N};
      Tensor a = uniform(sa, -1, 1).to(dt), b = uniform(sb, -1, 1).to(dt);
      Tensor at = uniform(batch == 1 ? Shape{K, M} : Shape{batch, K, M}, -1, 1).to(dt).transpose(-1, -2);
      Tensor bt = uniform(batch == 1 ? Shape{N, K} : Shape{batch, N, K}, -1, 1).to(dt).transpose(-1, -2);
      for (auto [x, y, what] :
           std::vector<std::tuple<Tensor, Tensor, const char*>>{{a, b, "row-major x row-major"},
                                                                {at, b, "transposed x row-major"},
                                                                {a, bt, "row-major x transposed"},
                                                                {at, bt, "transposed x transposed"}}) {
        INFO(dt << " batch " << batch << " [" << M << "," << K << "] x [" << K << "," << N << "] " << what);
        Tensor want = call_variant(*mm_cpu, OpId::matmul, {x, y})[0];
        std::vector<Tensor> in{testing::to_device_same_layout(x, kCUDA), testing::to_device_same_layout(y, kCUDA)};
        Tensor got = call_variant(*v, OpId::matmul, in)[0];
        CHECK(testing::compare(got.cpu(), want, gemm_tol(dt)) == "");
        CHECK(test::kernels_launched_by([&] { call_variant(*v, OpId::matmul, in); }) == 1);
        Tensor again = call_variant(*v, OpId::matmul, in)[0];
        CHECK(std::memcmp(again.cpu().data_ptr(), got.cpu().data_ptr(), got.nbytes()) == 0);
      }
    }
    // the epilogue after the cluster's sum: bias, then gelu or relu, on ragged tiles
    for (int64_t act : {static_cast<int64_t>(Activation::gelu), static_cast<int64_t>(Activation::relu)}) {
      INFO(dt << " linear [100,1000] -> 72, activation " << act);
      Tensor x = uniform({100, 1000}, -1, 1).to(dt), w = uniform({72, 1000}, -0.1, 0.1).to(dt);
      Tensor bias = uniform({72}, -1, 1).to(dt);
      const Attrs attrs = LinearAttrs{act};
      Tensor want = call_variant(*lin_cpu, OpId::linear, {x, w, bias}, attrs)[0];
      Tensor got = call_variant(*lin, OpId::linear, {x.cuda(), w.cuda(), bias.cuda()}, attrs)[0];
      CHECK(testing::compare(got.cpu(), want, gemm_tol(dt)) == "");
    }
  }
}
#endif

// The Hopper GEMM's library variants are simulator-only (kSimOnly, Note [simulator-only
// candidates] in kernels/autotune.cpp): never the default, but autotune candidates once their
// output agrees with the default's on the call. Here they are made the fastest, so one wins (the
// other simulator-only variant, mma_cluster, is checked too, and timed as slow as the rest).
double simulator_only_fastest(const Variant& v) {
  return (v.flags & kSimOnly) && std::string(v.name).rfind("wgmma", 0) == 0 ? 0.001 : 1.0;
}

TEST_CASE("cuda autotune: the Hopper GEMM is a candidate once it agrees with the default", "[gpu][autotune][wgmma]") {
  if (!gemm::wgmma_supported(0)) {
    WARN("skipped: the Hopper GEMM needs a GPU of compute capability 9.0");
    return;
  }
  manual_seed(12);
  const DType dt = DType::bf16;
  Tensor x = uniform({64, 192}, -1, 1).to(dt), w = uniform({128, 192}, -0.1, 0.1).to(dt);
  Tensor b = uniform({128}, -1, 1).to(dt);
  const Variant* cpu = find_variant(OpId::linear, DeviceType::cpu, "cpu");
  REQUIRE(cpu != nullptr);
  const Tensor want = call_variant(*cpu, OpId::linear, {x, w, b}, LinearAttrs{1})[0];
  Tensor xc = x.cuda(), wc = w.cuda(), bc = b.cuda();
  std::vector<Tensor> in{xc, wc, bc}, out{empty({64, 128}, TensorOptions(dt).device(kCUDA))};
  const KernelCall call{OpId::linear, in, out, LinearAttrs{1}};
  const OpInfo& info = op_info(OpId::linear);
  const Variant* mine = find_variant(OpId::linear, DeviceType::cuda, "wgmma_128x128");
  REQUIRE(mine != nullptr);
  REQUIRE(mine->accepts(call));
  CHECK((mine->flags & kSimOnly) != 0);
  CHECK(std::string(select_variant(info, call, DeviceType::cuda, "").name).rfind("wgmma", 0) != 0);  // not default

  autotune::clear();
  autotune::reset_stats();
  autotune::set_timer_for_testing(&simulator_only_fastest);
  set_backend(OpId::linear, "auto");
  Tensor y = linear(xc, wc, bc, Activation::relu);
  autotune::set_timer_for_testing(nullptr);
  set_backend(OpId::linear, "default");
  CHECK(autotune::stats().sim_only_checks == 3);  // mma_cluster, wgmma_128x128 and wgmma_128x256
  CHECK(autotune::stats().sim_only_rejected == 0);
  auto es = autotune::entries();
  REQUIRE(es.size() == 1);
  CHECK(es[0].variant == "wgmma_128x128");  // the first of the fastest
  CHECK(testing::compare(y.cpu(), want, gemm_tol(dt)) == "");
  autotune::clear();
}

TEST_CASE("cuda linear: every variant at the MNIST shapes, with each epilogue", "[gpu][gemm]") {
  manual_seed(7);
  const Variant* ref = find_variant(OpId::linear, DeviceType::cpu, "cpu");
  REQUIRE(ref != nullptr);
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [rows, in_f, out_f] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {64, 784, 128}, {512, 784, 128}, {128, 128, 10}, {64, 3136, 128}})
      for (int act = 0; act <= 2; ++act) {
        // The simulator runs the two largest shapes (over 2^24 multiply-adds) with one epilogue per
        // dtype, gelu in f32 and relu in bf16; the smaller shapes take all three.
        const bool large = rows * in_f * out_f > (int64_t{1} << 24);
        if (testing::kSimulator && large && act != (dt == DType::f32 ? 2 : 1)) continue;
        Tensor x = uniform({rows, in_f}, -1, 1).to(dt), w = uniform({out_f, in_f}, -0.1, 0.1).to(dt);
        Tensor bias = uniform({out_f}, -1, 1).to(dt);
        Attrs attrs = LinearAttrs{act};
        Tensor want = call_variant(*ref, OpId::linear, {x, w, bias}, attrs)[0];
        std::vector<Tensor> in{x.cuda(), w.cuda(), bias.cuda()};
        std::vector<Tensor> probe_out{empty({0}, TensorOptions(dt).device(kCUDA))};
        KernelCall probe{OpId::linear, in, probe_out, attrs};
        for (const Variant& v : op_info(OpId::linear).variants) {
          // (the TF32 variants: bound by the parity samples, Note [TF32 parity])
          if (v.device != DeviceType::cuda || (v.flags & kTf32) || !v.accepts(probe)) continue;
          Tensor got = call_variant(v, OpId::linear, in, attrs)[0].to(kCPU);
          INFO("linear [" << rows << "," << in_f << "] -> " << out_f << " act " << act << " " << dt << " variant "
                          << v.name);
          CHECK(testing::compare(got, want, gemm_tol(dt)) == "");
        }
      }
}

#if EMBER_WITH_CUDA
// At the MNIST MLP's layers a relu layer's backward is two kernels (one when its input needs no
// gradient; Note [fused linear backward]), and they compute what the composite (relu_backward,
// matmul, sum) does.
TEST_CASE("cuda linear: a relu layer's backward is two kernels at the MLP's shapes", "[gpu][gemm]") {
  const Variant* composite = find_variant(OpId::linear_backward_weight, DeviceType::cuda, "composite");
  const Variant* composite_dx = find_variant(OpId::linear_backward_input, DeviceType::cuda, "composite");
  REQUIRE(composite != nullptr);
  REQUIRE(composite_dx != nullptr);
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [rows, in_f, out_f] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{64, 784, 128}, {64, 128, 64}, {128, 128, 64}}) {
      INFO("[" << rows << "," << in_f << "] -> " << out_f << " relu " << dt);
      const TensorOptions o = TensorOptions(dt).device(kCUDA);
      Tensor x = uniform({rows, in_f}, -1, 1, o), w = uniform({out_f, in_f}, -0.1, 0.1, o).requires_grad_(true);
      Tensor b = uniform({out_f}, -0.5, 0.5, o).requires_grad_(true), g = uniform({rows, out_f}, -1, 1, o);
      auto backward = [&](bool input_grad) {
        x.requires_grad_(input_grad);
        for (Tensor* t : {&x, &w, &b}) t->reset_grad();
        Tensor y = linear(x, w, b, Activation::relu);
        return test::kernels_launched_by([&] { y.backward(g); });
      };
      backward(true);  // warm-up (allocations, the variants' first calls)
      CHECK(backward(true) == 2);
      CHECK(backward(false) == 1);
      // the fused kernels' results against the composite's
      x.requires_grad_(true);
      for (Tensor* t : {&x, &w, &b}) t->reset_grad();
      Tensor y = linear(x, w, b, Activation::relu);
      y.backward(g);
      const Attrs relu = LinearAttrs{static_cast<int64_t>(Activation::relu)};
      std::vector<Tensor> want =
          call_variant(*composite, OpId::linear_backward_weight, {g, y.detach(), x.detach()}, relu);
      Tensor want_dx = call_variant(*composite_dx, OpId::linear_backward_input, {g, y.detach(), w.detach()}, relu)[0];
      CHECK(testing::compare(w.grad().cpu(), want[0].cpu(), gemm_tol(dt)) == "");
      CHECK(testing::compare(b.grad().cpu(), want[1].cpu(), gemm_tol(dt)) == "");
      CHECK(testing::compare(x.grad().cpu(), want_dx.cpu(), gemm_tol(dt)) == "");
    }
}
#endif

#if EMBER_WITH_CUDA
// Where the outer-product kernels refuse (the CNN's 3136-wide layer from batch 256 in f32, 512 in
// bf16) the fused forms take both ops: the SIMT GEMM's in f32 (Note [fused simt backward]), the
// tensor cores' in bf16 (Note [fused mma backward]), so the relu layer's backward is two launches,
// as at the MLP's shapes. Captured, never run.
TEST_CASE("cuda linear: a relu layer's backward where outer refuses", "[gpu][gemm]") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dt);
    const TensorOptions o = TensorOptions(dt).device(kCUDA);
    const int64_t rows = dt == DType::f32 ? 256 : 512;
    Tensor x = empty({rows, 3136}, o).requires_grad_(true), w = empty({128, 3136}, o).requires_grad_(true);
    Tensor b = empty({128}, o).requires_grad_(true), g = empty({rows, 128}, o);
    REQUIRE(gemm::outer_refusal({.dtype = dt, .M = 128, .N = 3136, .K = rows, .b_rs = 3136, .b_cs = 1}));
    CHECK(cuda_linear_backward_masks_on_load(g, 3136));
    Tensor y = linear(x, w, b, Activation::relu);
    CHECK(test::kernels_launched_by([&] { y.backward(g); }) == 2);
    for (Tensor* t : {&x, &w, &b}) t->reset_grad();
  }
}

// The fused backward GEMMs where outer refuses, the SIMT GEMM's in f32 (Note [fused simt backward])
// and the tensor cores' in f16 and bf16 (Note [fused mma backward]), against the CPU's reference:
// the mask (a NaN in y masks too) on A read K-major (dx) and M-major (dW), the bias gradient from
// the row-sum blocks, sizes off every tile and vector (odd out_f: scalar loads), split-K (the first
// two shapes) and none (the third); one launch each, the same bits on a second call, and the
// weight op without the mask (act none).
TEST_CASE("cuda linear: the fused backward GEMMs, where outer refuses", "[gpu][gemm]") {
  manual_seed(12);
  const Variant* in_cpu = find_variant(OpId::linear_backward_input, DeviceType::cpu, "cpu");
  const Variant* w_cpu = find_variant(OpId::linear_backward_weight, DeviceType::cpu, "cpu");
  REQUIRE((in_cpu && w_cpu));
  for (auto [name, dt] :
       std::vector<std::pair<const char*, DType>>{{"simt", DType::f32}, {"mma", DType::f16}, {"mma", DType::bf16}}) {
    const Variant* in_v = find_variant(OpId::linear_backward_input, DeviceType::cuda, name);
    const Variant* w_v = find_variant(OpId::linear_backward_weight, DeviceType::cuda, name);
    REQUIRE((in_v && w_v));
    for (auto [rows, in_f, out_f] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1100, 20, 1040}, {1030, 9, 1027}, {200, 1500, 130}})
      for (int64_t act : {1, 0}) {
        INFO(name << " [" << rows << "," << in_f << "] -> " << out_f << " " << dt << (act ? " relu" : ""));
        if (rows > 1024) {  // K > kOuterMaxK in both GEMMs: outer refuses, so this is each op's default
          REQUIRE(gemm::outer_refusal({.dtype = dt, .M = rows, .N = in_f, .K = out_f, .b_rs = in_f, .b_cs = 1}));
          REQUIRE(gemm::outer_refusal({.dtype = dt, .M = out_f, .N = in_f, .K = rows, .b_rs = in_f, .b_cs = 1}));
        }
        Tensor y64 = uniform({rows, out_f}, -1, 1, TensorOptions(DType::f64));
        static_cast<double*>(y64.data_ptr())[3 * out_f + 5] = NAN;  // masks as relu_backward does
        Tensor g = uniform({rows, out_f}, -1, 1).to(dt), y = y64.to(dt);
        Tensor x = uniform({rows, in_f}, -1, 1).to(dt), w = uniform({out_f, in_f}, -1, 1).to(dt);
        const Attrs a = LinearAttrs{act};
        const std::vector<Tensor> dev_dx{g.cuda(), y.cuda(), w.cuda()}, dev_dw{g.cuda(), y.cuda(), x.cuda()};
        const Tensor want_dx = call_variant(*in_cpu, OpId::linear_backward_input, {g, y, w}, a)[0];
        const std::vector<Tensor> want_dw = call_variant(*w_cpu, OpId::linear_backward_weight, {g, y, x}, a);
        const Tensor dx = call_variant(*in_v, OpId::linear_backward_input, dev_dx, a)[0];
        const std::vector<Tensor> dw = call_variant(*w_v, OpId::linear_backward_weight, dev_dw, a);
        // a K-long sum of products of [-1, 1] values: a tolerance for its length (f16, bf16: a
        // rounding or two of the f32 sum apart)
        const Tol tol = dt == DType::f32 ? Tol{1e-4, 2e-3} : dt == DType::f16 ? Tol{2e-3, 2e-3} : Tol{1e-2, 1e-2};
        CHECK(testing::compare(dx.cpu(), want_dx, tol) == "");
        CHECK(testing::compare(dw[0].cpu(), want_dw[0], tol) == "");
        CHECK(testing::compare(dw[1].cpu(), want_dw[1], tol) == "");
        CHECK(test::kernels_launched_by([&] { call_variant(*in_v, OpId::linear_backward_input, dev_dx, a); }) == 1);
        CHECK(test::kernels_launched_by([&] { call_variant(*w_v, OpId::linear_backward_weight, dev_dw, a); }) == 1);
        const std::vector<Tensor> again = call_variant(*w_v, OpId::linear_backward_weight, dev_dw, a);
        for (size_t i = 0; i < 2; ++i) {
          const Tensor p = dw[i].cpu(), q = again[i].cpu();
          CHECK(std::memcmp(p.data_ptr(), q.data_ptr(), p.nbytes()) == 0);
        }
      }
  }
}
#endif

#if EMBER_WITH_CUDA
// mnist_train's MLP on the device: with its two Linear+ReLU pairs fused (Note [fused activations]
// in nn/sequential.h) a step's forward and backward each launch two kernels fewer; as one mlp op
// (Note [fused MLP stacks]) the forward and the backward are one launch each (the input is the
// data: no dx). All three compute what the unfused model does.
TEST_CASE("cuda nn: the MLP's pairs fused save a relu launch each way, the stack runs in 1 + 1", "[gpu][gemm]") {
  manual_seed(3);
  auto make = [] {
    return nn::Sequential(nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                          nn::Linear(64, 10));
  };
  nn::Sequential stack = make(), pairs = make(), plain = make();
  pairs->load_state_dict(stack->state_dict());
  plain->load_state_dict(stack->state_dict());
  pairs->fuse_mlp = false;
  plain->fuse_activations = false;
  for (nn::Sequential* s : {&stack, &pairs, &plain}) (*s)->to(kCUDA);
  Tensor x = uniform({64, 1, 28, 28}, 0, 1, TensorOptions().device(kCUDA));
  Tensor g = uniform({64, 10}, -1, 1, TensorOptions().device(kCUDA));
  struct Launches {
    size_t forward = 0, backward = 0;
  };
  auto run = [&](nn::Sequential& net, std::vector<Tensor>* results) {
    net->zero_grad();
    Tensor y;
    Launches l;
    l.forward = test::kernels_launched_by([&] { y = net(x); });  // captured, never run: run it again
    y = net(x);
    l.backward = test::kernels_launched_by([&] { y.backward(g); });
    net->zero_grad();
    y = net(x);
    y.backward(g);
    results->push_back(y.detach().cpu());
    for (const Tensor& p : net->parameters()) results->push_back(p.grad().cpu());
    return l;
  };
  std::vector<Tensor> a, b, c;
  run(stack, &a);  // warm-up (allocations, the variants' first calls)
  run(pairs, &b);
  run(plain, &c);
  a.clear();
  b.clear();
  c.clear();
  const Launches ls = run(stack, &a), lf = run(pairs, &b), lp = run(plain, &c);
  CHECK(lf.forward + 2 == lp.forward);
  CHECK(lf.backward + 2 == lp.backward);
  CHECK(ls.forward == 1);
  CHECK(ls.backward == 1);
  REQUIRE(a.size() == c.size());
  REQUIRE(b.size() == c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    INFO("result " << i << " (0: y, then the parameters' grads)");
    CHECK(testing::compare(a[i], c[i], gemm_tol(DType::f32)) == "");
    CHECK(testing::compare(b[i], c[i], gemm_tol(DType::f32)) == "");
  }
}
#endif

#if EMBER_WITH_CUDA
// The fused MLP's backward is one launch where the stream has tickets (Note [fused MLP backward
// in one launch], Note [two-phase launch]): the same results bit for bit as its two launches,
// which a capture on a stream without tickets yet still takes, and the tickets back at 0 for the
// next call (a second call that found them dirty would put its tiles' wait or its place wrong).
TEST_CASE("cuda mlp: the fused backward is one launch, bit for bit its two launches", "[gpu][gemm]") {
  manual_seed(17);
  struct Stack {
    Shape x;
    std::vector<int64_t> widths;
    bool input_grad;
  };
  const Variant* fwd = find_variant(OpId::mlp, DeviceType::cuda, "fused");
  const Variant* v = find_variant(OpId::mlp_backward, DeviceType::cuda, "fused");
  REQUIRE(fwd != nullptr);
  REQUIRE(v != nullptr);
  for (DType dt : {DType::f32, DType::f64, DType::bf16})
    for (const Stack& s :
         {Stack{{64, 784}, {128, 64, 10}, false}, Stack{{33, 120}, {128, 7}, true}, Stack{{0, 20}, {16, 3}, true}}) {
      INFO(dt << " x [" << s.x[0] << ", " << s.x[1] << "], " << s.widths.size() << " layers");
      const TensorOptions o = TensorOptions(dt).device(kCUDA);
      const int L = static_cast<int>(s.widths.size());
      MlpAttrs a;
      a.layers = L;
      a.relu_mask = (int64_t{1} << (L - 1)) - 1;  // relu after every layer but the last
      std::vector<Tensor> f{uniform(s.x, -1, 1, o)};
      int64_t k = s.x[1];
      for (int64_t n : s.widths) {
        f.push_back(uniform({n, k}, -0.1, 0.1, o));
        f.push_back(uniform({n}, -0.1, 0.1, o));
        k = n;
      }
      const std::vector<Tensor> y = call_variant(*fwd, OpId::mlp, f, a);
      // g, x, the hidden outputs, y, the weights, no hidden gradients
      std::vector<Tensor> in{uniform(y[0].shape(), -1, 1, o), f[0]};
      for (int l = 1; l < L; ++l) in.push_back(y[static_cast<size_t>(l)]);
      in.push_back(y[0]);
      for (int l = 0; l < L; ++l) in.push_back(f[static_cast<size_t>(1 + 2 * l)]);
      for (int l = 1; l < L; ++l) in.push_back(Tensor());
      a.input_grad = s.input_grad ? 1 : 0;
      const std::vector<Tensor> once = call_variant(*v, OpId::mlp_backward, in, a);
      CHECK(test::kernels_launched_by([&] { call_variant(*v, OpId::mlp_backward, in, a); }) == 1);
      const std::vector<Tensor> again = call_variant(*v, OpId::mlp_backward, in, a);
      // the two launches: on a new stream, which has no tickets yet
      std::vector<Tensor> two;
      for (const Tensor& t : once) two.push_back(empty(t.shape(), o));
      const size_t kernels =
          test::kernels_run_on_a_fresh_stream([&] { call_variant_into(*v, OpId::mlp_backward, in, two, a); });
      CHECK(kernels == (s.x[0] > 0 ? 2u : 1u));  // with no rows only the weight tiles (zeros)
      REQUIRE(two.size() == once.size());
      for (size_t i = 0; i < once.size(); ++i) {
        INFO("output " << i << " (0: dx, then dW and db per layer)");
        const Tensor want = once[i].cpu();
        CHECK(std::memcmp(again[i].cpu().data_ptr(), want.data_ptr(), want.nbytes()) == 0);
        CHECK(std::memcmp(two[i].cpu().data_ptr(), want.data_ptr(), want.nbytes()) == 0);
      }
    }
}
#endif

#if EMBER_WITH_CUDA
// Each of the outer-product kernel's shapes (Note [outer-product GEMM], Note [outer K split]):
// 4 or 16 rows a thread, K walked whole or in 4 runs (2 for f64 at 16 rows), on the fused weight
// and bias gradients against the CPU's. 16 rows where 4 would re-read B past the bound (the 784-wide
// layer at batch 512; the 3136-wide one at batch 64), the split where the grid is smaller than
// the GPU and K long (batch 512).
TEST_CASE("cuda linear: the weight gradient's outer product at 4 and 16 rows, whole and split", "[gpu][gemm]") {
  const Variant* outer = find_variant(OpId::linear_backward_weight, DeviceType::cuda, "outer");
  const Variant* cpu = find_variant(OpId::linear_backward_weight, DeviceType::cpu, "cpu");
  REQUIRE(outer != nullptr);
  REQUIRE(cpu != nullptr);
  manual_seed(11);
  struct Case {
    DType dt;
    int64_t rows, in_f, out_f;
    int r, splits;
  };
  for (const Case& c : std::vector<Case>{{DType::f32, 512, 784, 48, 16, 4},
                                         {DType::bf16, 512, 784, 96, 16, 4},
                                         {DType::f64, 512, 784, 24, 16, 2},
                                         {DType::f32, 64, 3136, 96, 16, 1},
                                         {DType::f32, 512, 128, 64, 4, 4},
                                         {DType::bf16, 300, 130, 10, 4, 4}}) {
    INFO("[" << c.rows << "," << c.in_f << "] -> " << c.out_f << " relu " << c.dt);
    // dW [out, in] = dz^T [out, rows] x [rows, in]
    const gemm::Problem p{.dtype = c.dt, .M = c.out_f, .N = c.in_f, .K = c.rows, .b_rs = c.in_f, .b_cs = 1};
    REQUIRE(gemm::outer_rows(p) == c.r);
    REQUIRE(gemm::outer_splits(p) == c.splits);
    Tensor g = uniform({c.rows, c.out_f}, -1, 1).to(c.dt), y = uniform({c.rows, c.out_f}, -1, 1).to(c.dt);
    Tensor x = uniform({c.rows, c.in_f}, -1, 1).to(c.dt);
    const Attrs relu = LinearAttrs{static_cast<int64_t>(Activation::relu)};
    std::vector<Tensor> want = call_variant(*cpu, OpId::linear_backward_weight, {g, y, x}, relu);
    std::vector<Tensor> in{g.cuda(), y.cuda(), x.cuda()};
    std::vector<Tensor> probe_out{empty({0}, TensorOptions(c.dt).device(kCUDA))};
    REQUIRE(outer->accepts(KernelCall{OpId::linear_backward_weight, in, probe_out, relu}));
    std::vector<Tensor> got = call_variant(*outer, OpId::linear_backward_weight, in, relu);
    CHECK(testing::compare(got[0].cpu(), want[0], gemm_tol(c.dt)) == "");
    CHECK(testing::compare(got[1].cpu(), want[1], gemm_tol(c.dt)) == "");
  }
  // the plain product (matmul's outer variant), split: the kernel without the mask and row sums
  const Variant* mm = find_variant(OpId::matmul, DeviceType::cuda, "outer");
  const Variant* mm_cpu = find_variant(OpId::matmul, DeviceType::cpu, "cpu");
  REQUIRE(mm != nullptr);
  REQUIRE(mm_cpu != nullptr);
  Tensor a = uniform({10, 300}, -1, 1), b = uniform({300, 130}, -1, 1);
  REQUIRE(gemm::outer_splits({.dtype = DType::f32, .M = 10, .N = 130, .K = 300, .b_rs = 130, .b_cs = 1}) == 4);
  Tensor got = call_variant(*mm, OpId::matmul, {a.cuda(), b.cuda()})[0];
  CHECK(testing::compare(got.cpu(), call_variant(*mm_cpu, OpId::matmul, {a, b})[0], gemm_tol(DType::f32)) == "");
}
#endif

#if EMBER_WITH_CUDA
// The Hopper GEMM (Note [warp-specialised GEMM]): a persistent grid of 1 to 3 blocks walks 9 or 6
// tiles, so the ring's stages and parities run on across tiles (6 k tiles each over 4 stages);
// ragged M, N and K land as TMA's zeros; both tiles, both dtypes, bias and gelu; every operand
// layout; both epilogues (Note [TMA-store epilogue]: stores that clip at M and N, leave a padded
// row's tail alone and reuse a warp's buffer across tiles and column halves; or the registers'
// stores, where C's pitch is not a multiple of 8). And what it refuses, with the reason, so the
// caller takes the next variant.
TEST_CASE("cuda gemm wgmma: persistent blocks over ragged tiles, every layout, clusters, and what it refuses",
          "[gpu][gemm][wgmma]") {
  const int dev = 0;
  if (!gemm::wgmma_supported(dev)) {
    WARN("skipped: the Hopper GEMM needs a GPU of compute capability 9.0");
    return;
  }
  manual_seed(11);
  const Variant* ref = find_variant(OpId::linear, DeviceType::cpu, "cpu");
  REQUIRE(ref != nullptr);
  const int64_t rows = 300, in_f = 328, out_f = 300;  // 3 x 3 tiles of 128 x 128, 6 k tiles of 64
  for (DType dt : {DType::f16, DType::bf16})
    // (clusters of 2, Note [multicast GEMM]: 3 tile rows, so the second pair's lower tile lies below M)
    for (auto [bn, blocks, cluster] :
         std::vector<std::tuple<int, int, int>>{{128, 1, 1}, {128, 3, 1}, {256, 2, 1}, {128, 2, 2}, {256, 4, 2}}) {
      Tensor x = uniform({rows, in_f}, -1, 1).to(dt), w = uniform({out_f, in_f}, -0.1, 0.1).to(dt);
      Tensor bias = uniform({out_f}, -1, 1).to(dt);
      const int act = 2;  // gelu
      Tensor want = call_variant(*ref, OpId::linear, {x, w, bias}, LinearAttrs{act})[0];
      Tensor xc = x.cuda(), wc = w.cuda(), bc = bias.cuda();
      // one block stores a contiguous y (pitch 300: from the registers); the others rows of 304
      // whose last 4 hold 7 (by TMA, which must stop at column 300)
      const bool tma = blocks > 1;
      const int64_t pitch = tma ? 304 : out_f;
      Tensor y = full({rows, pitch}, 7.0, TensorOptions(dt).device(kCUDA));
      gemm::Prepared pr =
          gemm::prepare_linear(xc, wc, bc, y.narrow(1, 0, out_f).contiguous(), act, gemm::Layout::unit_stride);
      pr.p.c = y.data_ptr();
      pr.p.c_rs = pitch;
      REQUIRE(gemm::wgmma_refusal(pr.p) == "");
      REQUIRE(gemm::wgmma_tma_store_ok(pr.p) == tma);
      gemm::run_wgmma(pr.p, {.bn = bn, .max_blocks = blocks, .cluster = cluster});
      INFO(dt << ", tile 128 x " << bn << ", " << blocks << " blocks in clusters of " << cluster << ", "
              << (tma ? "TMA stores" : "direct stores"));
      const Tensor got = y.to(kCPU);
      CHECK(testing::compare(got.narrow(1, 0, out_f).contiguous(), want, gemm_tol(dt)) == "");
      if (tma)
        CHECK(testing::compare(got.narrow(1, out_f, 4).contiguous(), full({rows, 4}, 7.0, TensorOptions(dt)),
                               Tol{0, 0}) == "");
    }
  // every layout: A row-major or transposed, B row-major or transposed (the TMA boxes and the
  // wgmma transpose bits of K-major and MN-major operands), 2 x 3 or 2 x 2 ragged tiles, 4 k tiles
  const Variant* mm = find_variant(OpId::matmul, DeviceType::cpu, "cpu");
  REQUIRE(mm != nullptr);
  const int64_t M = 136, K = 200, N = 264;
  int layouts = 0;
  for (bool at : {false, true})
    for (bool bt : {false, true}) {
      const DType dt = (at == bt) ? DType::bf16 : DType::f16;
      Tensor a = at ? uniform({K, M}, -1, 1).to(dt).t() : uniform({M, K}, -1, 1).to(dt);
      Tensor b = bt ? uniform({N, K}, -1, 1).to(dt).t() : uniform({K, N}, -1, 1).to(dt);
      Tensor want = call_variant(*mm, OpId::matmul, {a, b})[0];
      Tensor ac = testing::to_device_same_layout(a, kCUDA), bc = testing::to_device_same_layout(b, kCUDA);
      // (and in a cluster of 2 sharing B: its half of a K-major B's rows, or of an MN-major B's boxes)
      for (auto [bn, blocks, cluster] :
           std::vector<std::tuple<int, int, int>>{{128, 2, 1}, {256, 1, 1}, {at == bt ? 128 : 256, 2, 2}}) {
        Tensor c = empty({M, N}, TensorOptions(dt).device(kCUDA));
        gemm::Prepared pr = gemm::prepare_matmul(ac, bc, c, gemm::Layout::unit_stride);
        REQUIRE(pr.p.a_kmajor() == !at);
        REQUIRE(pr.p.b_kmajor() == bt);
        REQUIRE(gemm::wgmma_refusal(pr.p) == "");
        REQUIRE(gemm::wgmma_tma_store_ok(pr.p));
        // the registers' stores where asked, once per tile width
        const auto epilogue = at && !bt ? gemm::WgmmaEpilogue::direct : gemm::WgmmaEpilogue::tma_store;
        gemm::run_wgmma(pr.p, {.bn = bn, .max_blocks = blocks, .epilogue = epilogue, .cluster = cluster});
        INFO(dt << (at ? " A^T" : " A") << (bt ? " x B^T" : " x B") << ", tile 128 x " << bn << ", clusters of "
                << cluster << (epilogue == gemm::WgmmaEpilogue::direct ? ", direct stores" : ", TMA stores"));
        CHECK(testing::compare(c.to(kCPU), want, gemm_tol(dt)) == "");
        ++layouts;
      }
    }
  CHECK(layouts == 12);
  // TF32 (Note [TF32 through wgmma]): f32 is refused unless asked for; asked, linear's x W^T with
  // bias and gelu over the ragged tiles, both epilogues (TMA: 300 f32 are 1200 bytes, a multiple of
  // 16), against the f32 reference within TF32's rounding (10 mantissa bits, 328 terms)
  {
    Tensor x = uniform({rows, in_f}, -1, 1), w = uniform({out_f, in_f}, -0.1, 0.1), bias = uniform({out_f}, -1, 1);
    Tensor want = call_variant(*ref, OpId::linear, {x, w, bias}, LinearAttrs{2})[0];
    Tensor xc = x.cuda(), wc = w.cuda(), bc = bias.cuda();
    Tensor y = empty({rows, out_f}, TensorOptions(DType::f32).device(kCUDA));
    gemm::Prepared pr = gemm::prepare_linear(xc, wc, bc, y, 2, gemm::Layout::unit_stride);
    CHECK(gemm::wgmma_refusal(pr.p) == "f32 is exact by default (wgmma reads it as TF32 only when asked)");
    REQUIRE(gemm::wgmma_refusal(pr.p, true) == "");
    REQUIRE(gemm::wgmma_tma_store_ok(pr.p));
    using E = gemm::WgmmaEpilogue;
    for (auto [bn, blocks, epilogue] :
         std::vector<std::tuple<int, int, E>>{{128, 2, E::tma_store}, {256, 1, E::tma_store}, {128, 3, E::direct}}) {
      y.zero_();
      gemm::run_wgmma(pr.p, {.bn = bn, .max_blocks = blocks, .epilogue = epilogue, .tf32 = true});
      INFO("tf32, tile 128 x " << bn << (epilogue == E::direct ? ", direct stores" : ", TMA stores"));
      CHECK(testing::compare(y.to(kCPU), want, Tol{2e-3, 2e-3}) == "");
    }
    // tf32 has no transposed operands: matmul's row-major B (MN-major) is refused
    Tensor a = uniform({M, K}, -1, 1).cuda(), b = uniform({K, N}, -1, 1).cuda(),
           c = empty({M, N}, TensorOptions(DType::f32).device(kCUDA));
    CHECK(gemm::wgmma_refusal(gemm::prepare_matmul(a, b, c, gemm::Layout::unit_stride).p, true) ==
          "TF32 reads both operands K-major only (A row-major, B transposed)");
  }
  // refused: a row pitch that is not a multiple of 8 elements, a batch, an unaligned base
  const TensorOptions o = TensorOptions(DType::bf16).device(kCUDA);
  Tensor x = zeros({4, 12}, o), w = zeros({8, 12}, o), y = empty({4, 8}, o);
  CHECK(gemm::wgmma_refusal(gemm::prepare_linear(x, w, Tensor(), y, 0, gemm::Layout::unit_stride).p) ==
        "an operand's row pitch is not a multiple of 8 elements");
  Tensor wide = zeros({8, 36}, o), w32 = zeros({8, 32}, o), y8 = empty({8, 8}, o);
  CHECK(gemm::wgmma_refusal(gemm::prepare_matmul(wide.narrow(1, 0, 32), w32.t(), y8, gemm::Layout::unit_stride).p) ==
        "an operand's row pitch is not a multiple of 8 elements");
  Tensor a3 = zeros({2, 16, 32}, o), b3 = zeros({2, 32, 16}, o), c3 = empty({2, 16, 16}, o);
  CHECK(gemm::wgmma_refusal(gemm::prepare_matmul(a3, b3, c3, gemm::Layout::unit_stride).p) ==
        "batched (one matrix product only)");
  Tensor big = zeros({1, 40}, o), wk = zeros({8, 32}, o), y1 = empty({1, 8}, o);
  Tensor off = big.narrow(1, 1, 32);  // 2 bytes past a 16-byte boundary
  CHECK(gemm::wgmma_refusal(gemm::prepare_linear(off, wk, Tensor(), y1, 0, gemm::Layout::unit_stride).p) ==
        "an operand's base is not 16-byte aligned");
}
#endif

// A thread whose first cuBLAS, cuBLASLt or cuDNN call is inside a graph capture: the library handle
// is created then, and creating one allocates device memory, which a capture refuses (Note
// [vendor handles in a capture] in kernels/gemm/gemm_vendor.cu). The capture must still succeed
// and its replay compute the result.
TEST_CASE("vendor variants: a thread's first call to the library inside a graph capture", "[gpu][gemm][graph]") {
  manual_seed(8);
  const Tensor a_cpu = uniform({48, 40}, -1, 1), b_cpu = uniform({40, 24}, -1, 1);
  const Tensor want = matmul(a_cpu, b_cpu), want_softmax = softmax(a_cpu, 1);
  const Tensor a = a_cpu.cuda(), b = b_cpu.cuda();
  cuda::device_synchronize(0);
  std::vector<std::string> backends{"cublas", "cublaslt"};
#if EMBER_WITH_CUDNN
  backends.push_back("cudnn");  // softmax's cuDNN variant
#endif
  for (const std::string& backend : backends) {
    INFO("backend " << backend);
    const bool dnn = backend == "cudnn";
    const OpId op = dnn ? OpId::softmax : OpId::matmul;
    set_backend(op, backend);
    std::string error;
    Tensor got;
    // a new thread: no handle of its own yet, and none in the pool for it to take if every earlier
    // thread's handles are in use (this thread's creation is what is under test either way)
    std::thread t([&] {
      try {
        cuda::Stream st = cuda::Stream::create(0);
        st.wait_stream(cuda::current_stream(0));
        cuda::StreamGuard guard(st);
        cuda::Graph graph;
        graph.capture_begin(st);
        Tensor y = dnn ? softmax(a, 1) : matmul(a, b);
        graph.capture_end();
        graph.replay();
        st.synchronize();
        got = y.cpu();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    t.join();
    set_backend(op, "default");
    CHECK(error == "");
    if (error.empty()) CHECK(testing::compare(got, dnn ? want_softmax : want, {1e-5, 1e-4}) == "");
  }
}
