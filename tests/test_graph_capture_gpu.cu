// CUDA graph stream capture through the runtime API, rule by rule as the CUDA programming guide
// states them: what is captured as nodes and replayed, what is illegal during a capture (and
// invalidates it), the three capture modes, fork and join through events, captured events. On a GPU
// this checks the driver; in the simulator build it checks that the simulator follows the same
// rules, so code that captures cleanly there captures on a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>
#include <vector>

#include "core/cuda/kernel.cuh"

namespace {

__global__ void add_one(int* p, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] += 1;
}

__global__ void times_two(int* p, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] *= 2;
}

constexpr int kN = 64;

struct Buffers {
  int* dev = nullptr;
  int* host = nullptr;  // pinned
  Buffers() {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&dev), kN * sizeof(int)) == cudaSuccess);
    REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&host), kN * sizeof(int), cudaHostAllocDefault) == cudaSuccess);
  }
  ~Buffers() {
    cudaFree(dev);
    cudaFreeHost(host);
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
};

cudaStreamCaptureStatus status(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  REQUIRE(cudaStreamIsCapturing(s, &st) == cudaSuccess);
  return st;
}

// Ends a capture that is expected to have been invalidated; returns what EndCapture returned.
cudaError_t end_invalid(cudaStream_t s) {
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(s, &g);
  CHECK(g == nullptr);
  if (g != nullptr) cudaGraphDestroy(g);
  cudaGetLastError();
  return e;
}

// Ends a capture that is expected to succeed.
void end_ok(cudaStream_t s) {
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
  CHECK(g != nullptr);
  if (g != nullptr) cudaGraphDestroy(g);
}

// Ends a capture that must succeed and returns its graph (the caller destroys it).
cudaGraph_t end_capture(cudaStream_t s) {
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  return g;
}

size_t node_count(cudaGraph_t g) {
  size_t n = 0;
  REQUIRE(cudaGraphGetNodes(g, nullptr, &n) == cudaSuccess);
  return n;
}

cudaGraphExec_t instantiate(cudaGraph_t g) {
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
  return exec;
}

void launch_add_one(cudaStream_t s, int* p) { ember::cuda::launch(add_one, 1, kN, 0, s, p, kN); }

// An event that marks eager work (a kernel on `s`), not a point of any capture.
cudaEvent_t record_outside(cudaStream_t s, int* p) {
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  launch_add_one(s, p);
  REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
  return e;
}

}  // namespace

TEST_CASE("graph capture: kernels, copies and memsets become nodes, replays run them again", "[gpu][graph]") {
  Buffers b;
  Stream st;
  std::vector<int> out(kN);
  int* pinned_out = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned_out), kN * sizeof(int), cudaHostAllocDefault) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(status(st.s) == cudaStreamCaptureStatusActive);
  REQUIRE(cudaMemsetAsync(b.dev, 0, kN * sizeof(int), st.s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b.dev, b.host, kN * sizeof(int), cudaMemcpyHostToDevice, st.s) == cudaSuccess);
  launch_add_one(st.s, b.dev);
  REQUIRE(cudaMemcpyAsync(pinned_out, b.dev, kN * sizeof(int), cudaMemcpyDeviceToHost, st.s) == cudaSuccess);
  cudaGraph_t g = end_capture(st.s);
  CHECK(status(st.s) == cudaStreamCaptureStatusNone);
  size_t n = node_count(g);
  REQUIRE(n == 4);
  std::vector<cudaGraphNode_t> nodes(n);
  REQUIRE(cudaGraphGetNodes(g, nodes.data(), &n) == cudaSuccess);
  std::vector<cudaGraphNodeType> types;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    REQUIRE(cudaGraphNodeGetType(node, &t) == cudaSuccess);
    types.push_back(t);
  }
  std::sort(types.begin(), types.end());
  std::vector<cudaGraphNodeType> want{cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemcpy, cudaGraphNodeTypeMemset,
                                      cudaGraphNodeTypeMemcpy};
  std::sort(want.begin(), want.end());
  CHECK(types == want);
  cudaGraphExec_t exec = instantiate(g);
  for (int replay = 0; replay < 3; ++replay) {
    for (int i = 0; i < kN; ++i) b.host[i] = 100 * replay + i;  // the copy reads the pinned buffer anew
    REQUIRE(cudaGraphLaunch(exec, st.s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
    for (int i = 0; i < kN; ++i) CHECK(pinned_out[i] == 100 * replay + i + 1);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaFreeHost(pinned_out);
}

TEST_CASE("graph capture: synchronising or querying the capturing stream invalidates the capture", "[gpu][graph]") {
  Buffers b;
  Stream st;
  for (bool query : {false, true}) {
    INFO((query ? "cudaStreamQuery" : "cudaStreamSynchronize"));
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    launch_add_one(st.s, b.dev);
    CHECK((query ? cudaStreamQuery(st.s) : cudaStreamSynchronize(st.s)) == cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    CHECK(status(st.s) == cudaStreamCaptureStatusInvalidated);
    CHECK(end_invalid(st.s) == cudaErrorStreamCaptureInvalidated);
    CHECK(status(st.s) == cudaStreamCaptureStatusNone);
  }
  CHECK(cudaStreamSynchronize(st.s) == cudaSuccess);  // usable again
}

TEST_CASE("graph capture modes: potentially unsafe calls such as cudaMalloc", "[gpu][graph]") {
  Stream st;
  Buffers b;
  void* p = nullptr;
  SECTION("thread-local mode: refused on the capturing thread") {
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(cudaMalloc(&p, 256) == cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    CHECK(end_invalid(st.s) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("thread-local mode: the thread may relax its own mode") {
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    CHECK(cudaMalloc(&p, 256) == cudaSuccess);
    REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    CHECK(mode == cudaStreamCaptureModeRelaxed);
    launch_add_one(st.s, b.dev);
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamEndCapture(st.s, &g) == cudaSuccess);
    CHECK(g != nullptr);
    if (g != nullptr) cudaGraphDestroy(g);
    CHECK(cudaFree(p) == cudaSuccess);
  }
  SECTION("thread-local mode: other threads are not affected") {
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    cudaError_t other = cudaErrorUnknown;
    std::thread([&] {
      other = cudaMalloc(&p, 256);
      if (other == cudaSuccess) other = cudaFree(p);
    }).join();
    CHECK(other == cudaSuccess);
    launch_add_one(st.s, b.dev);
    end_ok(st.s);
  }
  SECTION("global mode: another thread's unsafe call breaks the capture") {
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    cudaError_t other = cudaSuccess;
    std::thread([&] {
      other = cudaMalloc(&p, 256);
      cudaGetLastError();
    }).join();
    CHECK(other == cudaErrorStreamCaptureUnsupported);
    CHECK(end_invalid(st.s) == cudaErrorStreamCaptureInvalidated);
  }
}

// Querying or waiting for work outside the capture (an event of an eager copy, another stream) is
// potentially unsafe: the programming guide does not list these calls, PyTorch's caching allocator
// defers its event queries during a capture because of it, and an H200 lost captures to it
// (docs/simulator.md, the capture rules: the simulator takes the stricter reading).
TEST_CASE("graph capture modes: querying or waiting for outside work", "[gpu][graph]") {
  Stream st, other_stream;
  Buffers b;
  cudaEvent_t outside = record_outside(other_stream.s, b.dev);
  REQUIRE(cudaStreamSynchronize(other_stream.s) == cudaSuccess);
  SECTION("global mode: cudaEventQuery on the capturing thread is refused and breaks the capture") {
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaEventQuery(outside) == cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    CHECK(end_invalid(st.s) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("global mode: cudaEventSynchronize, cudaStreamQuery and cudaStreamSynchronize of another stream too") {
    for (int call = 0; call < 3; ++call) {
      INFO("call " << call);
      REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
      const cudaError_t e = call == 0   ? cudaEventSynchronize(outside)
                            : call == 1 ? cudaStreamQuery(other_stream.s)
                                        : cudaStreamSynchronize(other_stream.s);
      CHECK(e == cudaErrorStreamCaptureUnsupported);
      cudaGetLastError();
      CHECK(end_invalid(st.s) == cudaErrorStreamCaptureInvalidated);
    }
  }
  SECTION("global mode: another thread's cudaEventQuery breaks the capture") {
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    cudaError_t from_other = cudaSuccess;
    std::thread([&] {
      from_other = cudaEventQuery(outside);
      cudaGetLastError();
    }).join();
    CHECK(from_other == cudaErrorStreamCaptureUnsupported);
    CHECK(end_invalid(st.s) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("relaxed mode on the querying thread: the query answers and the capture goes on") {
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    CHECK(cudaEventQuery(outside) == cudaSuccess);
    REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    launch_add_one(st.s, b.dev);
    end_ok(st.s);
  }
  SECTION("thread-local mode: another thread may query") {
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    cudaError_t from_other = cudaErrorUnknown;
    std::thread([&] { from_other = cudaEventQuery(outside); }).join();
    CHECK(from_other == cudaSuccess);
    launch_add_one(st.s, b.dev);
    end_ok(st.s);
  }
  cudaEventDestroy(outside);
}

TEST_CASE("graph capture: an event recorded in a capture is not work that can be waited for", "[gpu][graph]") {
  Stream st;
  Buffers b;
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  launch_add_one(st.s, b.dev);
  REQUIRE(cudaEventRecord(e, st.s) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaErrorCapturedEvent);
  cudaGetLastError();
  CHECK(status(st.s) == cudaStreamCaptureStatusInvalidated);
  CHECK(end_invalid(st.s) == cudaErrorStreamCaptureInvalidated);
  cudaEventDestroy(e);
}

TEST_CASE("graph capture: fork and join through events, an unjoined fork fails the capture", "[gpu][graph]") {
  Stream s1, s2;
  Buffers b;
  int* other = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&other), kN * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(b.dev, 0, kN * sizeof(int), s1.s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(other, 0, kN * sizeof(int), s1.s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s1.s) == cudaSuccess);
  cudaEvent_t fork = nullptr, join = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
  for (bool joined : {true, false}) {
    INFO((joined ? "joined" : "not joined"));
    REQUIRE(cudaStreamBeginCapture(s1.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    launch_add_one(s1.s, b.dev);
    REQUIRE(cudaEventRecord(fork, s1.s) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(s2.s, fork, 0) == cudaSuccess);  // s2 joins the capture
    CHECK(status(s2.s) == cudaStreamCaptureStatusActive);
    launch_add_one(s2.s, other);
    if (joined) {
      REQUIRE(cudaEventRecord(join, s2.s) == cudaSuccess);
      REQUIRE(cudaStreamWaitEvent(s1.s, join, 0) == cudaSuccess);
      ember::cuda::launch(times_two, 1, kN, 0, s1.s, b.dev, kN);
      cudaGraph_t g = end_capture(s1.s);
      CHECK(status(s2.s) == cudaStreamCaptureStatusNone);
      CHECK(node_count(g) == 3);
      cudaGraphExec_t exec = instantiate(g);
      REQUIRE(cudaGraphLaunch(exec, s1.s) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(s1.s) == cudaSuccess);
      std::vector<int> got(kN), got2(kN);
      REQUIRE(cudaMemcpy(got.data(), b.dev, kN * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(cudaMemcpy(got2.data(), other, kN * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
      CHECK(got[5] == 2);   // (0 + 1) * 2
      CHECK(got2[5] == 1);  // the forked branch ran too
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(g);
    } else {
      CHECK(end_invalid(s1.s) == cudaErrorStreamCaptureUnjoined);
      CHECK(status(s2.s) == cudaStreamCaptureStatusNone);
    }
  }
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaFree(other);
}

TEST_CASE("graph capture: waiting on work outside the capture is an isolation error", "[gpu][graph]") {
  Stream s1, s2;
  Buffers b;
  cudaEvent_t outside = record_outside(s2.s, b.dev);
  REQUIRE(cudaStreamBeginCapture(s1.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(s1.s, outside, 0) == cudaErrorStreamCaptureIsolation);
  cudaGetLastError();
  CHECK(end_invalid(s1.s) == cudaErrorStreamCaptureInvalidated);
  REQUIRE(cudaStreamSynchronize(s2.s) == cudaSuccess);
  cudaEventDestroy(outside);
}

TEST_CASE("graph capture: a thread-local capture must end on the thread that began it", "[gpu][graph]") {
  Stream st;
  Buffers b;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  launch_add_one(st.s, b.dev);
  cudaError_t from_other = cudaSuccess;
  std::thread([&] {
    cudaGraph_t g = nullptr;
    from_other = cudaStreamEndCapture(st.s, &g);
    cudaGetLastError();
  }).join();
  CHECK(from_other == cudaErrorStreamCaptureWrongThread);
  // the wrong-thread end still ends the capture (what an H200 with driver 580 does)
  CHECK(status(st.s) == cudaStreamCaptureStatusNone);
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(st.s, &g) == cudaErrorIllegalState);
  cudaGetLastError();
  CHECK(g == nullptr);
  REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
}

TEST_CASE("graph capture: an external event record is a node that fires on every replay", "[gpu][graph]") {
  Stream st;
  Buffers b;
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  CHECK(cudaEventRecordWithFlags(e, st.s, cudaEventRecordExternal) == cudaErrorIllegalState);  // not capturing
  cudaGetLastError();
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  launch_add_one(st.s, b.dev);
  REQUIRE(cudaEventRecordWithFlags(e, st.s, cudaEventRecordExternal) == cudaSuccess);
  cudaGraph_t g = end_capture(st.s);
  CHECK(node_count(g) == 2);
  cudaGraphExec_t exec = instantiate(g);
  REQUIRE(cudaGraphLaunch(exec, st.s) == cudaSuccess);
  CHECK(cudaEventSynchronize(e) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaEventDestroy(e);
}
