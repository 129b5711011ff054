// The models mnist_train trains, sized for the data: C x H x W images of K classes (1 x 28 x 28
// and 10 for MNIST-format sets).
//   mlp   (C*H*W)-128-64-K with ReLU: the classic feed-forward baseline
//   cnn   conv C->32 3x3 pad 1, ReLU, max-pool 2, conv 32->64 3x3 pad 1, ReLU, max-pool 2, flatten,
//         linear 64*(H/4)*(W/4)->128, ReLU, linear 128->K
//   fast  tuned for time-to-accuracy: three 3x3 conv blocks (32, 64, 128 channels) with batch norm,
//         no conv bias, max-pool after the first two, global average pooling, one linear layer.
//         Batch norm lets it take a high one-cycle learning rate; global pooling keeps the head at
//         128*K + K parameters whatever the image size; ~93k parameters in all, ~92% on
//         Fashion-MNIST in three epochs.
// Each model's first op (after the Flatten view) is a linear or a conv, which autocast lowers to
// its dtype: so with --amp the trainer normalises the images straight to that dtype (trainer.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "apps/mnist_train/options.h"
#include "nn/nn.h"

namespace mnist {

struct InputShape {
  int64_t channels = 1, height = 28, width = 28;
  int64_t classes = 10;
};

std::shared_ptr<ember::nn::Module> make_model(ModelKind kind, const InputShape& in = {});

// How many values make_model(kind, in)'s state dict holds (parameters and buffers), computed
// without making it: predict.cpp checks a checkpoint's recorded input shape against its tensors
// before a model of that size is allocated.
int64_t state_size(ModelKind kind, const InputShape& in);

}  // namespace mnist
