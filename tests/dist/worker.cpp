// bin/ember_dist_worker SCENARIO [ARGS...]: one rank of a multi-process test (tests/dist_util.h).
// Exit codes: the scenario's; 1 when it threw (the message on stderr); 2 for an unknown scenario.
#include <cstdio>
#include <exception>

#include "tests/dist/scenarios.h"

int main(int argc, char** argv) {
  using namespace ember::testing::dist;
  Scenarios all;
  add_collective_scenarios(all);
  add_ddp_scenarios(all);
  add_sync_batch_norm_scenarios(all);
  add_store_scenarios(all);
  add_nccl_scenarios(all);
  if (argc < 2 || !all.count(argv[1])) {
    std::fprintf(stderr, "usage: ember_dist_worker SCENARIO [ARGS...]; scenarios:");
    for (const auto& [name, fn] : all) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    int rc = all.at(argv[1])(args);
    std::fflush(stdout);
    return rc;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
