// --distributed: before the first collective, every rank checks that all ranks run the same job.
//
// Ranks started with different models, datasets, batch sizes or step counts used to train on
// silently with averaged gradients of different batches, or to die in Gloo's transport thread
// (SIGABRT: a message larger than the buffer posted for it). Each rank now contributes a small
// fixed-size fingerprint of its run (all_gather of int64 fields, the same size whatever differs),
// and every rank stops with the same message naming the first field that differs, the ranks and
// their values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace mnist {

struct RunField {
  std::string name;                     // what the user would change, e.g. "--batch-size"
  int64_t value = 0;                    // numbers as they are; names as their index in `names`
  std::vector<std::string> names = {};  // when set, value indexes it (for the message)
};

// All ranks' fields, compared with rank 0's; throws ember::Error naming the first difference.
// Every rank reaches the same verdict (they all see the same table).
void check_ranks_agree(ember::dist::ProcessGroup& pg, const std::vector<RunField>& fields, ember::Device device);

}  // namespace mnist
