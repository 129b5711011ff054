// The registry held to Note [library rule] (bench/lab/library_rule.h): every library variant of every op
// (not vendor, not an oracle) is the default choice for one of its op's test samples or benchmark
// cases, or the recorded winner of a benchmark case in bench/results/. Decided by selection alone
// (no kernel runs), so it costs the GPU suite little. tests/test_library_rule.cpp shows on fixtures
// that it fails, naming the variant.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "bench/lab/library_rule.h"

using namespace ember;

TEST_CASE("library rule: every library variant is a default choice or a recorded winner (bench/results/)",
          "[gpu][library-rule]") {
  // the repository's results; a GPU machine without the source tree gets them from the bundle
  // (scripts/gpu_run.sh sets EMBER_BENCH_RESULTS)
  const char* env = std::getenv("EMBER_BENCH_RESULTS");
  const std::string dir = env != nullptr && *env != '\0' ? std::string(env) : EMBER_SOURCE_DIR "/bench/results";
  const std::vector<BenchResult> results = read_bench_results_dir(dir);
  const RuleReport r = check_library_rule(all_ops(), registry_rule_calls(), results);
  INFO(r.verdicts.size() << " library variants, " << results.size() << " results lines from " << dir << ", " << r.calls
                         << " calls asked about");
  // what keeps each variant in the library (shown with -s)
  for (const RuleVerdict& v : r.verdicts) {
    INFO(v.op->name << "/" << v.variant->name << (v.variant->device == DeviceType::cpu ? " (cpu): " : " (cuda): ")
                    << (v.earned_by.empty() ? "nothing" : v.earned_by));
    CHECK(!v.earned_by.empty());
  }
  if (!r.ok()) FAIL(r.message());
}
