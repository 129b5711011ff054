// What mnist_train checks about its outputs before a run: every path can be written, no two
// outputs name one file, no output names an input, and each output is this run's alone until it
// ends (Note [side outputs] in outputs.h says what happens when a write fails later).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "apps/mnist_train/options.h"
#include "io/file_lock.h"

namespace mnist {

// Two outputs naming one file (after links; hard links too), or an output naming an input: --data
// (the file, or anything inside the data directory), the --resume or --eval-only checkpoint (which
// --save may replace: a resumed run saves over its checkpoint), a --predict image. The message of
// the usage error (exit 2), or empty. Character devices (/dev/null) may be shared.
std::string output_conflict(const Options& o);

// Each output's path: its directory exists and is writable, the name fits, it is not a directory
// (a --tensorboard directory is made if missing). Throws naming the flag.
void check_output_paths(const Options& o);

// Locks every output for this run (io::FileLock beside it): a second run naming one of them as any
// of its outputs fails at start-up naming this run's PID, instead of replacing this run's files or
// having its own replaced. Devices are not locked. Held until the returned locks are destroyed.
std::vector<std::unique_ptr<ember::io::FileLock>> lock_outputs(const Options& o);

}  // namespace mnist
