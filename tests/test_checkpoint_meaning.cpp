// Checkpoints mean what they say (Note [checkpoints mean what they say] in ckpt/): well-formed but
// wrong checkpoints given to mnist_train --resume and --eval-only are one-line errors naming the
// tensor, field or flag; a resume honours the command line or refuses it; a diverged run stops with
// an error and saves no non-finite checkpoint.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "ckpt/training_checkpoint.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "kernels/functional.h"
#include "nn/linear.h"
#include "optim/optim.h"
#include "tests/mnist_train_util.h"

using namespace ember;
using namespace ember::testing::app;

namespace {

// Rewrites the checkpoint `src` into `dst` after `edit`.
void rewrite(const std::string& src, const std::string& dst, const std::function<void(StateDict&)>& edit) {
  io::SafetensorsFile f = io::load_safetensors(src);
  StateDict sd{std::move(f.tensors), std::move(f.metadata)};
  edit(sd);
  io::save_safetensors(dst, sd.tensors, sd.metadata);
}

TensorDict without(const TensorDict& d, const std::function<bool(const std::string&)>& drop) {
  TensorDict out;
  for (const auto& [k, t] : d)
    if (!drop(k)) out.insert(k, t);
  return out;
}

// A copy of `t` with element 0 set to `v` (in f64, then back to t's dtype).
Tensor with_first(const Tensor& t, double v) {
  std::vector<double> x = t.to(DType::f64).contiguous().to_vector<double>();
  x[0] = v;
  return tensor(x, t.shape()).to(t.dtype());
}

std::string first_key(const StateDict& sd, const std::string& prefix, const std::string& suffix = "") {
  for (const auto& [k, t] : sd.tensors)
    if (k.rfind(prefix, 0) == 0 && k.size() >= suffix.size() &&
        k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0)
      return k;
  FAIL("no tensor " << prefix << "*" << suffix);
  return "";
}

}  // namespace

TEST_CASE("checkpoints: corrupt but well-formed checkpoints are one-line errors naming the tensor or field",
          "[mnist_train][checkpoint]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  const std::string good = tmp.file("good.safetensors"), bad = tmp.file("bad.safetensors");
  auto args = [&](std::vector<std::string> more) {
    more.insert(more.end(), {"--scheduler", "none"});
    return quick(d, more);
  };
  require_success(run_app(args({"--epochs", "1", "--save", good}), tmp.path()));
  StateDict ref;
  {
    io::SafetensorsFile f = io::load_safetensors(good);
    ref = StateDict{std::move(f.tensors), std::move(f.metadata)};
  }
  const std::string weight = first_key(ref, "model.", "weight");
  const std::string sq = first_key(ref, "optimizer.state.", "exp_avg_sq");
  const std::string avg = first_key(ref, "optimizer.state.", ".exp_avg");
  // the good one resumes (the baseline of everything below)
  require_success(run_app(args({"--epochs", "2", "--resume", good}), tmp.path()));

  struct Case {
    const char* what;
    std::function<void(StateDict&)> edit;
    std::string needle;
    bool eval_only_too;
  };
  const std::vector<Case> cases = {
      {"a weight's dtype relabelled (f32 bits as i32)",
       [&](StateDict& s) {
         Tensor w = s.tensors.at(weight);
         std::vector<float> f = w.to_vector<float>();
         std::vector<int32_t> bits(f.size());
         std::memcpy(bits.data(), f.data(), f.size() * 4);
         Tensor t = empty(w.shape(), TensorOptions(DType::i32));
         std::memcpy(t.data_ptr(), bits.data(), bits.size() * 4);
         s.tensors.at(weight) = t;
       },
       "tensor '" + weight + "' is i32 but the model's is f32", true},
      {"a weight in f64", [&](StateDict& s) { s.tensors.at(weight) = s.tensors.at(weight).to(DType::f64); },
       "tensor '" + weight + "' is f64 but the model's is f32", true},
      {"a NaN weight", [&](StateDict& s) { s.tensors.at(weight) = with_first(s.tensors.at(weight), NAN); },
       "tensor '" + weight + "' holds non-finite values (1 NaN", true},
      {"an inf weight", [&](StateDict& s) { s.tensors.at(weight) = with_first(s.tensors.at(weight), -INFINITY); },
       "tensor '" + weight + "' holds non-finite values (0 NaN, 1 inf", true},
      {"the optimizer state missing in whole",
       [&](StateDict& s) {
         s.tensors = without(s.tensors, [](const std::string& k) { return k.rfind("optimizer.state.", 0) == 0; });
       },
       "no optimizer state", false},
      {"one optimizer tensor missing",
       [&](StateDict& s) { s.tensors = without(s.tensors, [&](const std::string& k) { return k == sq; }); },
       "lacks state 'exp_avg_sq'", false},
      {"a negative second moment", [&](StateDict& s) { s.tensors.at(sq) = with_first(s.tensors.at(sq), -1.0); },
       "'" + sq.substr(10) + "' holds a negative value", false},
      {"a NaN second moment", [&](StateDict& s) { s.tensors.at(sq) = with_first(s.tensors.at(sq), NAN); },
       "'" + sq.substr(10) + "' holds a non-finite value", false},
      {"an inf first moment", [&](StateDict& s) { s.tensors.at(avg) = with_first(s.tensors.at(avg), INFINITY); },
       "'" + avg.substr(10) + "' holds a non-finite value", false},
      {"optimizer state in another dtype", [&](StateDict& s) { s.tensors.at(avg) = s.tensors.at(avg).to(DType::f64); },
       "'" + avg.substr(10) + "' is f64 but the parameter is f32", false},
      {"an absurd epoch", [&](StateDict& s) { s.metadata["progress.epoch"] = "99999999999"; },
       "'progress.epoch' is 99999999999", false},
      {"a negative epoch", [&](StateDict& s) { s.metadata["progress.epoch"] = "-3"; }, "'progress.epoch' is negative",
       false},
      {"a negative step", [&](StateDict& s) { s.metadata["progress.step"] = "-1"; }, "'progress.step' is negative",
       false},
      {"a step beyond the run", [&](StateDict& s) { s.metadata["progress.step"] = "5000"; }, "'progress.step' is 5000",
       false},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    rewrite(good, bad, c.edit);
    RunResult r = run_app(args({"--epochs", "2", "--resume", bad}), tmp.path());
    check_error(r, 1, c.needle);
    CHECK(r.err.find("1215752191") == std::string::npos);
    CHECK(r.out.find("epoch 2/2") == std::string::npos);
    if (c.eval_only_too) check_error(run_app(args({"--eval-only", bad}), tmp.path()), 1, c.needle);
  }
}

TEST_CASE("checkpoints: a resume refuses flags it cannot honour and prints the optimizer's lr",
          "[mnist_train][checkpoint]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  const std::string ck = tmp.file("ck.safetensors"), flat = tmp.file("flat.safetensors"),
                    old = tmp.file("old.safetensors");
  require_success(run_app(quick(d, {"--epochs", "2", "--save", ck}), tmp.path()));
  io::SafetensorsFile f = io::load_safetensors(ck);
  CHECK(f.metadata.at("run.lr") == "0.0030000000000000001");
  CHECK(f.metadata.at("run.scheduler") == "onecycle");
  CHECK(f.metadata.at("run.batch_size") == "16");
  CHECK(f.metadata.at("run.epochs") == "2");

  struct Case {
    std::vector<std::string> flags;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"--lr", "0.01"}, "--lr 0.01 differs from the checkpoint's 0.003"},
      {{"--batch-size", "32"}, "--batch-size 32 differs from the checkpoint's 16"},
      {{"--scheduler", "cosine"}, "--scheduler cosine differs from the checkpoint's onecycle"},
      {{"--optimizer", "sgd"}, "--optimizer sgd differs from the checkpoint's adamw"},
      {{"--weight-decay", "0.1"}, "--weight-decay 0.1 differs from the checkpoint's 0.0001"},
      {{"--grad-accum", "2"}, "--grad-accum 2 differs from the checkpoint's 1"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> a = {"--epochs", "2", "--resume", ck};
    a.insert(a.end(), c.flags.begin(), c.flags.end());
    // quick() passes --batch-size 16; CLI11 takes one value per flag, so a different one replaces it
    std::vector<std::string> q = quick(d, a);
    if (c.flags[0] == "--batch-size") q.erase(q.begin() + 7, q.begin() + 9);
    check_error(run_app(q, tmp.path()), 1, c.needle);
  }
  // --epochs with a schedule laid out over the run: refused (today's "OneCycleLR: tried to step" later)
  check_error(run_app(quick(d, {"--epochs", "5", "--resume", ck}), tmp.path()), 1,
              "--epochs 5 differs from the checkpoint's 2");
  check_error(run_app(quick(d, {"--epochs", "2", "--max-steps", "30", "--resume", ck}), tmp.path()), 1,
              "--max-steps 30 differs from the checkpoint's 0");
  // the same flags: fine (the run is finished: nothing left to train)
  RunResult same = run_app(quick(d, {"--epochs", "2", "--resume", ck}), tmp.path());
  require_success(same);
  CHECK(same.out.find("nothing left to train") != std::string::npos);
  // an epoch beyond the run the checkpoint recorded
  rewrite(ck, old, [](StateDict& s) { s.metadata["progress.epoch"] = "3"; });
  check_error(run_app(quick(d, {"--epochs", "2", "--resume", old}), tmp.path()), 1,
              "'progress.epoch' is 3, beyond the saved run's 2 epochs");

  // --scheduler none: the run can be extended (--epochs honoured), --lr still refused
  require_success(
      run_app(quick(d, {"--epochs", "1", "--scheduler", "none", "--lr", "0.002", "--save", flat}), tmp.path()));
  RunResult more =
      run_app(quick(d, {"--epochs", "2", "--scheduler", "none", "--lr", "0.002", "--resume", flat}), tmp.path());
  require_success(more);
  CHECK(more.out.find("epoch 2/2") != std::string::npos);
  CHECK(more.out.find("lr 0.002\n") != std::string::npos);
  check_error(run_app(quick(d, {"--epochs", "2", "--scheduler", "none", "--resume", flat}), tmp.path()), 1,
              "--lr 0.003 differs from the checkpoint's 0.002");

  // an older checkpoint without the recorded flags still loads; the epoch lines print the lr the
  // optimizer actually uses (the checkpoint's), not the ignored --lr
  rewrite(flat, old, [](StateDict& s) {
    for (auto it = s.metadata.begin(); it != s.metadata.end();)
      it = it->first.rfind("run.", 0) == 0 ? s.metadata.erase(it) : std::next(it);
  });
  RunResult o = run_app(quick(d, {"--epochs", "2", "--scheduler", "none", "--lr", "0.5", "--resume", old}), tmp.path());
  require_success(o);
  INFO(o.out);
  CHECK(o.out.find("epoch 2/2") != std::string::npos);
  CHECK(o.out.find("lr 0.002\n") != std::string::npos);
  CHECK(o.out.find("lr 0.5") == std::string::npos);
}

TEST_CASE("checkpoints: a diverged run stops with an error naming the step and saves nothing non-finite",
          "[mnist_train][checkpoint]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  const std::string ck = tmp.file("ck.safetensors"), log = tmp.file("log.jsonl");
  const std::vector<std::string> blowup = {"--optimizer", "sgd",  "--momentum", "0",
                                           "--scheduler", "none", "--lr",       "1e30"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = blowup;
    a.insert(a.end(), more.begin(), more.end());
    return quick(d, a);
  };
  RunResult r = run_app(with({"--epochs", "3", "--save", ck, "--log", log}), tmp.path());
  check_error(r, 1, "training diverged: the loss was NaN or inf for 1 consecutive step at step 2");
  CHECK(r.out.find("epoch 1/3") == std::string::npos);
  CHECK(!fs::exists(ck));  // never a non-finite checkpoint
  const std::vector<std::string> ls = lines_of(read_file(log));
  REQUIRE(!ls.empty());
  CHECK(nlohmann::json::parse(ls.back())["status"] == "diverged");
  // N consecutive steps
  r = run_app(with({"--epochs", "3", "--max-nonfinite-steps", "4", "--log-interval", "1"}), tmp.path());
  check_error(r, 1, "for 4 consecutive steps at step 5 (epoch 1; --max-nonfinite-steps 4)");
  // more bad steps allowed than the epoch has: the save at its end refuses the non-finite weights
  r = run_app(with({"--epochs", "3", "--max-nonfinite-steps", "1000", "--save", ck}), tmp.path());
  check_error(r, 1, "holds NaN or inf after epoch 1");
  CHECK(r.err.find("not saving it to " + ck) != std::string::npos);
  CHECK(!fs::exists(ck));
  // a bad value of the flag is a usage error
  check_error(run_app(quick(d, {"--max-nonfinite-steps", "0"}), tmp.path()), 2, "--max-nonfinite-steps");
}

TEST_CASE("checkpoints: the library rejects a wrong dtype and missing optimizer state", "[checkpoint]") {
  manual_seed(3);
  auto net = std::make_shared<nn::LinearImpl>(3, 2);
  optim::Adam opt(net->parameters(), optim::AdamOptions(0.1));
  sum(net->forward(ones({4, 3}))).backward();
  opt.step();
  TrainingCheckpoint ck;
  ck.model(*net).optimizer(opt).info({{"lr", "0.1"}});
  StateDict sd = ck.collect({1, 1});
  CHECK(sd.metadata.at("run.lr") == "0.1");
  {
    StateDict s = sd;
    s.tensors.at("model.weight") = s.tensors.at("model.weight").to(DType::f64);
    CHECK_THROWS_WITH(ck.restore(s), Catch::Contains("tensor 'model.weight' is f64 but the model's is f32"));
  }
  {
    StateDict s = sd;
    s.tensors = without(s.tensors, [](const std::string& k) { return k.rfind("optimizer.state.", 0) == 0; });
    CHECK_THROWS_WITH(ck.restore(s), Catch::Contains("no optimizer state") && Catch::Contains("step 1"));
    s.metadata["progress.step"] = "0";  // before the first step there is none: fine
    CHECK(ck.restore(s).step == 0);
  }
  {
    TrainingProgress p = ck.restore(sd);
    CHECK(p.run.at("lr") == "0.1");
  }
}

TEST_CASE("checkpoints: a resume on other data, another seed or split is refused, naming each difference",
          "[mnist_train][checkpoint]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data"), bigger = tmp.file("bigger"), relabelled = tmp.file("relabelled");
  write_synthetic_set(d, false);
  write_synthetic_set(bigger, false, 340);
  write_synthetic_set(relabelled, false);
  {  // the same images and sizes, one training label changed
    Synthetic train = make_synthetic(300, 3, 1);
    train.labels[7] = static_cast<uint8_t>((train.labels[7] + 1) % 3);
    write_file(relabelled + "/train-labels-idx1-ubyte", labels_idx(train), false);
  }
  const std::string ck = tmp.file("ck.safetensors"), flat = tmp.file("flat.safetensors");
  require_success(run_app(quick(d, {"--epochs", "2", "--max-steps", "20", "--save", ck}), tmp.path()));
  io::SafetensorsFile f = io::load_safetensors(ck);
  CHECK(f.metadata.at("run.seed") == "0");
  CHECK(f.metadata.at("run.data_train_images") == "300");
  CHECK(f.metadata.at("run.steps_per_epoch") == "17");  // 270 training images in batches of 16
  CHECK(f.metadata.at("run.total_steps") == "20");

  const std::vector<std::string> resume = {"--epochs", "2", "--max-steps", "20", "--resume", ck};
  auto with = [&](const std::string& data, std::vector<std::string> more) {
    std::vector<std::string> a = resume;
    a.insert(a.end(), more.begin(), more.end());
    return quick(data, a);
  };
  check_error(run_app(with(d, {"--seed", "1"}), tmp.path()), 1,
              "--seed 1 differs from the checkpoint's 0 (the seed decides the validation split");
  check_error(run_app(with(d, {"--val-split", "0.2"}), tmp.path()), 1,
              "--val-split 0.2 differs from the checkpoint's 0.1");
  // a bigger dataset: the size (the steps per epoch follow from it and are not repeated)
  RunResult big = run_app(with(bigger, {}), tmp.path());
  check_error(big, 1, "--data: the training images 340 differs from the checkpoint's 300");
  CHECK(big.err.find("steps per epoch") == std::string::npos);
  check_error(run_app(with(relabelled, {}), tmp.path()), 1, "--data: the labels' checksum");
  // two differences: both named, with both values, in one message
  RunResult two = run_app(with(d, {"--seed", "3", "--val-split", "0.2"}), tmp.path());
  check_error(two, 1, "--seed 3 differs from the checkpoint's 0");
  CHECK(two.err.find("--val-split 0.2 differs from the checkpoint's 0.1") != std::string::npos);
  CHECK(two.err.find("resume with --seed 0 --val-split 0.1") != std::string::npos);
  // the same run continues
  require_success(run_app(with(d, {}), tmp.path()));
  // --scheduler none: extendable, but still the same data and seed
  require_success(run_app(quick(d, {"--epochs", "1", "--scheduler", "none", "--save", flat}), tmp.path()));
  require_success(run_app(quick(d, {"--epochs", "2", "--scheduler", "none", "--resume", flat}), tmp.path()));
  check_error(run_app(quick(bigger, {"--epochs", "2", "--scheduler", "none", "--resume", flat}), tmp.path()), 1,
              "--data: the training images 340 differs");
}
