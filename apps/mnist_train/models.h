// The models mnist_train trains.
//   mlp   784-128-64-10 with ReLU: the classic feed-forward baseline
//   cnn   conv 1->32 3x3 pad 1, ReLU, max-pool 2, conv 32->64 3x3 pad 1, ReLU, max-pool 2, flatten,
//         linear 3136->128, ReLU, linear 128->10
//   fast  tuned for time-to-accuracy: three 3x3 conv blocks (32, 64, 128 channels) with batch norm,
//         no conv bias, max-pool after the first two, global average pooling, one linear layer.
//         Batch norm lets it take a high one-cycle learning rate; global pooling keeps the head at
//         1290 parameters; ~93k parameters in all, ~92% on Fashion-MNIST in three epochs.
#pragma once

#include <memory>
#include <string>

#include "nn/nn.h"

namespace mnist {

std::shared_ptr<ember::nn::Module> make_model(const std::string& name);
// The input shape a model takes per sample: [784] for the mlp (flattened), [1, 28, 28] otherwise.
bool model_wants_images(const std::string& name);

}  // namespace mnist
