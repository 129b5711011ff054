#include "apps/ember_tune/pruner.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ember::tune {

PrunerKind parse_pruner(const std::string& name) {
  if (name == "none") return PrunerKind::none;
  if (name == "median") return PrunerKind::median;
  if (name == "asha") return PrunerKind::asha;
  EMBER_FAIL("unknown pruner '", name, "' (expected none, median or asha)");
}

bool should_prune(const PrunerOptions& o, const std::vector<double>& curve, int planned,
                  const std::vector<std::vector<double>>& others) {
  const int epoch = static_cast<int>(curve.size());
  if (o.kind == PrunerKind::none || epoch == 0 || epoch >= planned) return false;
  const size_t e = static_cast<size_t>(epoch - 1);
  std::vector<double> at;  // the others' values at this epoch
  for (const auto& c : others)
    if (c.size() > e && std::isfinite(c[e])) at.push_back(c[e]);
  const double mine = curve[e];
  if (!std::isfinite(mine)) return true;  // a NaN accuracy will not recover
  if (o.kind == PrunerKind::median) {
    if (epoch <= o.warmup || static_cast<int>(at.size()) < o.min_trials) return false;
    std::sort(at.begin(), at.end());
    const size_t n = at.size();
    const double median = n % 2 ? at[n / 2] : 0.5 * (at[n / 2 - 1] + at[n / 2]);
    const double best = *std::min_element(curve.begin(), curve.end());
    return best > median;
  }
  // ASHA: is this epoch a rung?
  long rung = o.min_epochs;
  while (rung < epoch) rung *= o.eta;
  if (rung != epoch) return false;
  at.push_back(mine);
  std::sort(at.begin(), at.end());
  const size_t keep = std::max<size_t>(1, at.size() / static_cast<size_t>(o.eta));
  return mine > at[keep - 1];
}

}  // namespace ember::tune
