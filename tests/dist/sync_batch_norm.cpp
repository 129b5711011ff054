// SyncBatchNorm scenarios (filled in with dist/sync_batch_norm.h).
#include "tests/dist/scenarios.h"

namespace ember::testing::dist {
void add_sync_batch_norm_scenarios(Scenarios&) {}
}  // namespace ember::testing::dist
