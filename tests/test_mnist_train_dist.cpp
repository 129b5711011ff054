// mnist_train --distributed under ember_run on the CPU (gloo): two processes with batch 64 each
// train to the same accuracy as one process with the global batch of 128 and the scaled lr; only
// rank 0 prints and saves; the flag is refused outside ember_run and with --graph.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/data_test_util.h"
#include "tests/mnist_train_util.h"

using namespace ember;
using namespace ember::testing::app;
namespace fs = std::filesystem;

namespace {

const std::string kLauncher = EMBER_BINARY_DIR "/bin/ember_run";

// Runs `ember_run args...` with stdout+stderr into a file; returns the exit code and the output.
std::pair<int, std::string> run_launcher(const std::vector<std::string>& args, const std::string& dir) {
  std::string cmd = "'" + kLauncher + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  const std::string out = dir + "/launcher.out";
  cmd += " > '" + out + "' 2>&1";
  int status = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

}  // namespace

TEST_CASE("mnist_train: --distributed on 2 CPU processes matches one process with the same global batch", "[mnist_train][dist]") {
  if (!have_binary() || !fs::exists(kLauncher)) {
    WARN("SKIPPED: mnist_train or ember_run is not built");
    return;
  }
  if (!testing::has_fashion_mnist()) {
    WARN("SKIPPED: " << testing::kFashionMnist << " is missing (apt-get install dataset-fashion-mnist)");
    return;
  }
  testing::TempDir tmp;
  const std::vector<std::string> common = {"--data", testing::kFashionMnist, "--device", "cpu", "--model", "mlp",
                                           "--epochs", "1", "--val-split", "0", "--workers", "1"};
  // one process, global batch 128, lr 2 x 3e-3
  std::vector<std::string> single = common;
  for (const char* a : {"--batch-size", "128", "--lr", "0.006"}) single.push_back(a);
  RunResult one = run_app(single, tmp.path(), 300);
  require_success(one);
  const double acc1 = reported_test_accuracy(one.out);
  // two processes, 64 each, --lr 3e-3 scaled by WORLD_SIZE; rank 0 saves
  std::vector<std::string> args = {"--nproc-per-node", "2", "--", kBinary, "--distributed"};
  args.insert(args.end(), common.begin(), common.end());
  const std::string ckpt = tmp.path() + "/dist.safetensors";
  for (const std::string a : {"--batch-size", "64", "--lr", "0.003", "--save", ckpt.c_str()}) args.push_back(a);
  auto [code, out] = run_launcher(args, tmp.path());
  INFO(out);
  REQUIRE(code == 0);
  CHECK(out.find("[rank 0] distributed: 2 processes (gloo), 64 samples per process and step, global batch 128, lr 0.006") !=
        std::string::npos);
  // only rank 0 prints the run (rank 1's lines would carry its prefix)
  CHECK(out.find("[rank 1] epoch") == std::string::npos);
  CHECK(out.find("[rank 1] summary") == std::string::npos);
  CHECK(out.find("[rank 0] summary") != std::string::npos);
  CHECK(out.find("60000 train, 0 validation, 10000 test") != std::string::npos);
  const double acc2 = reported_test_accuracy(out);
  INFO("one process: " << acc1 << "%, two processes: " << acc2 << "%");
  CHECK(acc1 > 80.0);
  CHECK(std::abs(acc2 - acc1) <= 0.5);
  CHECK(fs::exists(ckpt));
  // the checkpoint evaluates to the same accuracy in one process
  RunResult eval = run_app({"--data", testing::kFashionMnist, "--device", "cpu", "--model", "mlp", "--val-split", "0",
                            "--eval-only", ckpt},
                           tmp.path(), 120);
  require_success(eval);
  CHECK(std::abs(reported_test_accuracy(eval.out) - acc2) < 1e-6);
}

TEST_CASE("mnist_train: --distributed outside ember_run, or with --graph, is a clear error", "[mnist_train][dist]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  RunResult r = run_app({"--distributed", "--device", "cpu"}, tmp.path(), 60);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("start the processes with ember_run") != std::string::npos);
  if (!fs::exists(kLauncher)) return;
  auto [code, out] = run_launcher({"--nproc-per-node", "2", "--", kBinary, "--distributed", "--device", "cpu", "--graph"},
                                  tmp.path());
  INFO(out);
  CHECK(code == 1);
  CHECK(out.find("--graph with --distributed is not supported yet") != std::string::npos);
}
