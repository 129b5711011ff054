// How mnist_train treats the files a run writes besides its exit code.
//
// Note [side outputs]: --log, --tensorboard, --plot, --profile and --save are side outputs of a
// run. Their paths are checked, and the files locked for the run, before anything trains
// (output_checks.h); a failure later (a full disk, /dev/full, an I/O error) never stops the
// training: it is reported once, as one line on stderr naming the flag, the path and the error,
// nothing more is written to that output, and the program exits 1 at the end. Files are never
// left empty or half-written: --plot, --profile and --save are replaced atomically
// (io::AtomicFile), --log and --tensorboard write each record whole or not at all
// (io::AppendFile).
#pragma once

#include <string>

namespace mnist {

// Reports a side output's failure (one line on stderr) and counts it for the exit code.
void output_failed(const std::string& flag, const std::string& path, const std::string& what);
int output_failures();

}  // namespace mnist
