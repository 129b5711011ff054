// The simulator's efficiency counters (sim/counters.h) over ember's own CUDA kernels:
// every CUDA variant of the main ops, run through the registry on a mid-size shape, one line per
// kernel launch with its global sector efficiency, shared bank-conflict factor, requests and bytes.
// Hidden ([.]): it is a report, run by hand (docs/simulator.md, "Efficiency counters"):
//   ember_gpu_tests "[kernel-counters]"
// It fails when a variant that accepted its call recorded no launch or no global traffic.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "sim/counters.h"
#include "core/tensor.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/optim.h"
#include "kernels/ops/pool.h"
#include "kernels/ops/reduce.h"
#include "kernels/ops/softmax.h"
#include "kernels/registry.h"
#include "tests/op_samples/sample_inputs.h"

using namespace ember;

namespace {

Device cuda0() { return Device(DeviceType::cuda, 0); }
Tensor rnd(const Shape& s, DType dt = DType::f32) { return uniform(s, -1, 1, TensorOptions(dt).device(cuda0())); }

struct Case {
  std::string op, name;
  std::function<std::vector<Tensor>()> make;
  Attrs attrs;
};

double ratio(uint64_t a, uint64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }

// The optimizer steps' inputs (kernels/ops/optim.h): hyper, found_inf, inv_scale, ticket, then `lists`
// lists of n tensors, list `step_list` the f32 step counters.
std::vector<Tensor> optim_lists(int lists, int step_list, std::vector<double> hyper, int n) {
  std::vector<Tensor> in{tensor(hyper, DType::f64).to(cuda0()), Tensor(), Tensor(),
                         zeros({1}, TensorOptions(DType::i32).device(cuda0())), Tensor()};
  const int64_t sizes[3] = {100003, 20003, 64};
  for (int l = 0; l < lists; ++l)
    for (int i = 0; i < n; ++i) {
      if (l == step_list) in.push_back(zeros({}, TensorOptions(DType::f32).device(cuda0())));
      else in.push_back(uniform({sizes[i % 3]}, 0, 0.1, TensorOptions(DType::f32).device(cuda0())));
    }
  return in;
}

std::vector<Case> cases() {
  const Shape m{int64_t{1} << 20};
  std::vector<Case> v;
  v.push_back({"add", "2^20 f32", [m] { return std::vector<Tensor>{rnd(m), rnd(m)}; }, {}});
  v.push_back({"mul", "2^20 f32", [m] { return std::vector<Tensor>{rnd(m), rnd(m)}; }, {}});
  v.push_back({"add",
               "[1024,1024] + [1024] f32",
               [] {
                 return std::vector<Tensor>{rnd({1024, 1024}), rnd({1024})};
               },
               {}});
  v.push_back({"add", "2^20 bf16", [m] { return std::vector<Tensor>{rnd(m, DType::bf16), rnd(m, DType::bf16)}; }, {}});
  v.push_back({"relu", "2^20 f32", [m] { return std::vector<Tensor>{rnd(m)}; }, {}});
  v.push_back({"sum", "[2^20] all f32", [m] { return std::vector<Tensor>{rnd(m)}; }, ReduceAttrs{1, 0, 1}});
  v.push_back({"sum", "[1024,1000] dim 1 f32",
               [] {
                 return std::vector<Tensor>{rnd({1024, 1000})};
               },
               ReduceAttrs{2, 0, 1}});
  v.push_back({"sum", "[1024,1000] dim 0 f32",
               [] {
                 return std::vector<Tensor>{rnd({1024, 1000})};
               },
               ReduceAttrs{1, 0, 1}});
  v.push_back({"softmax", "[1024,1000] f32", [] { return std::vector<Tensor>{rnd({1024, 1000})}; }, SoftmaxAttrs{1}});
  v.push_back({"cross_entropy", "[1024,1000] f32",
               [] {
                 return std::vector<Tensor>{rnd({1024, 1000}), samples::randint({1024}, 1000, 7).to(cuda0()), Tensor()};
               },
               LossAttrs{Reduction::mean, -100, 0}});
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string d = dt == DType::f32 ? "f32" : "bf16";
    v.push_back({"matmul",
                 "[256,256] x [256,256] " + d,
                 [dt] {
                   return std::vector<Tensor>{rnd({256, 256}, dt), rnd({256, 256}, dt)};
                 },
                 {}});
    v.push_back({"linear", "[256,256] -> 256 " + d,
                 [dt] {
                   return std::vector<Tensor>{rnd({256, 256}, dt), rnd({256, 256}, dt), rnd({256}, dt)};
                 },
                 LinearAttrs{0}});
  }
  const Conv2dAttrs conv{Conv2dFuncOptions().set_padding(1)};
  v.push_back({"conv2d", "mnist conv2 32->64 3x3 14x14 n8 f32",
               [] {
                 return std::vector<Tensor>{rnd({8, 32, 14, 14}), rnd({64, 32, 3, 3}), rnd({64})};
               },
               conv});
  v.push_back({"conv2d", "64->64 3x3 28x28 n2 bf16 channels-last",
               [] {
                 return std::vector<Tensor>{contiguous_as(rnd({2, 64, 28, 28}, DType::bf16), true),
                                            contiguous_as(rnd({64, 64, 3, 3}, DType::bf16), true),
                                            rnd({64}, DType::bf16)};
               },
               conv});
  PoolAttrs pool{};
  pool.kernel[0] = pool.kernel[1] = 2;
  pool.stride[0] = pool.stride[1] = 2;
  v.push_back({"max_pool2d", "[16,32,28,28] 2x2 s2 f32",
               [] {
                 return std::vector<Tensor>{rnd({16, 32, 28, 28})};
               },
               pool});
  v.push_back({"batch_norm", "[16,32,28,28] f32 training",
               [] {
                 TensorOptions o = TensorOptions(DType::f32).device(cuda0());
                 return std::vector<Tensor>{rnd({16, 32, 28, 28}), ones({32}, o), zeros({32}, o), zeros({32}, o),
                                            ones({32}, o)};
               },
               BatchNormAttrs{}});
  v.push_back({"sgd_step", "6 tensors momentum",
               [] { return optim_lists(4, 3, SgdHyper{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}.values(), 6); },
               SgdStepAttrs{6, 1, 0, 0}});
  v.push_back({"adam_step", "6 tensors AdamW",
               [] {
                 return optim_lists(5, 4, {1e-3, 0.9, 0.999, 1e-8, 0.01}, 6);
               },
               AdamStepAttrs{6, 0, 1, 0}});
  return v;
}

}  // namespace

TEST_CASE("sim counters: ember's CUDA kernels (report)", "[.][kernel-counters]") {
  std::printf("%-14s %-40s %-16s %-52s %12s %7s %7s %7s %7s %9s %6s %6s %8s %9s %9s %6s\n", "op", "case", "variant",
              "kernel", "grid x block", "ld req", "ld eff", "st req", "st eff", "sh req", "sh ld", "sh st", "atomics",
              "MB read", "MB write", "part%");
  for (const Case& c : cases()) {
    const OpInfo* info = find_op(c.op);
    REQUIRE(info != nullptr);
    for (const Variant& v : info->variants) {
      if (v.device != DeviceType::cuda) continue;
      std::vector<Tensor> in = c.make();
      // once with the counters off and once on, each timed (what counting costs)
      using clock = std::chrono::steady_clock;
      double ms[2] = {0, 0};
      bool ran = true;
      sim::take_counters();
      for (int on = 0; on < 2 && ran; ++on) {
        sim::set_counters_enabled(on == 1);
        const auto t0 = clock::now();
        try {
          call_variant(v, info->id, in, c.attrs);
          sim::take_counters();  // waits for the streams
        } catch (const std::exception& e) {
          ran = false;  // the variant does not take this call (dtype, shape)
        }
        ms[on] = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      }
      sim::set_counters_enabled(false);
      if (!ran) continue;
      // the timed runs above were taken; a third run gives the record
      sim::set_counters_enabled(true);
      call_variant(v, info->id, in, c.attrs);
      sim::set_counters_enabled(false);
      const std::vector<sim::LaunchCounters> all = sim::take_counters();
      std::printf("%-14s %-40s %-16s (counters off: %.0f ms, on: %.0f ms)\n", c.op.c_str(), c.name.c_str(),
                  v.name.c_str(), ms[0], ms[1]);
      CAPTURE(c.op, c.name, v.name);
      CHECK(!all.empty());
      uint64_t global_bytes = 0;
      for (const sim::LaunchCounters& k : all) {
        global_bytes += k.global_load.bytes + k.global_store.bytes;
        const uint64_t reqs =
            k.global_load.requests + k.global_store.requests + k.shared_load.requests + k.shared_store.requests;
        char gb[32];
        std::snprintf(gb, sizeof gb, "%ux%ux%u x %u", k.grid[0], k.grid[1], k.grid[2],
                      k.block[0] * k.block[1] * k.block[2]);
        std::string kn = k.kernel.size() > 52 ? k.kernel.substr(0, 49) + "..." : k.kernel;
        std::printf("%-14s %-40s %-16s %-52s %12s %7llu %7.3f %7llu %7.3f %9llu %6.2f %6.2f %8llu %9.2f %9.2f %6.1f\n",
                    c.op.c_str(), c.name.c_str(), v.name.c_str(), kn.c_str(), gb,
                    static_cast<unsigned long long>(k.global_load.requests),
                    ratio(k.global_load.ideal_sectors, k.global_load.sectors),
                    static_cast<unsigned long long>(k.global_store.requests),
                    ratio(k.global_store.ideal_sectors, k.global_store.sectors),
                    static_cast<unsigned long long>(k.shared_load.requests + k.shared_store.requests),
                    ratio(k.shared_load.wavefronts, k.shared_load.ideal_wavefronts),
                    ratio(k.shared_store.wavefronts, k.shared_store.ideal_wavefronts),
                    static_cast<unsigned long long>(k.atomics), static_cast<double>(k.global_load.bytes) / 1e6,
                    static_cast<double>(k.global_store.bytes) / 1e6, 100.0 * ratio(k.partial_requests, reqs));
      }
      CHECK(global_bytes > 0);
    }
  }
}
