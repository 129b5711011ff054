// NCCL across processes: jobs of 2 and 4 ranks, one process and GPU each (bin/ember_dist_worker's
// nccl scenarios, tests/dist/nccl.cpp), and mnist_train --distributed --device cuda under ember_run
// against one process with the same global batch. On a GPU machine they need as many GPUs as ranks
// (and skip saying so); in the simulator each process gets EMBER_SIM_DEVICES = the world size
// simulated GPUs and the simulator's NCCL (Note [simulated nccl] in sim/libs/nccl.cpp).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "dist/backends.h"
#include "io/safetensors.h"
#include "tests/dist_util.h"
#include "tests/mnist_train_util.h"
#include "tests/op_driver.h"

using namespace ember;
using Catch::Matchers::Contains;
namespace td = ember::testing::dist;

namespace {

// Whether this machine can run a job of `world` NCCL ranks (a warning says why not).
bool can_run(int world) {
  if (!dist::nccl_available()) {
    WARN("skipped: this build has no NCCL");
    return false;
  }
  if (!testing::kSimulator && cuda::device_count() < world) {
    WARN("skipped: " << world << " ranks need " << world << " GPUs, this machine has " << cuda::device_count());
    return false;
  }
  return true;
}

td::Job nccl_job_spec(int world, const std::string& scenario, double deadline_s = 300,
                      const std::vector<std::string>& args = {}) {
  td::Job job;
  job.world_size = world;
  job.scenario = scenario;
  job.args = args;
  job.deadline_s = deadline_s;
  if (testing::kSimulator) job.env["EMBER_SIM_DEVICES"] = std::to_string(world);
  return job;
}

std::vector<td::RankResult> nccl_job(int world, const std::string& scenario, double deadline_s = 300,
                                     const std::vector<std::string>& args = {}) {
  return td::run_job(nccl_job_spec(world, scenario, deadline_s, args));
}

}  // namespace

TEST_CASE("nccl jobs: 2 and 4 processes compute every collective", "[gpu][dist][nccl-jobs]") {
  for (int world : {2, 4}) {
    if (!can_run(world)) continue;
    const std::vector<td::RankResult> rs = nccl_job(world, "nccl_collectives");
    INFO(td::describe(rs));
    REQUIRE(rs.size() == static_cast<size_t>(world));
    for (const td::RankResult& r : rs) {
      CHECK(r.exit_code == 0);
      CHECK(r.output.find("ok: every collective on rank " + std::to_string(r.rank) + " of " + std::to_string(world)) !=
            std::string::npos);
    }
  }
}

TEST_CASE("nccl jobs: SyncBatchNorm on CUDA tensors over 2 ranks matches BatchNorm on the full batch",
          "[gpu][dist][nccl-jobs]") {
  if (!can_run(2)) return;
  const std::vector<td::RankResult> rs = nccl_job(2, "sync_bn", 600, {"3,5", "cuda"});
  INFO(td::describe(rs));
  REQUIRE(rs.size() == 2);
  for (const td::RankResult& r : rs) {
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("ok: sync_bn on rank " + std::to_string(r.rank) + " of 2") != std::string::npos);
  }
}

TEST_CASE("nccl jobs: ranks that call different collectives get an error, not a hang", "[gpu][dist][nccl-jobs]") {
  if (!can_run(2)) return;
  if (!testing::kSimulator) {
    WARN("skipped on a GPU: NCCL itself does not detect a mismatch (it hangs until ember's watchdog times out)");
    return;
  }
  const std::vector<td::RankResult> rs = nccl_job(2, "nccl_mismatch", 120);
  INFO(td::describe(rs));
  REQUIRE(rs.size() == 2);
  for (const td::RankResult& r : rs) {
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("ranks disagree on the collective sequence") && Contains("ncclAllReduce #1") &&
                             Contains("ncclBroadcast #1"));
  }
}

TEST_CASE("nccl jobs: a rank that dies between collectives ends the job through the watchdog",
          "[gpu][dist][nccl-jobs]") {
  if (!can_run(2)) return;
  const std::vector<td::RankResult> rs = nccl_job(2, "nccl_peer_dies", 120);
  INFO(td::describe(rs));
  REQUIRE(rs.size() == 2);
  CHECK(rs[1].exit_code == 3);
  CHECK(rs[0].exit_code == 1);
  CHECK_THAT(rs[0].output, Contains("nccl all_reduce #2") && Contains("on rank 0 of 2 failed"));
  if (testing::kSimulator)  // the simulator's NCCL names the peer (ncclGetLastError, quoted by the watchdog)
    CHECK_THAT(rs[0].output, Contains("rank 1 (pid") && Contains("exited in the middle of a collective"));
  CHECK(rs[0].seconds < 60);  // the group's timeout is 30 s; the simulator sees the exit at once
}

TEST_CASE("nccl jobs: a rank stopped in a replayed DDP step ends the others through the watchdog",
          "[gpu][dist][nccl-jobs][graph]") {
  if (!can_run(2)) return;
  // without the replay in the watchdog's list (Note [replayed collectives]), rank 0 waits for
  // rank 1's half of the replayed all_reduce for ever and the job ends at the deadline
  // EMBER_DIST_TIMEOUT is the rendezvous and communicator deadline too: NCCL's setup on GPUs
  // takes seconds
  const int timeout = testing::kSimulator ? 4 : 10;
  td::Job job = nccl_job_spec(2, "nccl_graph_peer_stops", 120);
  job.env["EMBER_DIST_TIMEOUT"] = std::to_string(timeout);
  job.ends_with = 0;  // rank 1 stays stopped
  const std::vector<td::RankResult> rs = td::run_job(job);
  INFO(td::describe(rs));
  REQUIRE(rs.size() == 2);
  CHECK_THAT(rs[1].output, Contains("rank 1 stops (SIGSTOP) after its first replay"));
  REQUIRE(rs[0].exit_code == 1);
  CHECK_THAT(rs[0].output, Contains("nccl gradient all_reduce #") && Contains("replayed from a CUDA graph") &&
                               Contains("on rank 0 of 2 failed: timed out after " + std::to_string(timeout) + " s"));
  const size_t at = rs[0].output.find("error after ");
  REQUIRE(at != std::string::npos);
  const double seconds = std::stod(rs[0].output.substr(at + std::string("error after ").size()));
  CHECK(seconds < 2 * timeout);
}

TEST_CASE("nccl jobs: mnist_train --distributed --device cuda on 2 ranks equals one process",
          "[gpu][dist][nccl-jobs]") {
  using namespace ember::testing::app;
  if (!have_binary() || !can_run(2)) return;
  const std::string launcher = EMBER_BINARY_DIR "/bin/ember_run";
  testing::TempDir tmp;
  const std::string data = tmp.path() + "/data";
  write_synthetic_set(data, false, 768, 64);
  // f32, fp16 with loss scaling, and f32 with the step captured in a CUDA graph (DDP's all_reduce
  // calls captured and replayed); one epoch of 768 images: 24 steps of 32
  struct Config {
    std::string amp;
    bool graph;
  };
  for (const Config& c : {Config{"off", false}, Config{"fp16", false}, Config{"off", true}}) {
    const std::string& amp = c.amp;
    const std::string tag = amp + (c.graph ? "-graph" : "");
    INFO("--amp " << amp << (c.graph ? " --graph" : ""));
    std::vector<std::string> common = {"--data",      data,       "--device", "cuda",  "--model", "mlp",    "--workers",
                                       "0",           "--epochs", "1",        "--lr",  "1e-3",    "--seed", "7",
                                       "--val-split", "0",        "--quiet",  "--amp", amp};
    if (c.graph) common.push_back("--graph");
    const std::string one_ckpt = tmp.path() + "/one-" + tag + ".safetensors";
    const std::string two_ckpt = tmp.path() + "/two-" + tag + ".safetensors";
    // one process, global batch 32
    std::vector<std::string> one = common;
    for (const std::string& a : {std::string("--batch-size"), std::string("32"), std::string("--save"), one_ckpt})
      one.push_back(a);
    const RunResult single = run_app(one, tmp.path(), 600);
    require_success(single);
    // two processes of 16, the learning rate as given
    std::string cmd = (testing::kSimulator ? "EMBER_SIM_DEVICES=2 " : "") + std::string("'") + launcher +
                      "' --nproc-per-node 2 -- '" + kBinary +
                      "' --distributed --no-lr-scaling --batch-size 16 --save '" + two_ckpt + "'";
    for (const auto& a : common) cmd += " '" + a + "'";
    const std::string out_file = tmp.path() + "/two.out";
    const int status = std::system((cmd + " > '" + out_file + "' 2>&1").c_str());
    std::ifstream in(out_file);
    std::stringstream out;
    out << in.rdbuf();
    INFO(out.str());
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(out.str().find("2 processes (nccl)") != std::string::npos);
    if (c.graph) {
      CHECK(single.out.find("CUDA graph            captured and replayed") != std::string::npos);
      CHECK(out.str().find("[rank 0]   CUDA graph            captured and replayed") != std::string::npos);
      CHECK(out.str().find("cannot be captured") == std::string::npos);
    }
    if (amp == "fp16") {  // the loss scaler skipped as many steps as in one process (none, at this size)
      auto skipped = [](const std::string& text) {
        const size_t at = text.find("loss scaler");
        return at == std::string::npos ? std::string("(none)") : text.substr(at, text.find('\n', at) - at);
      };
      CHECK(skipped(single.out) != "(none)");
      CHECK(skipped(out.str()) == skipped(single.out));
    }
    const auto a = io::load_safetensors(one_ckpt).tensors;
    const auto b = io::load_safetensors(two_ckpt).tensors;
    REQUIRE(a.size() == b.size());
    REQUIRE(!a.empty());
    // the same 24 steps: gradients averaged over 2 x 16 rows instead of summed over 32, in f32 (or
    // from fp16 activations, rounded per half batch)
    double worst = 0, worst_abs = 0;
    for (const auto& [name, ta] : a) {
      INFO(name);
      REQUIRE(b.contains(name));
      const Tensor tb = b.at(name);
      const std::vector<double> x = ta.to(DType::f64).template to_vector<double>();
      const std::vector<double> y = tb.to(DType::f64).template to_vector<double>();
      REQUIRE(x.size() == y.size());
      for (size_t k = 0; k < x.size(); ++k) {
        worst = std::max(worst, std::abs(x[k] - y[k]) / (1e-3 + std::abs(x[k])));
        worst_abs = std::max(worst_abs, std::abs(x[k] - y[k]));
      }
    }
    INFO("largest difference of a weight: " << worst << " relative, " << worst_abs << " absolute");
    // fp16: Adam moves a weight by about lr whatever the size of its gradient, so a weight whose
    // gradient is near 0 and rounds differently per half batch may differ in sign of its steps:
    // relative differences of near-0 weights mean little; all weights must stay within one step
    // (lr = 1e-3) of the single process's (measured: 2e-4)
    if (amp == "off") CHECK(worst < 1e-4);
    else CHECK(worst_abs < 1e-3);
  }
}
