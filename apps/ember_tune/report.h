// What a study shows: the table of trials, the best configuration as a mnist_train command line, the compute the
// pruner saved, and the SVG plots (best so far against trials and against wall time; one slice plot per parameter:
// the objective of each trial against that parameter).
#pragma once

#include <string>

#include "apps/ember_tune/runner.h"
#include "apps/ember_tune/study.h"

namespace ember::tune {

std::string trials_table(const StudyFile& study);
// "" when no trial completed.
std::string best_command(const StudyFile& study, const std::string& mnist_train);
// "pruned 5 of 20 trials: 31 of 100 planned epochs not run (31 %)"; "" without pruned trials.
std::string pruning_summary(const StudyFile& study);
// Writes PREFIX-history.svg and PREFIX-slices.svg.
void write_study_plots(const StudyFile& study, const std::string& prefix);

}  // namespace ember::tune
