// SIGINT and SIGTERM during training.
//
// Note [stopping on a signal]: the first SIGINT/SIGTERM asks the run to stop after the current
// step: the partial epoch is dropped (no checkpoint for it), the outputs are written for the
// completed epochs (JSONL summary, plot, profile) and the program exits 128 + the signal number
// (130, 143). A second signal exits at once. Under --distributed the ranks agree on stopping at
// each log interval (an all_reduce next to the loss's), so they all leave after the same step.
// Before training, a rank waiting in the rendezvous (for rank 0's store or the other ranks) asks
// stop_signal() every 100 ms (dist::Options::stop_requested) and exits 130 / 143 at once, instead
// of waiting out EMBER_DIST_TIMEOUT (10 minutes by default).
#pragma once

namespace mnist {

void install_stop_handlers();
int stop_signal();  // 0 while no stop was asked for

}  // namespace mnist
