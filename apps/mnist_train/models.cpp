#include "apps/mnist_train/models.h"

#include "core/error.h"

namespace mnist {

using namespace ember;

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "mlp") {
    return nn::Sequential(nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64), nn::ReLU(),
                          nn::Linear(64, 10))
        .ptr();
  }
  if (name == "cnn") {
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10))
        .ptr();
  }
  if (name == "fast") {
    auto block = [](int64_t in, int64_t out) {
      return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1).bias(false)), nn::BatchNorm2d(out),
                            nn::ReLU());
    };
    return nn::Sequential(block(1, 32), nn::MaxPool2d(2), block(32, 64), nn::MaxPool2d(2), block(64, 128),
                          nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(128, 10))
        .ptr();
  }
  EMBER_FAIL("unknown model '", name, "' (expected mlp, cnn or fast)");
}

bool model_wants_images(const std::string& name) { return name != "mlp"; }

}  // namespace mnist
