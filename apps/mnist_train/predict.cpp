#include "apps/mnist_train/predict.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "apps/mnist_train/models.h"
#include "apps/mnist_train/splits.h"
#include "ckpt/training_checkpoint.h"
#include "core/autograd/node.h"
#include "core/error.h"
#include "data/image_decode.h"
#include "io/safetensors.h"
#include "kernels/functional.h"
#include "nn/nn.h"

namespace mnist {

using namespace ember;

int predict(const Options& o, Device device) {
  const std::string& ck = o.eval_only;
  io::SafetensorsFile f = io::load_safetensors(ck, kCPU);
  auto meta = [&](const char* key) {
    auto it = f.metadata.find(std::string("run.") + key);
    EMBER_CHECK(it != f.metadata.end(), "--predict: ", ck, " records no '", "run.", key,
                "' (a checkpoint saved by an older mnist_train, or not a training checkpoint); the model's input "
                "shape, normalisation and classes are needed to predict");
    return it->second;
  };
  // the model as trained: its kind, input shape, classes and normalisation
  InputShape in;
  const std::string shape = meta("input_shape");
  EMBER_CHECK(std::sscanf(shape.c_str(), "%ldx%ldx%ld", &in.channels, &in.height, &in.width) == 3, "--predict: ", ck,
              ": 'run.input_shape' is '", shape, "', expected CxHxW");
  std::vector<std::string> classes;
  try {
    classes = nlohmann::json::parse(meta("classes")).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception&) {
    EMBER_FAIL("--predict: ", ck, ": 'run.classes' is not a JSON list of names");
  }
  in.classes = static_cast<int64_t>(classes.size());
  const std::vector<double> mean = parse_doubles(meta("normalize_mean")), stdev = parse_doubles(meta("normalize_std"));
  EMBER_CHECK(mean.size() == static_cast<size_t>(in.channels) && stdev.size() == mean.size(), "--predict: ", ck,
              ": the normalisation does not hold one value per channel");
  auto model = make_model(meta("model"), in);
  TensorDict state;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("model.", 0) == 0) state.insert(name.substr(6), t);
  check_module_state(state, *model, "model.", "--eval-only " + ck);
  model->load_state_dict(state, true);
  model->to(device);
  model->eval();
  autograd::NoGradGuard ng;

  std::printf("predicting with %s (%s, %s images, %zu classes)\n", ck.c_str(), meta("model").c_str(), shape.c_str(),
              classes.size());
  for (const std::string& path : o.predict) {
    // the image as the training data was: converted to the model's channels, resized to its size
    data::Image img = data::load_image(path, in.channels == 1 ? 1 : 3);
    if (img.height != in.height || img.width != in.width) img = data::resize_image(img, in.height, in.width);
    Tensor x = img.to_tensor().reshape({1, in.channels, in.height, in.width}).to(device);
    Tensor prob = softmax(model->forward(normalize_u8(x, mean, stdev)).to(DType::f32), 1).to(kCPU);
    const std::vector<float> p = prob.to_vector<float>();
    std::vector<size_t> order(p.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    std::printf("%s: %s %.2f%%", path.c_str(), classes[order[0]].c_str(), 100.0 * p[order[0]]);
    for (size_t i = 1; i < std::min<size_t>(3, order.size()); ++i)
      std::printf("%s %s %.2f%%", i == 1 ? "  (then" : ",", classes[order[i]].c_str(), 100.0 * p[order[i]]);
    std::printf("%s\n", order.size() > 1 ? ")" : "");
  }
  return 0;
}

}  // namespace mnist
