// The end-of-run summary: totals, time to the best accuracy, per-class accuracy and the confusion
// matrix; and the SVG curves.
#pragma once

#include <string>
#include <vector>

#include "apps/mnist_train/trainer.h"

namespace mnist {

void print_summary(const Options& o, const RunResult& r, const std::vector<std::string>& classes,
                   const std::string& device);
void print_confusion(const EvalResult& e, const std::vector<std::string>& classes);
void write_plot(const std::string& path, const RunResult& r);

}  // namespace mnist
