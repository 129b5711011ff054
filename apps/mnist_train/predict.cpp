#include "apps/mnist_train/predict.h"

#include <algorithm>
#include <cstdio>
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

namespace {
std::string describe_inputs(const InputShape& in) {
  return str(shape_text(in), " inputs and ", in.classes, " classes");
}
}  // namespace

int predict(const Options& o, Device device) {
  const std::string& ck = o.eval_only;
  io::SafetensorsFile f = io::load_safetensors(ck, kCPU);
  // the model as trained: its kind, input shape, classes and normalisation
  const std::optional<TrainedOn> trained = trained_on(f.metadata, "--predict " + ck);
  EMBER_CHECK(trained.has_value(), "--predict: ", ck, " records no input shape, classes or normalisation (a ",
              "checkpoint saved by an older mnist_train, or not a training checkpoint); they are needed to predict");
  const InputShape& in = trained->shape;
  const std::vector<std::string>& classes = trained->classes;
  const std::vector<double>& mean = trained->mean;
  const std::vector<double>& stdev = trained->std;
  // The recorded shape and classes against the tensors, before a model of that size is made.
  const ModelKind kind = model_named(trained->model);
  int64_t held = 0;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("model.", 0) == 0) held += t.numel();
  EMBER_CHECK(held == state_size(kind, in), "--predict: ", ck, " records ", describe_inputs(in), " for --model ",
              trained->model, ", which has ", state_size(kind, in), " values, but its model tensors hold ", held,
              "; the checkpoint is damaged");
  auto model = make_model(kind, in);
  TensorDict state;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("model.", 0) == 0) state.insert(name.substr(6), t);
  check_module_state(state, *model, "model.", "--eval-only " + ck);
  model->load_state_dict(state, true);
  model->to(device);
  model->eval();
  autograd::NoGradGuard ng;

  std::printf("predicting with %s (%s, %s images, %zu classes)\n", ck.c_str(), trained->model.c_str(),
              shape_text(in).c_str(), classes.size());
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
