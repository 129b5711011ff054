// SyncBatchNorm scenarios. Every rank builds the same deterministic full batch, runs
// dist::SyncBatchNorm on its shard (shards may be uneven, even empty) and checks it against plain
// nn::BatchNorm1d/2d on the FULL batch, computed locally with no communication:
//   outputs and input gradients on the rank's rows; weight/bias gradients summed over ranks (one
//   all_reduce here, as DDP would) equal to the full batch's; running statistics and
//   num_batches_tracked after each step; exactly one collective per forward and one per backward;
//   eval mode with no collective. In f64 (tight) and f32, 2-D/3-D/4-D, channels-last, no affine,
//   no running statistics, cumulative momentum, f16 input; and convert_sync_batchnorm on a small
//   Sequential (types replaced, state_dict keys and tensors kept, trains like the full batch).
//
//   sync_bn SIZES [cuda]     SIZES = each rank's rows, e.g. 3,5 (the world size must match);
//                            cuda: on cuda:LOCAL_RANK over the nccl backend (the module's
//                            CUDA kernels and NCCL; convert_sync_batchnorm stays on the CPU)
//   sync_bn_no_group         WORLD_SIZE > 1 without init_process_group: training is an error
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/autograd/node.h"
#include "core/rng.h"
#include "dist/process_group.h"
#include "dist/sync_batch_norm.h"
#include "kernels/functional.h"
#include "nn/nn.h"
#include "tests/dist/scenarios.h"

namespace ember::testing::dist {

namespace {

using namespace ember::dist;

std::vector<int64_t> parse_sizes(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

// Where the cases run: the CPU (gloo), or cuda:LOCAL_RANK (nccl).
Device g_dev = kCPU;

// The largest |got - want| / (atol + rtol |want|) seen by check_close since the last reset (printed
// per case: how close to its tolerance the case came).
double g_worst = 0;

// |got - want| <= atol + rtol |want| everywhere (and the same shape).
void check_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  expect(got.defined() && want.defined(), what + ": undefined tensor");
  expect(got.shape() == want.shape(), what + ": shape " + str(got.shape()) + " vs " + str(want.shape()));
  std::vector<double> g = got.cpu().to_vector<double>(), w = want.cpu().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    g_worst = std::max(g_worst, std::abs(g[i] - w[i]) / (atol + rtol * std::abs(w[i])));
    if (!(std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i])))
      throw std::runtime_error("check failed: " + what + ": element " + std::to_string(i) + " is " + str(g[i]) +
                               ", expected " + str(w[i]) + " (diff " + str(std::abs(g[i] - w[i])) + ")");
  }
}

// A deterministic tensor, the same on every rank: normal values, scaled, plus a per-channel offset
// (so means are far from 0 and differ per channel).
Tensor make(const Shape& shape, uint64_t seed, DType dt, double scale, double offset, double shift = 0) {
  manual_seed(seed);
  Tensor t = randn(shape, TensorOptions(DType::f64));
  Shape cs = Shape::filled(shape.size(), 1);
  cs[1] = shape[1];
  Tensor off = mul(arange(0, static_cast<double>(shape[1]), 1, TensorOptions(DType::f64)), offset).reshape(cs);
  return add(add(mul(t, scale), off), shift).to(dt).to(g_dev);
}

Tensor channels_last(const Tensor& x) { return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}); }

struct Case {
  std::string name;
  int dims = 4;  // 2, 3 or 4
  DType dtype = DType::f64;
  bool channels_last = false;
  bool affine = true;
  bool track = true;
  std::optional<double> momentum = 0.1;
  int steps = 2;
  DType param_dtype = DType::f64;  // the modules' dtype (f32 params with f16 input)
  double shift = 0;                // added to every input value: |mean| >> std
  double rtol = 0, atol = 0;       // 0: tol_for(dtype)
  bool input_grad = true;          // false: only weight/bias need gradients (no backward collective)
};

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType dt) {
  if (dt == DType::f64) return {1e-10, 1e-12};
  if (dt == DType::f32) return {2e-5, 2e-5};
  return {1e-3, 1e-3};  // f16 values (the statistics are f32 in both)
}

std::shared_ptr<nn::Module> make_reference(const Case& c, const nn::BatchNormOptions& o) {
  if (c.dims == 4) return nn::BatchNorm2d(o).ptr();
  return nn::BatchNorm1d(o).ptr();
}

// This rank's shard of a batch split as `sizes` (one size per rank): the full batch N, where the
// shard starts in it, and its length n.
struct Shard {
  int64_t N = 0, start = 0, n = 0;
};
Shard shard_of(const ProcessGroupPtr& pg, const std::vector<int64_t>& sizes) {
  Shard s;
  for (int k = 0; k < pg->size(); ++k) {
    if (k < pg->rank()) s.start += sizes[k];
    s.N += sizes[k];
  }
  s.n = sizes[pg->rank()];
  return s;
}

// One case: `steps` training steps then one eval forward, checked against the full batch.
void run_case(const ProcessGroupPtr& pg, const std::vector<int64_t>& sizes, const Case& c) {
  const int r = pg->rank(), W = pg->size();
  const Shard shard = shard_of(pg, sizes);
  const int64_t N = shard.N, start = shard.start, n = shard.n;
  const int64_t C = 3;
  Shape shape = c.dims == 4 ? Shape{N, C, 4, 5} : c.dims == 3 ? Shape{N, C, 6} : Shape{N, C};
  const Tol tol = c.rtol > 0 ? Tol{c.rtol, c.atol} : tol_for(c.dtype);
  g_worst = 0;
  const std::string tag = c.name + " (rank " + std::to_string(r) + ")";

  nn::BatchNormOptions o(C);
  o.momentum(c.momentum).affine(c.affine).track_running_stats(c.track);
  std::shared_ptr<nn::Module> ref = make_reference(c, o);
  auto& ref_bn = dynamic_cast<nn::BatchNormImplBase&>(*ref);
  // every other layer gets the default group; this one is given it explicitly
  SyncBatchNorm sync(SyncBatchNormOptions(o).process_group(c.dims == 3 ? pg : nullptr));
  ref->to(c.param_dtype);
  sync->to(c.param_dtype);
  ref->to(g_dev);
  sync->to(g_dev);
  if (c.affine) {
    autograd::NoGradGuard ng;
    ref_bn.weight.copy_(tensor({0.5, 1.25, -0.75}).to(c.param_dtype).to(g_dev));
    ref_bn.bias.copy_(tensor({0.1, -0.2, 0.3}).to(c.param_dtype).to(g_dev));
  }
  if (c.track) {
    autograd::NoGradGuard ng;
    ref_bn.running_mean.copy_(tensor({0.2, -0.1, 0.4}).to(c.param_dtype).to(g_dev));
    ref_bn.running_var.copy_(tensor({1.5, 0.7, 1.1}).to(c.param_dtype).to(g_dev));
  }
  // state_dicts interchange
  expect(sync->state_dict().keys() == ref->state_dict().keys(), tag + ": state_dict keys");
  sync->load_state_dict(ref->state_dict());

  for (int step = 0; step < c.steps; ++step) {
    const std::string st = tag + " step " + std::to_string(step);
    Tensor x = make(shape, 100 + step, c.dtype, 1.5, 2.0, c.shift);
    Tensor R = make(shape, 200 + step, DType::f64, 1.0, 0.3).to(c.param_dtype == DType::f64 ? DType::f64 : DType::f32);
    // reference: the full batch
    Tensor xf = x.detach();
    if (c.channels_last) xf = channels_last(xf);
    xf.requires_grad_(true);
    Tensor yf = ref->forward(xf);
    sum(mul(yf.to(R.dtype()), R)).backward();
    // this rank's shard
    Tensor xs = x.narrow(0, start, n).contiguous();
    if (c.channels_last) {
      xs = channels_last(xs);
      expect(n == 0 || xs.is_channels_last(), st + ": channels-last shard");
    }
    xs.requires_grad_(c.input_grad);
    const uint64_t before = pg->started();
    Tensor ys = sync->forward(xs);
    expect(pg->started() == before + (W > 1 ? 1 : 0),
           st + ": forward ran " + std::to_string(pg->started() - before) + " collectives");
    expect(ys.dtype() == c.dtype, st + ": output dtype");
    sum(mul(ys.to(R.dtype()), R.narrow(0, start, n))).backward();
    expect(pg->started() == before + (W > 1 ? (c.input_grad ? 2 : 1) : 0),
           st + ": forward + backward ran " + std::to_string(pg->started() - before) + " collectives");

    check_close(ys, yf.narrow(0, start, n), tol.rtol, tol.atol, st + ": output");
    if (c.input_grad)
      check_close(xs.grad(), xf.grad().narrow(0, start, n), tol.rtol, tol.atol, st + ": input gradient");
    else expect(!xs.grad().defined(), st + ": no input gradient");
    if (c.affine) {
      auto& s = *sync;
      for (auto [name, mine, want] : {std::tuple<const char*, Tensor, Tensor>{"weight", s.weight, ref_bn.weight},
                                      std::tuple<const char*, Tensor, Tensor>{"bias", s.bias, ref_bn.bias}}) {
        Tensor g = mine.grad().clone();
        expect(g.dtype() == mine.dtype(), st + ": " + name + " gradient dtype");
        pg->all_reduce(g, ReduceOp::kSum)->wait();  // what DDP does (with an average over ranks)
        check_close(g, want.grad(), tol.rtol, tol.atol, st + ": " + name + " gradient summed over ranks");
      }
    }
    if (c.track) {
      check_close(sync->running_mean, ref_bn.running_mean, tol.rtol, tol.atol, st + ": running_mean");
      check_close(sync->running_var, ref_bn.running_var, tol.rtol, tol.atol, st + ": running_var");
      expect(sync->num_batches_tracked.item() == ref_bn.num_batches_tracked.item() &&
                 sync->num_batches_tracked.item() == step + 1,
             st + ": num_batches_tracked");
    }
    sync->zero_grad();
    ref->zero_grad();
  }

  // eval: running statistics (or, without them, the local batch's), no collective
  sync->eval();
  ref->eval();
  if (!c.track && n <= 1) {  // batch statistics of a single row: an error in both, nothing to compare
    std::printf("  %s: ok\n", tag.c_str());
    return;
  }
  Tensor x = make(shape, 300, c.dtype, 1.5, 2.0, c.shift);
  Tensor xs = x.narrow(0, start, n).contiguous();
  if (c.channels_last) xs = channels_last(xs);
  const uint64_t before = pg->started();
  Tensor ys = sync->forward(xs);
  expect(pg->started() == before, tag + ": eval ran a collective");
  check_close(ys, ref->forward(xs), tol.rtol, tol.atol, tag + ": eval output");
  std::printf("  %s: ok (worst error %.3g of the tolerance rtol %g atol %g)\n", tag.c_str(), g_worst, tol.rtol,
              tol.atol);
}

// convert_sync_batchnorm on Conv2d, BatchNorm2d, ReLU, Flatten, Linear, BatchNorm1d: the converted
// model on the shards trains like the original on the full batch.
void run_convert(const ProcessGroupPtr& pg, const std::vector<int64_t>& sizes) {
  const int r = pg->rank();
  const Shard shard = shard_of(pg, sizes);
  const int64_t N = shard.N, start = shard.start, n = shard.n;
  auto build = [] {
    manual_seed(11);
    nn::Sequential s(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU(), nn::Flatten(),
                     nn::Linear(4 * 3 * 3, 5), nn::BatchNorm1d(5));
    s->to(DType::f64);
    return s;
  };
  nn::Sequential model = build(), ref = build();
  auto at = [&](size_t i) { return (*model)[i]; };
  TensorDict before_sd = model->state_dict();
  std::vector<Tensor> params_before = model->parameters();
  std::shared_ptr<nn::Module> converted = convert_sync_batchnorm(model.ptr(), pg);
  expect(converted.get() == model.ptr().get(), "convert returns the model itself");
  expect(at(1)->type_name() == "SyncBatchNorm" && at(5)->type_name() == "SyncBatchNorm",
         "convert: BatchNorm2d and BatchNorm1d replaced");
  expect(dynamic_cast<SyncBatchNormImpl*>(at(1).get()) != nullptr, "convert: Sequential's list updated");
  expect(model->named_children()[1].second == at(1), "convert: registration and list agree");
  expect(at(0)->type_name() == "Conv2d" && at(4)->type_name() == "Linear", "convert: other layers kept");
  TensorDict after_sd = model->state_dict();
  expect(after_sd.keys() == before_sd.keys(), "convert: state_dict keys unchanged");
  for (const auto& k : before_sd.keys())
    expect(after_sd.at(k).is_same(before_sd.at(k)), "convert: " + k + " is the same tensor");
  std::vector<Tensor> params_after = model->parameters();
  expect(params_after.size() == params_before.size(), "convert: parameter count");
  for (size_t i = 0; i < params_after.size(); ++i)
    expect(params_after[i].is_same(params_before[i]), "convert: parameter " + std::to_string(i) + " kept");
  std::ostringstream os;
  os << *model;
  expect(os.str().find("SyncBatchNorm") != std::string::npos, "convert: printed as SyncBatchNorm");

  for (int step = 0; step < 2; ++step) {
    const std::string st = "convert step " + std::to_string(step) + " (rank " + std::to_string(r) + ")";
    Tensor x = make({N, 2, 3, 3}, 400 + step, DType::f64, 1.0, 0.5);
    Tensor yf = ref->forward(x);
    Tensor R = make(yf.shape(), 500 + step, DType::f64, 1.0, 0.0);
    sum(mul(yf, R)).backward();
    Tensor ys = model->forward(x.narrow(0, start, n).contiguous());
    sum(mul(ys, R.narrow(0, start, n))).backward();
    check_close(ys, yf.narrow(0, start, n), 1e-10, 1e-12, st + ": output");
    TensorDict mp = model->named_parameters(), rp = ref->named_parameters();
    for (const auto& k : rp.keys()) {
      Tensor g = mp.at(k).grad().clone();
      pg->all_reduce(g, ReduceOp::kSum)->wait();
      check_close(g, rp.at(k).grad(), 1e-9, 1e-11, st + ": " + k + " gradient summed over ranks");
    }
    TensorDict mb = model->named_buffers(), rb = ref->named_buffers();
    for (const auto& k : rb.keys()) check_close(mb.at(k), rb.at(k), 1e-10, 1e-12, st + ": " + k);
    model->zero_grad();
    ref->zero_grad();
  }
  std::printf("  convert_sync_batchnorm (rank %d): ok\n", r);
}

int sync_bn(const std::vector<std::string>& args) {
  expect(!args.empty(), "sync_bn needs the shard sizes, e.g. 3,5");
  Options opt;
  if (args.size() > 1 && args[1] == "cuda") {
    const char* local = std::getenv("LOCAL_RANK");
    g_dev = Device(DeviceType::cuda, local != nullptr ? std::atoi(local) : 0);
    opt.backend = "nccl";
    opt.device = g_dev;
  }
  auto pg = init_process_group(opt);
  const std::vector<int64_t> sizes = parse_sizes(args[0]);
  expect(static_cast<int>(sizes.size()) == pg->size(),
         "sync_bn: " + std::to_string(sizes.size()) + " shard sizes for world size " + std::to_string(pg->size()));
  const std::vector<Case> cases = {
      {"4-D f64", 4, DType::f64},
      {"4-D f32", 4, DType::f32, false, true, true, 0.1, 2, DType::f32},
      {"4-D f64 channels-last", 4, DType::f64, true},
      {"4-D f32 channels-last", 4, DType::f32, true, true, true, 0.1, 2, DType::f32},
      {"2-D f64", 2, DType::f64},
      {"2-D f32", 2, DType::f32, false, true, true, 0.1, 2, DType::f32},
      {"3-D f64 (explicit group)", 3, DType::f64},
      {"4-D f64 no affine, no running stats", 4, DType::f64, false, false, false},
      {"4-D f64 input without grad", 4, DType::f64, false, true, true, 0.1, 1, DType::f64, 0, 0, 0, false},
      {"4-D f64 cumulative momentum", 4, DType::f64, false, true, true, std::nullopt, 3},
      {"4-D f16 input, f32 parameters", 4, DType::f16, false, true, true, 0.1, 2, DType::f32},
      // mean 1000 x std: sum-of-squares statistics in f32 would be off by percents here
      {"4-D f32 mean 1000, std 1.5", 4, DType::f32, false, true, true, 0.1, 2, DType::f32, 1000.0, 1e-4, 1e-3},
  };
  for (Case c : cases) {
    // On CUDA the statistics are f32 sums (the CPU kernels accumulate in double): at mean 1000 the
    // mean is off by a few f32 ulps of 1000 (6e-5 each), which shifts every xhat of the channel by
    // about 1e-4 / std, and a weight gradient (a sum of 160 dy xhat, dy ~ 0.3) by up to ~5e-3 on
    // either side. Against an f64 reference on the CPU both BatchNorm2d's and SyncBatchNorm's
    // CUDA weight gradients were that far off (-4.7047 and -4.7006 for -4.7013): f32 precision, not
    // a wrong formula.
    if (!g_dev.is_cpu() && c.shift != 0) {
      c.rtol = 1e-3;
      c.atol = 1e-2;
    }
    run_case(pg, sizes, c);
  }
  if (g_dev.is_cpu()) run_convert(pg, sizes);
  std::printf("ok: sync_bn on rank %d of %d (rows %s)\n", pg->rank(), pg->size(), args[0].c_str());
  return 0;
}

// No process group in a job of WORLD_SIZE > 1: training forward is an error naming the fix; eval
// needs no group.
int sync_bn_no_group(const std::vector<std::string>&) {
  SyncBatchNorm bn(4);
  Tensor x = randn({3, 4, 2, 2});
  bool threw = false;
  try {
    bn(x);
  } catch (const std::exception& e) {
    threw = std::string(e.what()).find("init_process_group") != std::string::npos;
    std::printf("training without a group: %s\n", e.what());
  }
  expect(threw, "training without a process group throws naming init_process_group");
  bn->eval();
  Tensor y = bn(x);
  expect(y.shape() == x.shape(), "eval without a group works");
  std::printf("ok: no group\n");
  return 0;
}

}  // namespace

void add_sync_batch_norm_scenarios(Scenarios& s) {
  s["sync_bn"] = sync_bn;
  s["sync_bn_no_group"] = sync_bn_no_group;
}

}  // namespace ember::testing::dist
