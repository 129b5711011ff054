// DDP scenarios (filled in with dist/ddp.h).
#include "tests/dist/scenarios.h"

namespace ember::testing::dist {
void add_ddp_scenarios(Scenarios&) {}
}  // namespace ember::testing::dist
