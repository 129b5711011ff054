// mnist_train on CUDA against the CPU: 20 optimizer steps of the MLP and 8 of the CNN, eagerly and as
// a replayed CUDA graph, in f32, bf16 and fp16 (with loss scaling), from the host loader and from a
// device-resident dataset, with the profiler and with a host sync after every step. Each run's
// per-step losses (the JSONL log at --log-interval 1) must match the same run on the CPU within the
// tolerance of its precision, and every --graph run must really capture and replay its step (a
// fallback to eager fails). On a GPU this is an end-to-end check of the training step; in the
// simulator build it runs every kernel of that step under the simulator's checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/mnist_train_util.h"
#include "tests/op_driver.h"

using namespace ember;
using namespace ember::testing::app;

namespace {

std::vector<double> step_losses(const std::string& jsonl) {
  std::vector<double> out;
  for (const std::string& l : lines_of(read_file(jsonl))) {
    nlohmann::json j = nlohmann::json::parse(l);
    if (j["type"] == "step") out.push_back(j["loss"].get<double>());
  }
  return out;
}

struct Config {
  std::string name;
  std::vector<std::string> flags;  // besides --device cuda
  std::string amp = "off";         // the CPU run to compare with uses bf16 too; fp16 compares with f32
  bool graph = false;
};

// |gpu - cpu| <= atol + rtol |cpu| for every micro-batch of `steps` optimizer steps (`micro` each);
// `both`: flags of every run, CPU and CUDA alike.
void check_against_cpu(const std::string& model, const std::string& batch, const std::vector<Config>& configs,
                       int steps = 20, const std::vector<std::string>& both = {}, int micro = 1) {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string data = tmp.path() + "/data";
  write_synthetic_set(data, false, 400, 60);
  auto base = [&](const std::string& device, const std::string& log) {
    return std::vector<std::string>{"--data",
                                    data,
                                    "--device",
                                    device,
                                    "--model",
                                    model,
                                    "--workers",
                                    "0",
                                    "--quiet",
                                    "--batch-size",
                                    batch,
                                    "--epochs",
                                    "1",
                                    "--max-steps",
                                    std::to_string(steps),
                                    "--log-interval",
                                    "1",
                                    "--lr",
                                    "1e-3",
                                    "--seed",
                                    "7",
                                    "--log",
                                    log};
  };
  auto base_with = [&](const std::string& device, const std::string& log) {
    std::vector<std::string> args = base(device, log);
    args.insert(args.end(), both.begin(), both.end());
    return args;
  };
  std::map<std::string, std::vector<double>> cpu;
  for (const std::string amp : {"off", "bf16"}) {
    const std::string log = tmp.path() + "/cpu-" + amp + ".jsonl";
    std::vector<std::string> args = base_with("cpu", log);
    args.insert(args.end(), {"--amp", amp});
    require_success(run_app(args, tmp.path(), 300));
    cpu[amp] = step_losses(log);
    REQUIRE(cpu[amp].size() == static_cast<size_t>(steps * micro));
  }
  for (const Config& c : configs) {
    INFO(model << ": " << c.name);
    const std::string log = tmp.path() + "/" + std::to_string(&c - configs.data()) + ".jsonl";
    std::vector<std::string> args = base_with("cuda", log);
    for (std::string f : c.flags) {  // "{tmp}" stands for the run's temporary directory
      if (f.rfind("{tmp}", 0) == 0) f = tmp.path() + f.substr(5);
      args.push_back(f);
    }
    args.insert(args.end(), {"--amp", c.amp});
    const RunResult r = run_app(args, tmp.path(), 600);
    require_success(r);
    INFO(EMBER_DESCRIBE_RUN(r));
    if (c.graph) {
      CHECK(r.out.find("CUDA graph            captured and replayed") != std::string::npos);
      CHECK(r.err.find("cannot be captured") == std::string::npos);
    }
    // the warm-up (Note [the timing rule] in run_result.h) is the first step, with --graph the
    // three eager steps and the captured one
    CHECK(r.out.find("after a warm-up of") != std::string::npos);
    CHECK(r.out.find(c.graph ? " s, 4 steps)" : " s, 1 step)") != std::string::npos);
    const std::vector<double> got = step_losses(log);
    const std::vector<double>& want = cpu[c.amp == "bf16" ? "bf16" : "off"];
    REQUIRE(got.size() == want.size());
    // f32: the same math summed in another order; bf16 against the CPU's bf16 autocast; fp16
    // (with the loss scaler) against f32, at fp16's resolution
    const double rtol = c.amp == "off" ? 1e-3 : c.amp == "bf16" ? 2e-2 : 1e-2;
    const double atol = c.amp == "off" ? 1e-4 : 1e-3;
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("step " << i + 1 << ": cuda " << got[i] << ", cpu " << want[i]);
      CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
    }
  }
}

// The flags the runs use (--graph runs capture after 3 warm-up steps and replay the rest).
const Config kEager{"eager, f32, host loader", {}};
const Config kGraph{"graph, f32, host loader", {"--graph"}, "off", true};
const Config kGraphResident{"graph, f32, device-resident data", {"--graph", "--device-resident"}, "off", true};
const Config kGraphProfile{"graph with the profiler", {"--graph", "--profile", "{tmp}/trace.json"}, "off", true};
const Config kGraphSync{"graph with a host sync after every step", {"--graph", "--sync-every-step"}, "off", true};
const Config kEagerBf16{"eager, bf16, device-resident data", {"--device-resident"}, "bf16"};
const Config kGraphBf16{"graph, bf16, host loader", {"--graph"}, "bf16", true};
const Config kEagerFp16{"eager, fp16 with loss scaling", {}, "fp16"};
const Config kGraphFp16{"graph, fp16, device-resident data", {"--graph", "--device-resident"}, "fp16", true};
// every op on its vendor variant where it has one (the MLP: its linear layers on cuBLAS): eager,
// and captured into a graph, which must capture the library calls too
const Config kVendorEager{"vendor libraries, eager, f32", {"--backends", "*=vendor"}};
const Config kVendorGraphFp16{"vendor libraries, graph, fp16", {"--backends", "*=vendor", "--graph"}, "fp16", true};

}  // namespace

TEST_CASE("mnist_train --device cuda: the MLP's 20 steps match the CPU, eager and graph, every precision",
          "[gpu][mnist_train]") {
  check_against_cpu(
      "mlp", "16",
      {kEager, kGraph, kGraphResident, kGraphProfile, kGraphSync, kEagerBf16, kGraphBf16, kEagerFp16, kGraphFp16});
}

// With --grad-accum the optimizer steps every other micro-batch, and so do the rows of the schedule
// the eager GPU steps read (Note [hyperparameter rows ahead] in optim/schedule_ahead.h).
TEST_CASE("mnist_train --device cuda --grad-accum 2: the MLP's eager steps match the CPU", "[gpu][mnist_train]") {
  check_against_cpu("mlp", "16", {kEager, kEagerBf16}, 10, {"--grad-accum", "2"}, 2);
}

// The CNN in two parts, so they run side by side (each CNN step is a few hundred million
// multiply-adds: seconds in the simulator, more under CI's sanitizers), at batch 8 and for 8 steps:
// 3 eager warm-up steps, the capture, and 4 replays are what a --graph run has to show; the MLP
// above runs 20.
// In the simulator each CNN run costs 10-20 s under CI's sanitizers, so there the CNN runs each
// precision and each kind of step once, and leaves to the MLP's test the loop's mechanics that do
// not depend on the model (the profiler, a host sync per step, the other loader per precision).
TEST_CASE("mnist_train --device cuda: the CNN's 8 steps match the CPU in f32, eager and graph", "[gpu][mnist_train]") {
  if (testing::kSimulator) check_against_cpu("cnn", "8", {kEager, kGraph, kGraphResident}, 8);
  else check_against_cpu("cnn", "8", {kEager, kGraph, kGraphResident, kGraphProfile, kGraphSync}, 8);
}

TEST_CASE("mnist_train --device cuda: the CNN's 8 steps match the CPU in bf16 and fp16, eager and graph",
          "[gpu][mnist_train]") {
  if (testing::kSimulator) check_against_cpu("cnn", "8", {kEagerBf16, kGraphFp16}, 8);
  else check_against_cpu("cnn", "8", {kEagerBf16, kGraphBf16, kEagerFp16, kGraphFp16}, 8);
}

// The MLP: in the simulator the vendor libraries' emulation computes naively (a CNN step at batch 8
// is a quarter of a billion multiply-adds: minutes under CI's sanitizers); cuDNN's convolutions,
// pooling and batch norm have their parity, large-shape and capture tests.
TEST_CASE("mnist_train --device cuda --backends '*=vendor': the MLP's 20 steps match the CPU, eager and graph",
          "[gpu][mnist_train]") {
  check_against_cpu("mlp", "16", {kVendorEager, kVendorGraphFp16});
}

namespace {

// A trace --profile wrote: valid Chrome trace JSON; returns how many "graph replay" ranges have a
// GPU time.
int timed_replays(const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(read_file(path));
  int n = 0;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("cat") == "gpu" && e.at("name").get<std::string>().rfind("graph replay", 0) == 0) ++n;
  return n;
}

}  // namespace

// In a run this short the profile window holds the capture step (Note [profiling captured work]);
// after a resume the capture is still this process's fourth step, never its first.
TEST_CASE("mnist_train --graph --profile: a short run and a resumed run write their trace and exit 0",
          "[gpu][mnist_train][profiler]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string data = tmp.path() + "/data";
  write_synthetic_set(data, false, 200, 40);
  // --scheduler none: a run without a schedule laid out over its length can be resumed for more epochs
  const std::vector<std::string> base = {"--data",    data,          "--device", "cuda",         "--model", "mlp",
                                         "--workers", "0",           "--quiet",  "--batch-size", "16",      "--seed",
                                         "3",         "--scheduler", "none",     "--graph"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  {
    const RunResult r = run_app(with({"--max-steps", "12", "--profile", tmp.path() + "/short.json"}), tmp.path(), 300);
    INFO(EMBER_DESCRIBE_RUN(r));
    require_success(r);
    CHECK(r.out.find("CUDA graph            captured and replayed") != std::string::npos);
    CHECK(timed_replays(tmp.path() + "/short.json") > 0);
  }
  const std::string ck = tmp.path() + "/ck.safetensors";
  require_success(run_app(with({"--epochs", "1", "--save", ck}), tmp.path(), 300));
  const RunResult r =
      run_app(with({"--epochs", "2", "--resume", ck, "--profile", tmp.path() + "/resumed.json"}), tmp.path(), 300);
  INFO(EMBER_DESCRIBE_RUN(r));
  require_success(r);
  CHECK(r.out.find("CUDA graph            captured and replayed") != std::string::npos);
  CHECK(r.err.find("cannot be captured") == std::string::npos);
  CHECK(timed_replays(tmp.path() + "/resumed.json") > 0);
}

// A capture that fails (EMBER_SIM_FAIL_CAPTURES makes the simulator fail the first one) costs
// nothing but time: its batch is trained eagerly, so every step's loss is the eager run's, bit for
// bit, and the optimizer has stepped as often as the run counted.
TEST_CASE("mnist_train --graph: a failed capture trains its batch eagerly", "[gpu][mnist_train]") {
  if (!have_binary()) return;
#if !EMBER_CUDA_SIM
  WARN("skipped: needs the simulator build (EMBER_SIM_FAIL_CAPTURES fails a capture on purpose)");
  return;
#endif
  testing::TempDir tmp;
  const std::string data = tmp.path() + "/data";
  write_synthetic_set(data, false, 200, 40);
  auto args = [&](const std::string& log, bool graph) {
    std::vector<std::string> a = {"--data",    data,          "--device", "cuda",           "--model", "mlp",
                                  "--workers", "0",           "--quiet",  "--batch-size",   "16",      "--seed",
                                  "3",         "--max-steps", "8",        "--log-interval", "1",       "--log",
                                  log};
    if (graph) a.push_back("--graph");
    return a;
  };
  require_success(run_app(args(tmp.path() + "/eager.jsonl", false), tmp.path(), 300));
  const RunResult r = run_app(args(tmp.path() + "/failed.jsonl", true), tmp.path(), 300, {"EMBER_SIM_FAIL_CAPTURES=1"});
  INFO(EMBER_DESCRIBE_RUN(r));
  require_success(r);
  CHECK(r.err.find("cannot be captured") != std::string::npos);
  CHECK(r.out.find("capture failed, ran eagerly") != std::string::npos);
  const std::vector<double> eager = step_losses(tmp.path() + "/eager.jsonl");
  const std::vector<double> failed = step_losses(tmp.path() + "/failed.jsonl");
  REQUIRE(eager.size() == 8);
  CHECK(failed == eager);
}

namespace {

// The JSONL records of a run, but the timings: every step record's epoch, step, loss, accuracy and
// lr, and every epoch record's train loss and accuracy, validation accuracy (-1 without a
// validation split) and test accuracy, in order.
std::vector<std::vector<double>> training_records(const std::string& jsonl) {
  std::vector<std::vector<double>> out;
  for (const std::string& l : lines_of(read_file(jsonl))) {
    nlohmann::json j = nlohmann::json::parse(l);
    if (j["type"] == "step")
      out.push_back({j["epoch"].get<double>(), j["step"].get<double>(), j["loss"].get<double>(),
                     j["accuracy"].get<double>(), j["lr"].get<double>()});
    else if (j["type"] == "epoch")
      out.push_back({j["train_loss"].get<double>(), j["train_accuracy"].get<double>(),
                     j["val_accuracy"].is_null() ? -1.0 : j["val_accuracy"].get<double>(),
                     j["test_accuracy"].get<double>()});
  }
  return out;
}

std::vector<std::string> resident_eval_args(const std::string& data, const std::string& log) {
  return {"--data",
          data,
          "--device",
          "cuda",
          "--model",
          "mlp",
          "--workers",
          "0",
          "--quiet",
          "--batch-size",
          "32",
          "--seed",
          "5",
          "--epochs",
          "3",
          "--val-split",
          "0.25",
          "--graph",
          "--device-resident",
          "--log",
          log};
}

}  // namespace

// --graph --device-resident evaluates from CUDA graphs: a split's first pass eager, its second
// captured, every later one replayed. The same kernels on the same resident data: every epoch's
// validation and test accuracy is the eager evaluation's, bit for bit.
TEST_CASE("mnist_train --graph --device-resident: evaluation replayed from graphs equals eager evaluation",
          "[gpu][mnist_train]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string data = tmp.path() + "/data";
  write_synthetic_set(data, false, 240, 60);
  std::vector<std::string> eager = resident_eval_args(data, tmp.path() + "/eager.jsonl");
  eager.push_back("--eager-eval");
  const RunResult a = run_app(eager, tmp.path(), 300);
  require_success(a);
  const RunResult b = run_app(resident_eval_args(data, tmp.path() + "/graphed.jsonl"), tmp.path(), 300);
  INFO(EMBER_DESCRIBE_RUN(b));
  require_success(b);
  CHECK(a.out.find("evaluation passes replayed") == std::string::npos);
  // 3 epochs, a validation and a test pass each: per split 1 eager, 1 captured and 2 replays
  CHECK(b.out.find("CUDA graph            captured and replayed;") != std::string::npos);
  CHECK(b.out.find("; 4 evaluation passes replayed") != std::string::npos);
  CHECK(b.err.find("cannot be captured") == std::string::npos);
  const auto want = training_records(tmp.path() + "/eager.jsonl");
  REQUIRE(want.size() >= 3);  // 3 epochs
  CHECK(training_records(tmp.path() + "/graphed.jsonl") == want);
}

// A failed capture of an evaluation pass leaves that split eager, with a note, and changes nothing.
// With --grad-accum 2 the training step is not captured, so the first capture of the process is
// the validation pass's (EMBER_SIM_FAIL_CAPTURES=1 fails it); the test pass's capture succeeds.
TEST_CASE("mnist_train --graph --device-resident: a failed evaluation capture evaluates eagerly",
          "[gpu][mnist_train]") {
  if (!have_binary()) return;
#if !EMBER_CUDA_SIM
  WARN("skipped: needs the simulator build (EMBER_SIM_FAIL_CAPTURES fails a capture on purpose)");
  return;
#endif
  testing::TempDir tmp;
  const std::string data = tmp.path() + "/data";
  write_synthetic_set(data, false, 240, 60);
  std::vector<std::string> eager = resident_eval_args(data, tmp.path() + "/eager.jsonl");
  std::vector<std::string> failed = resident_eval_args(data, tmp.path() + "/failed.jsonl");
  for (auto* a : {&eager, &failed}) a->insert(a->end(), {"--grad-accum", "2"});
  eager.push_back("--eager-eval");
  require_success(run_app(eager, tmp.path(), 300));
  const RunResult r = run_app(failed, tmp.path(), 300, {"EMBER_SIM_FAIL_CAPTURES=1"});
  INFO(EMBER_DESCRIBE_RUN(r));
  require_success(r);
  CHECK(r.out.find("an evaluation pass cannot be captured") != std::string::npos);
  CHECK(r.out.find("2 evaluation passes replayed") != std::string::npos);  // the test split's
  const auto want = training_records(tmp.path() + "/eager.jsonl");
  REQUIRE(want.size() >= 3);  // 3 epochs
  CHECK(training_records(tmp.path() + "/failed.jsonl") == want);
}

namespace {

// Runs `flags` with one step per graph launch and with K steps per launch; both must log the same
// records, bit for bit, and the second must have run `steps` steps in `launches` launches. With
// `resident` the data is device-resident (the K batches staged as indices), else the host loader
// feeds it (the K batches staged as copies).
void check_multi_step(const std::vector<std::string>& flags, const std::string& steps_in_launches,
                      bool resident = true) {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string data = tmp.path() + "/data";
  write_synthetic_set(data, false, 240, 60);
  auto args = [&](const std::string& log, const std::string& graph_steps) {
    std::vector<std::string> a = {
        "--data", data,          "--device", "cuda",    "--workers",     "0",         "--quiet", "--seed",
        "11",     "--val-split", "0",        "--graph", "--graph-steps", graph_steps, "--log",   log};
    if (resident) a.push_back("--device-resident");
    a.insert(a.end(), flags.begin(), flags.end());
    return a;
  };
  const RunResult one = run_app(args(tmp.path() + "/one.jsonl", "1"), tmp.path(), 600);
  require_success(one);
  const RunResult many = run_app(args(tmp.path() + "/many.jsonl", "100"), tmp.path(), 600);
  INFO(EMBER_DESCRIBE_RUN(many));
  require_success(many);
  CHECK(one.out.find("launches") == std::string::npos);
  CHECK(many.out.find("CUDA graph            captured and replayed; " + steps_in_launches) != std::string::npos);
  CHECK(many.err.find("cannot be captured") == std::string::npos);
  const auto want = training_records(tmp.path() + "/one.jsonl");
  REQUIRE(want.size() >= 2);  // a log line and an epoch at least
  CHECK(training_records(tmp.path() + "/many.jsonl") == want);
}

}  // namespace

// K optimizer steps per graph launch (multi_step.h) train exactly as one step per launch: the
// same kernels in the same order, each step reading its own row of the schedule's values. MLP,
// 240 images in batches of 16 (15 steps an epoch), 2 epochs, a log line every 5 steps: 3 warm-up
// steps and the one-step graph's capture, 1 more step to the first log line, then launches of 5.
TEST_CASE("mnist_train --graph --device-resident: K steps per launch equal one step per launch, MLP f32 and bf16",
          "[gpu][mnist_train]") {
  SECTION("f32, OneCycle") {
    check_multi_step({"--model", "mlp", "--batch-size", "16", "--epochs", "2", "--log-interval", "5"},
                     "25 steps in 5 launches");
  }
  SECTION("bf16 autocast, gradient clipping, AdamW") {
    check_multi_step({"--model", "mlp", "--batch-size", "16", "--epochs", "2", "--log-interval", "5", "--amp", "bf16",
                      "--clip-grad", "1.0", "--optimizer", "adamw"},
                     "25 steps in 5 launches");
  }
}

// The same with the host loader feeding the graphs (one epoch: the warm-up, the step to the first
// log line, then two launches of 5): the K batches it copied to the device are copied into the
// buffer the K-step graph reads, the rest is the same.
TEST_CASE("mnist_train --graph with the host loader: K steps per launch equal one step per launch, MLP",
          "[gpu][mnist_train]") {
  check_multi_step({"--model", "mlp", "--batch-size", "16", "--epochs", "1", "--log-interval", "5", "--amp", "bf16",
                    "--clip-grad", "1.0"},
                   "10 steps in 2 launches", false);
}

// The CNN, f32 and bf16: 8 steps of batch 8, a log line every 4: the warm-up and capture take the
// first 4, the next 4 are one launch, and the second log line's losses depend on the updates in it.
TEST_CASE("mnist_train --graph --device-resident: K steps per launch equal one step per launch, CNN",
          "[gpu][mnist_train]") {
  const std::vector<std::string> cnn = {"--model",     "cnn", "--batch-size",   "8", "--epochs", "1",
                                        "--max-steps", "8",   "--log-interval", "4"};
  SECTION("f32") { check_multi_step(cnn, "4 steps in 1 launch"); }
  SECTION("bf16 autocast") {
    std::vector<std::string> bf16 = cnn;
    bf16.insert(bf16.end(), {"--amp", "bf16"});
    check_multi_step(bf16, "4 steps in 1 launch");
  }
}
