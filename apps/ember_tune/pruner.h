// Pruners: stop a trial whose per-epoch curve says it will not win, from its --log JSONL as epochs arrive (the runner
// sends it SIGTERM). Curves here are losses (lower is better): a study that maximises hands them negated, like the
// samplers.
//
//   median  after `warmup` epochs, prune when the trial's best so far is worse than the median of
//           the other trials' values at the same epoch (only once `min_trials` others reached it)
//   asha    successive halving, asynchronous: rungs at min_epochs x eta^k epochs; a trial that
//           reaches a rung goes on only if it is in the best 1/eta of every trial that reached
//           that rung so far (at least the best one), so no trial waits for a rung to fill
#pragma once

#include <string>
#include <vector>

namespace ember::tune {

enum class PrunerKind { none, median, asha };
PrunerKind parse_pruner(const std::string& name);  // throws ember::Error for an unknown name

struct PrunerOptions {
  PrunerKind kind = PrunerKind::none;
  int warmup = 1;      // median: epochs before any pruning
  int min_trials = 3;  // median: other trials needed at an epoch
  int eta = 3;         // asha: reduction factor
  int min_epochs = 1;  // asha: the first rung
};

// Whether to stop the trial whose curve (one loss per finished epoch) is `curve` now, with `others` the curves of
// every other trial so far (finished, pruned and running). `planned` is the trial's epoch count: a trial at its last
// epoch is never pruned (it is done anyway).
bool should_prune(const PrunerOptions& o, const std::vector<double>& curve, int planned,
                  const std::vector<std::vector<double>>& others);

}  // namespace ember::tune
