// The ablation: the same model and data trained for a fixed budget of optimizer steps, from a
// deliberately naive loop up, adding one well-known speed-up per rung, with throughput, speed-up
// over the baseline, GPU idle time, data wait and the accuracy reached, in one table.
#pragma once

#include "apps/mnist_train/trainer.h"

namespace mnist {

int run_ablation(const Options& base, ember::Device device, const Splits& splits);

}  // namespace mnist
