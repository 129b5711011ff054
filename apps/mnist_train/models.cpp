#include "apps/mnist_train/models.h"

#include "core/error.h"

namespace mnist {

using namespace ember;

std::shared_ptr<nn::Module> make_model(ModelKind kind, const InputShape& in) {
  EMBER_CHECK(in.channels >= 1 && in.height >= 1 && in.width >= 1 && in.classes >= 2,
              "a model needs images of at "
              "least 1x1 and at least 2 classes; the data has ",
              in.channels, "x", in.height, "x", in.width, " images of ", in.classes, " class(es)");
  switch (kind) {
    case ModelKind::mlp:
      return nn::Sequential(nn::Flatten(), nn::Linear(in.channels * in.height * in.width, 128), nn::ReLU(),
                            nn::Linear(128, 64), nn::ReLU(), nn::Linear(64, in.classes))
          .ptr();
    case ModelKind::cnn: {
      const int64_t h = in.height / 2 / 2, w = in.width / 2 / 2;  // after two 2x2 max-pools (floor)
      EMBER_CHECK(h >= 1 && w >= 1, "--model cnn pools twice by 2: it needs images of at least 4x4, the data has ",
                  in.height, "x", in.width);
      return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in.channels, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                            nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                            nn::Flatten(), nn::Linear(64 * h * w, 128), nn::ReLU(), nn::Linear(128, in.classes))
          .ptr();
    }
    case ModelKind::fast: {
      EMBER_CHECK(in.height >= 4 && in.width >= 4,
                  "--model fast pools twice by 2: it needs images of at least 4x4, the data has ", in.height, "x",
                  in.width);
      auto block = [](int64_t cin, int64_t cout) {
        return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(cin, cout, 3).padding(1).bias(false)), nn::BatchNorm2d(cout),
                              nn::ReLU());
      };
      return nn::Sequential(block(in.channels, 32), nn::MaxPool2d(2), block(32, 64), nn::MaxPool2d(2), block(64, 128),
                            nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(128, in.classes))
          .ptr();
    }
  }
  EMBER_FAIL("unknown model kind ", static_cast<int>(kind));
}

int64_t state_size(ModelKind kind, const InputShape& in) {
  auto linear = [](int64_t n_in, int64_t n_out) { return n_in * n_out + n_out; };
  auto conv3x3 = [](int64_t cin, int64_t cout, bool bias) { return cin * cout * 9 + (bias ? cout : 0); };
  const int64_t k = in.classes;
  switch (kind) {
    case ModelKind::mlp: return linear(in.channels * in.height * in.width, 128) + linear(128, 64) + linear(64, k);
    case ModelKind::cnn:
      return conv3x3(in.channels, 32, true) + conv3x3(32, 64, true) +
             linear(64 * (in.height / 4) * (in.width / 4), 128) + linear(128, k);
    case ModelKind::fast: {
      // batch norm: weight, bias, running mean and variance per channel, and the batch count
      auto block = [&](int64_t cin, int64_t cout) { return conv3x3(cin, cout, false) + 4 * cout + 1; };
      return block(in.channels, 32) + block(32, 64) + block(64, 128) + linear(128, k);
    }
  }
  EMBER_FAIL("unknown model kind ", static_cast<int>(kind));
}

}  // namespace mnist
