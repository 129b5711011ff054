// mnist_train --predict IMAGE... --eval-only CKPT: classifies image files with a trained model. The
// checkpoint records everything needed (the model, its input shape, the normalisation and the class
// names), so no --data is read.
#pragma once

#include "apps/mnist_train/options.h"
#include "core/device.h"

namespace mnist {

// Prints one line per image: the predicted class, its probability and the top 3. Returns the exit
// code; throws ember::Error naming the checkpoint or the image on bad input.
int predict(const Options& o, ember::Device device);

}  // namespace mnist
