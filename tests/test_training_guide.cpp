// The training loop of docs/training.md, at a small size: it must compile against the real API,
// train (the loss falls on a learnable task), and resume from its checkpoint.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "ember.h"

using namespace ember;

namespace {

struct NetImpl : nn::Module {
  NetImpl() : Module("Net") {
    body = register_module("body", nn::Sequential(nn::Flatten(), nn::Linear(64, 64), nn::ReLU(), nn::Dropout(0.1),
                                                  nn::Linear(64, 32), nn::GELU()));
    head = register_module("head", nn::Linear(nn::LinearOptions(32, 4).bias(true)));
  }
  Tensor forward(const Tensor& x) override { return head(body(x)); }
  nn::Sequential body{nullptr};
  nn::Linear head{nullptr};
};
EMBER_MODULE(Net);

// Runs the guide's loop for `epochs` epochs from whatever `path` holds; returns the last epoch's
// mean loss and the final accuracy.
std::pair<double, double> train(const std::string& path, int64_t epochs) {
  const Device dev = kCPU;
  manual_seed(0);
  const int64_t n = 512, batch = 32, steps_per_epoch = n / batch;
  // A learnable task: the label is which quarter of the pixels has the largest sum.
  Tensor images = rand({n, 1, 8, 8}).to(dev);
  Tensor labels = argmax(sum(images.reshape({n, 4, 16}), {2}), 1);

  Net net;
  net->to(dev);
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : net->named_parameters()) (name.ends_with("bias") ? no_decay : decay).push_back(p);
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(decay);
  groups.emplace_back(no_decay, std::make_unique<optim::AdamOptions>(optim::AdamWOptions(1e-3).weight_decay(0)));
  optim::AdamW opt(groups, optim::AdamWOptions(1e-3).weight_decay(0.05));
  optim::OneCycleLR sched(opt, optim::OneCycleLROptions(1e-2, 6 * steps_per_epoch).pct_start(0.3));
  nn::CrossEntropyLoss loss_fn(nn::CrossEntropyLossOptions().label_smoothing(0.1));

  TrainingCheckpoint ckpt;
  ckpt.model(*net).optimizer(opt).scheduler(sched);
  TrainingProgress progress;
  if (std::filesystem::exists(path)) progress = ckpt.load(path);

  double last_loss = 0;
  for (int64_t epoch = progress.epoch; epoch < epochs; ++epoch) {
    net->train();
    Tensor loss_sum = zeros({}, dev);
    for (int64_t s = progress.step; s < steps_per_epoch; ++s) {
      Tensor x = images.slice(0, s * batch, (s + 1) * batch);
      Tensor y = labels.slice(0, s * batch, (s + 1) * batch);
      Tensor loss = loss_fn(net(x), y);
      opt.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(net->parameters(), 1.0);
      opt.step();
      sched.step();
      loss_sum = add(loss_sum, loss.detach());
    }
    last_loss = loss_sum.item() / static_cast<double>(steps_per_epoch);
    progress.step = 0;
    ckpt.save(path, {epoch + 1, 0});
  }
  net->eval();
  autograd::NoGradGuard no_grad;
  Tensor correct = zeros({}, DType::i64).to(dev);
  for (int64_t s = 0; s < steps_per_epoch; ++s) {
    Tensor x = images.slice(0, s * batch, (s + 1) * batch);
    Tensor y = labels.slice(0, s * batch, (s + 1) * batch);
    correct = add(correct, sum(cast(eq(argmax(net(x), 1), y), DType::i64)));
  }
  return {last_loss, correct.item() / static_cast<double>(n)};
}

}  // namespace

TEST_CASE("training guide: the loop of docs/training.md trains and resumes", "[guide][checkpoint]") {
  const std::string dir = std::string(EMBER_BINARY_DIR) + "/test_training_guide." + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  // 6 epochs straight
  auto [loss6, acc6] = train(dir + "/a.safetensors", 6);
  // 3 epochs, then "restart the program" and continue to 6 from the checkpoint
  train(dir + "/b.safetensors", 3);
  auto [loss6b, acc6b] = train(dir + "/b.safetensors", 6);
  WARN("training guide loop: final epoch loss " << loss6 << ", accuracy " << acc6);
  CHECK(loss6 == loss6b);  // bit-identical resume
  CHECK(acc6 == acc6b);
  CHECK(acc6 > 0.6);  // well above the 0.25 of chance
  std::filesystem::remove_all(dir);
}
