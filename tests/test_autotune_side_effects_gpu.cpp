// Autotune never changes results on CUDA: timing the variants of a new key runs them
// on copies of every tensor the op writes (batch_norm's running statistics, optimizer state, the
// AMP scale), and a free that fails after an earlier CUDA error never ends the process from a
// destructor (Note [no throwing destructors] in core/storage.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#if EMBER_WITH_CUDA  // raw runtime calls below; a CPU-only build has no toolkit headers
#include <cuda_runtime_api.h>
#endif

#include "autotune_side_effects_util.h"
#include "core/cuda/runtime.h"
#include "core/storage.h"
#include "op_driver.h"

using namespace ember;

namespace {}  // namespace

TEST_CASE("autotune: timing CUDA variants never writes the tensors of the call (every op with samples)",
          "[gpu][autotune]") {
  test::TunerReset reset;
  const Device dev(DeviceType::cuda, 0);
  int checked = 0;
  for (const OpInfo& info : all_ops()) {
    if (info.view != nullptr || op_samples(info.id) == nullptr || info.infer == nullptr) continue;
    // Which tensors a variant writes does not depend on the shape: each variant is tuned in the
    // first sample that it accepts, and a sample whose variants were all tuned already is skipped
    // (every sample of every op took 6.5 minutes of CI's simulator stage under ASan).
    std::set<std::string> tuned;
    for (OpSample& s : op_samples(info.id)()) {
      std::vector<Tensor> in;
      for (const Tensor& t : ember::testing::inputs_as(s, DType::f32))
        in.push_back(t.defined() ? ember::testing::to_device_same_layout(t, dev) : t);
      std::unique_ptr<test::RunnerCall> rc;
      try {
        rc = std::make_unique<test::RunnerCall>(info, in, s.attrs, dev);
      } catch (const std::exception&) {
        continue;
      }
      std::vector<const Variant*> cands;
      for (const Variant& v : info.variants)
        if (v.device == DeviceType::cuda && !(v.flags & kReference) && v.accepts(rc->call(info.id)))
          cands.push_back(&v);
      if (cands.empty() ||
          std::all_of(cands.begin(), cands.end(), [&](const Variant* v) { return tuned.count(v->name) > 0; }))
        continue;
      for (const Variant* v : cands) tuned.insert(v->name);
      Variant twin = *cands[0];  // one variant (no cuDNN, e.g. the simulator): time it twice
      twin.name = "twin";
      if (cands.size() == 1) cands.push_back(&twin);
      INFO(info.name << ": " << s.name);
      CHECK(test::tuning_changed_inputs(info, *rc, cands).empty());
      ++checked;
    }
  }
  CHECK(checked > 0);
}

// With cuDNN batch_norm has two CUDA variants ("cuda", "cudnn"): the case the issue found.
TEST_CASE("autotune: CUDA batch_norm with backend auto keeps the running statistics of one call", "[gpu][autotune]") {
  test::TunerReset reset;
  const TensorOptions o = TensorOptions(DType::f32).device(Device(DeviceType::cuda, 0));
  Tensor x = uniform({8, 4, 6, 6}, 2, 6, o);
  Tensor w = ones({4}, o), b = zeros({4}, o);
  auto run = [&](const std::string& backend) {
    set_backend_all(backend);
    autotune::clear();
    Tensor rm = zeros({4}, o), rv = ones({4}, o);
    Tensor y = batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    set_backend_all("default");
    return std::vector<Tensor>{y.cpu(), rm.cpu(), rv.cpu()};
  };
  std::vector<Tensor> want = run("default"), got = run("auto");
  // variants may differ in summation order: close, not bitwise (15 extra momentum updates are far off)
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("result " << i << " (y, running_mean, running_var)");
    CHECK(ember::testing::compare(got[i], want[i], Tol{1e-4, 1e-5}).empty());
  }
}

#if EMBER_WITH_CUDA  // raw CUDA runtime calls (a CPU-only build skips every GPU test anyway)
TEST_CASE("storage: a free that fails after a CUDA error does not terminate the process", "[gpu][allocator]") {
  // A block used on a side stream is freed by recording an event there; with the side stream in an
  // invalidated capture that record fails. The error must not escape ~Storage (std::terminate).
  cuda::Stream side = cuda::Stream::create(0);
  auto h = static_cast<cudaStream_t>(side.handle());
  Tensor victim = zeros({1024}, TensorOptions(DType::f32).device(Device(DeviceType::cuda, 0)));
  cuda::current_stream(0).synchronize();
  cuda::record_stream(victim.data_ptr(), side);
  REQUIRE(cudaStreamBeginCapture(h, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaStreamQuery(h) != cudaSuccess);  // not allowed while capturing: invalidates the capture
  cudaGetLastError();
  const uint64_t before = failed_frees();
  victim = Tensor();  // the free: caught and reported once, never thrown
  CHECK(failed_frees() == before + 1);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(h, &g) != cudaSuccess);
  if (g != nullptr) cudaGraphDestroy(g);
  cudaGetLastError();
  // the process goes on: the allocator still works
  Tensor after = ones({16}, TensorOptions(DType::f32).device(Device(DeviceType::cuda, 0)));
  CHECK(sum(after).item() == 16.0);
}
#endif
