// dist::SyncBatchNorm and convert_sync_batchnorm. The multi-process checks run the "sync_bn"
// scenario (tests/dist/sync_batch_norm.cpp) on 1, 2 and 4 ranks over loopback: each rank compares
// its shard against plain BatchNorm on the full batch. The rest runs in this process: without a
// group SyncBatchNorm is BatchNorm, the conversion keeps names and tensors, bad input is reported.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <sstream>

#include "core/autograd/node.h"
#include "core/rng.h"
#include "dist/sync_batch_norm.h"
#include "kernels/functional.h"
#include "nn/nn.h"
#include "tests/dist_util.h"

using namespace ember;
namespace td = ember::testing::dist;

namespace {

void check_job(const std::vector<td::RankResult>& rs, int world_size) {
  INFO(td::describe(rs));
  REQUIRE(static_cast<int>(rs.size()) == world_size);
  for (const auto& r : rs) {
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("ok") != std::string::npos);
  }
}

td::Job job(int world_size, const std::string& scenario, std::vector<std::string> args = {}) {
  td::Job j;
  j.world_size = world_size;
  j.scenario = scenario;
  j.args = std::move(args);
  j.deadline_s = 60;
  j.env["EMBER_DIST_TIMEOUT"] = "30";
  return j;
}

bool launched_as_a_job() {
  const char* ws = std::getenv("WORLD_SIZE");
  return ws != nullptr && std::atoi(ws) > 1;
}

Tensor max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))); }

}  // namespace

TEST_CASE("dist: SyncBatchNorm matches BatchNorm on the full batch on 2 ranks with 3+5 rows (sync_bn)", "[dist]") {
  check_job(td::run_job(job(2, "sync_bn", {"3,5"})), 2);
}

TEST_CASE("dist: SyncBatchNorm matches BatchNorm on the full batch on 4 ranks with 0+3+2+3 rows (sync_bn)", "[dist]") {
  check_job(td::run_job(job(4, "sync_bn", {"0,3,2,3"})), 4);
}

TEST_CASE("dist: SyncBatchNorm in a group of 1 is BatchNorm with no collective (sync_bn)", "[dist]") {
  check_job(td::run_job(job(1, "sync_bn", {"5"})), 1);
}

TEST_CASE("dist: SyncBatchNorm without a process group is an error in a job of 2 ranks (sync_bn_no_group)", "[dist]") {
  check_job(td::run_job(job(2, "sync_bn_no_group")), 2);
}

TEST_CASE("dist: SyncBatchNorm without a group in a single process is exactly BatchNorm", "[dist]") {
  if (launched_as_a_job()) {
    WARN("skipped: this process was started with WORLD_SIZE > 1");
    return;
  }
  for (bool channels_last : {false, true}) {
    INFO("channels_last " << channels_last);
    manual_seed(4);
    nn::BatchNorm2d bn(nn::BatchNormOptions(3).momentum(0.2));
    dist::SyncBatchNorm sbn(dist::SyncBatchNormOptions(3).momentum(0.2));
    {
      autograd::NoGradGuard ng;
      bn->weight.copy_(tensor({0.5, 2.0, -1.0}));
      bn->bias.copy_(tensor({0.1, 0.2, 0.3}));
    }
    sbn->load_state_dict(bn->state_dict());
    Tensor x = add(randn({4, 3, 5, 5}), 1.5);
    if (channels_last) x = x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
    Tensor a = x.detach(), b = x.detach();
    a.requires_grad_(true);
    b.requires_grad_(true);
    Tensor w = randn({4, 3, 5, 5});
    sum(mul(bn(a), w)).backward();
    sum(mul(sbn(b), w)).backward();
    CHECK(max_abs_diff(a.grad(), b.grad()).item() == 0.0);
    CHECK(max_abs_diff(bn->weight.grad(), sbn->weight.grad()).item() == 0.0);
    CHECK(max_abs_diff(bn->bias.grad(), sbn->bias.grad()).item() == 0.0);
    CHECK(max_abs_diff(bn->running_mean, sbn->running_mean).item() == 0.0);
    CHECK(max_abs_diff(bn->running_var, sbn->running_var).item() == 0.0);
    CHECK(sbn->num_batches_tracked.item() == 1);
    bn->eval();
    sbn->eval();
    CHECK(max_abs_diff(bn(x), sbn(x)).item() == 0.0);
  }
}

TEST_CASE("dist: SyncBatchNorm options and names and printing and bad input", "[dist]") {
  dist::SyncBatchNorm sbn(dist::SyncBatchNormOptions(4).eps(1e-3).momentum(std::nullopt));
  nn::BatchNorm2d bn(nn::BatchNormOptions(4).eps(1e-3).momentum(std::nullopt));
  CHECK(sbn->state_dict().keys() == bn->state_dict().keys());
  CHECK(sbn->named_parameters().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(sbn->named_buffers().keys() == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  CHECK(sbn->type_name() == "SyncBatchNorm");
  CHECK(sbn->extra_repr() == bn->extra_repr());
  CHECK(sbn->group() == dist::default_group());
  dist::SyncBatchNorm plain(dist::SyncBatchNormOptions(2).affine(false).track_running_stats(false));
  CHECK(plain->state_dict().keys().empty());

  CHECK_THROWS_WITH(dist::SyncBatchNorm(0), Catch::Contains("num_features must be positive"));
  CHECK_THROWS_WITH(dist::SyncBatchNorm(dist::SyncBatchNormOptions(2).eps(0)), Catch::Contains("eps"));
  CHECK_THROWS_WITH(dist::SyncBatchNorm(dist::SyncBatchNormOptions(2).momentum(1.5)), Catch::Contains("momentum"));
  if (!launched_as_a_job()) {
    CHECK_THROWS_WITH(sbn(randn({4})), Catch::Contains("expects an input (N, C) or (N, C, *)"));
    CHECK_THROWS_WITH(sbn(randn({2, 3, 2, 2})), Catch::Contains("has 3 channels but the layer expects 4"));
    CHECK_THROWS_WITH(sbn(tensor_i64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4})), Catch::Contains("floating"));
  }
}

namespace {

// A module that keeps its own member handle to a BatchNorm (convert warns about it).
struct HeldImpl : nn::Module {
  HeldImpl() : Module("Held") { bn = register_module("bn", nn::BatchNorm2d(2)); }
  Tensor forward(const Tensor& x) override { return bn(x); }
  nn::BatchNorm2d bn{nullptr};
};

}  // namespace

TEST_CASE("dist: convert_sync_batchnorm replaces BatchNorm1d/2d and keeps names and tensors and options and mode",
          "[dist]") {
  manual_seed(9);
  nn::BatchNorm2d inner(nn::BatchNormOptions(4).eps(1e-4).momentum(0.3));
  nn::Sequential model(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU(),
                       nn::Residual(nn::Sequential(nn::Conv2d(nn::Conv2dOptions(4, 4, 1)), inner)),
                       nn::Checkpoint(nn::BatchNorm2d(4)), nn::Flatten(), nn::Linear(4 * 2 * 2, 6),
                       nn::BatchNorm1d(nn::BatchNormOptions(6).affine(false)));
  inner = nullptr;      // only the model holds it now
  (*model)[4]->eval();  // a layer in eval mode stays in eval mode
  model->to(DType::f64);
  // the original's outputs (single process, no group: SyncBatchNorm is BatchNorm)
  const TensorDict sd = model->state_dict();
  const std::vector<Tensor> params = model->parameters();
  std::ostringstream before;
  before << *model;

  auto converted = dist::convert_sync_batchnorm(model.ptr());
  CHECK(converted.get() == model.ptr().get());
  CHECK(model->state_dict().keys() == sd.keys());
  for (const auto& k : sd.keys()) CHECK(model->state_dict().at(k).is_same(sd.at(k)));
  const std::vector<Tensor> params_after = model->parameters();
  REQUIRE(params_after.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) CHECK(params_after[i].is_same(params[i]));
  int syncs = 0;
  for (const auto& [name, m] : model->named_modules()) {
    CHECK(dynamic_cast<nn::BatchNormImplBase*>(m.get()) == nullptr);
    if (auto* s = dynamic_cast<dist::SyncBatchNormImpl*>(m.get())) {
      ++syncs;
      CHECK(s->options.process_group() == nullptr);
      if (name == "3.body.1") {
        CHECK(s->options.eps() == 1e-4);
        CHECK(s->options.momentum() == 0.3);
      }
      if (name == "7") CHECK(!s->options.affine());
      CHECK(s->is_training() == (name != "4.module"));
    }
  }
  CHECK(syncs == 4);
  // the handles the containers keep point at the new layers
  auto& seq = *model;
  CHECK(dynamic_cast<dist::SyncBatchNormImpl*>(seq[1].get()) != nullptr);
  CHECK(dynamic_cast<dist::SyncBatchNormImpl*>(seq[7].get()) != nullptr);
  auto& res = seq.at<nn::ResidualImpl>(3);
  CHECK(dynamic_cast<dist::SyncBatchNormImpl*>(
            dynamic_cast<nn::SequentialImpl&>(*res.body).named_children()[1].second.get()) != nullptr);
  CHECK(dynamic_cast<dist::SyncBatchNormImpl*>(dynamic_cast<nn::SequentialImpl&>(*res.body)[1].get()) != nullptr);
  CHECK(dynamic_cast<dist::SyncBatchNormImpl*>(seq.at<nn::CheckpointImpl>(4).module.get()) != nullptr);
  std::ostringstream after;
  after << *model;
  CHECK(after.str().find("SyncBatchNorm") != std::string::npos);
  CHECK(after.str().find("BatchNorm2d") == std::string::npos);
  CHECK_THROWS_WITH(model->replace_module("nope", nn::ReLU().ptr()), Catch::Contains("no submodule named 'nope'"));

  // A BatchNorm at the top is returned converted; a process group given is kept.
  nn::BatchNorm1d top(5);
  auto t = dist::convert_sync_batchnorm(top.ptr());
  REQUIRE(dynamic_cast<dist::SyncBatchNormImpl*>(t.get()) != nullptr);
  CHECK(t->state_dict().at("weight").is_same(top->weight));

  // A custom module's member handle can not be redirected: the registration changes, and the
  // stale layer is still the one forward calls (reported on stderr).
  auto held = std::make_shared<HeldImpl>();
  dist::convert_sync_batchnorm(held);
  CHECK(held->named_children()[0].second->type_name() == "SyncBatchNorm");
  CHECK(held->bn->type_name() == "BatchNorm2d");
  CHECK(held->state_dict().at("bn.weight").is_same(held->bn->weight));  // the same tensors all the same

  if (!launched_as_a_job()) {
    // the converted model runs (single process: like the original)
    Tensor x = randn({2, 3, 2, 2}, TensorOptions(DType::f64));
    Tensor y = model->forward(x);
    CHECK(y.shape() == Shape{2, 6});
  }
}
