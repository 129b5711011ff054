// The scenarios bin/ember_dist_worker runs as one rank of a job (tests/dist_util.h starts the
// ranks; tests/test_dist*.cpp check what they print and how they exit). A scenario returns the
// process exit code; it prints "ok" lines and details, and throws on a wrong result.
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember::testing::dist {

using Scenario = std::function<int(const std::vector<std::string>& args)>;
using Scenarios = std::map<std::string, Scenario>;

// One registration function per file (no static initialisers).
void add_collective_scenarios(Scenarios& s);
void add_ddp_scenarios(Scenarios& s);
void add_sync_batch_norm_scenarios(Scenarios& s);
void add_store_scenarios(Scenarios& s);
void add_nccl_scenarios(Scenarios& s);

// Throws std::runtime_error with `what` unless `ok`.
inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

}  // namespace ember::testing::dist
