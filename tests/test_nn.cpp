// nn/: module machinery (names, counts, registration errors, train/eval, to(), state_dict
// round trips and strict loading), initialisation statistics, the layers, and activation
// checkpointing (same gradients, lower peak memory).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <sstream>

#include "core/autograd/node.h"
#include "core/rng.h"
#include "core/storage.h"
#include "kernels/functional.h"
#include "nn/nn.h"

using namespace ember;

namespace {

struct MlpImpl : nn::Module {
  MlpImpl() : Module("Mlp") {
    fc1 = register_module("fc1", nn::Linear(nn::LinearOptions(8, 16)));
    act = register_module("act", nn::ReLU());
    fc2 = register_module("fc2", nn::Linear(nn::LinearOptions(16, 4).bias(false)));
    scale = register_parameter("scale", ones({4}));
    steps = register_buffer("steps", zeros({}, DType::i64));
    cache = register_buffer("cache", zeros({2}), /*persistent=*/false);
  }
  Tensor forward(const Tensor& x) override { return mul(fc2(act(fc1(x))), scale); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::ReLU act{nullptr};
  Tensor scale, steps, cache;
};
EMBER_MODULE(Mlp);

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double var_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size());
}

}  // namespace

TEST_CASE("nn module parameter names, counts, buffers and children", "[nn]") {
  manual_seed(1);
  Mlp net;
  std::vector<std::string> names = net->named_parameters().keys();
  CHECK(names == std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight"});
  CHECK(net->parameters().size() == 4);
  CHECK(net->num_parameters() == 4 + 8 * 16 + 16 + 16 * 4);
  CHECK(net->named_buffers().keys() == std::vector<std::string>{"steps", "cache"});
  CHECK(net->state_dict().keys() == std::vector<std::string>{"scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight"});
  CHECK(net->children().size() == 3);
  std::vector<std::string> mods;
  for (const auto& [n, m] : net->named_modules()) mods.push_back(n + ":" + m->type_name());
  CHECK(mods == std::vector<std::string>{":Mlp", "fc1:Linear", "act:ReLU", "fc2:Linear"});
  for (const Tensor& p : net->parameters()) CHECK(p.requires_grad());
  CHECK(!net->steps.requires_grad());
  CHECK(net->fc1->weight.shape() == Shape{16, 8});
  CHECK(!net->fc2->bias.defined());
  // forward and backward reach every parameter
  Tensor y = net(randn({5, 8}));
  CHECK(y.shape() == Shape{5, 4});
  sum(y).backward();
  for (const auto& [n, p] : net->named_parameters()) {
    INFO(n);
    CHECK(p.grad().defined());
  }
  net->zero_grad();
  for (const Tensor& p : net->parameters()) CHECK(!p.grad().defined());
  // registration errors name the problem
  nn::Module m("M");
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_WITH(m.register_parameter("w", zeros({2})), Catch::Contains("'w' is already registered"));
  CHECK_THROWS_WITH(m.register_buffer("w", zeros({2})), Catch::Contains("already a parameter"));
  CHECK_THROWS_WITH(m.register_parameter("a.b", zeros({2})), Catch::Contains("must not contain '.'"));
  CHECK_THROWS_WITH(m.register_module("x", std::shared_ptr<nn::Module>()), Catch::Contains("is empty"));
  CHECK_THROWS_WITH(m.forward(zeros({1})), Catch::Contains("no single-tensor forward"));
}

TEST_CASE("nn tied parameters appear once in parameters() but under both names in state_dict", "[nn]") {
  auto a = std::make_shared<nn::LinearImpl>(4, 4);
  nn::Sequential seq(a, nn::ReLU(), a);
  CHECK(seq->parameters().size() == 2);
  CHECK(seq->state_dict().size() == 4);
  CHECK(seq->named_parameters().keys() == std::vector<std::string>{"0.weight", "0.bias"});
}

TEST_CASE("nn Linear uses PyTorch's default initialisation (kaiming-uniform a=sqrt(5), bias bound)", "[nn]") {
  manual_seed(123);
  nn::Linear fc(nn::LinearOptions(400, 300));
  const double bound = 1.0 / std::sqrt(400.0);
  std::vector<double> w = fc->weight.to_vector<double>(), b = fc->bias.to_vector<double>();
  double lo = *std::min_element(w.begin(), w.end()), hi = *std::max_element(w.begin(), w.end());
  CHECK(lo >= -bound);
  CHECK(hi < bound);
  CHECK(lo < -0.99 * bound);  // the whole interval is used
  CHECK(hi > 0.99 * bound);
  CHECK(std::fabs(mean_of(w)) < 0.01 * bound);
  CHECK(var_of(w) == Approx(bound * bound / 3).epsilon(0.02));  // U(-b, b) has variance b^2 / 3
  for (double x : b) CHECK(std::fabs(x) <= bound);
  CHECK(var_of(b) == Approx(bound * bound / 3).epsilon(0.25));
  // the initialisers themselves
  Tensor t = empty({256, 128, 3, 3});
  auto [fi, fo] = nn::init::calculate_fan_in_and_fan_out(t);
  CHECK(fi == 128 * 9);
  CHECK(fo == 256 * 9);
  nn::init::kaiming_normal_(t, 0, nn::init::FanMode::fan_in, nn::init::Nonlinearity::relu);
  CHECK(std::sqrt(var_of(t.to_vector<double>())) == Approx(std::sqrt(2.0 / (128 * 9))).epsilon(0.01));
  nn::init::xavier_uniform_(t);
  CHECK(var_of(t.to_vector<double>()) == Approx(2.0 / ((128 + 256) * 9)).epsilon(0.01));
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::tanh) == Approx(5.0 / 3));
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::leaky_relu, std::sqrt(5.0)) == Approx(std::sqrt(1.0 / 3)));
  Tensor v = empty({3});
  CHECK_THROWS_WITH(nn::init::kaiming_uniform_(v), Catch::Contains("fewer than 2 dimensions"));
  // same seed, same weights
  manual_seed(123);
  nn::Linear again(nn::LinearOptions(400, 300));
  CHECK(again->weight.to_vector<float>() == fc->weight.to_vector<float>());
}

TEST_CASE("nn train/eval propagate, Flatten, Identity, Residual, activations, Sequential", "[nn]") {
  nn::Sequential seq(nn::Flatten(), nn::Linear(12, 6), nn::GELU(), nn::Identity(), nn::Linear(6, 6), nn::SiLU());
  CHECK(seq->size() == 6);
  CHECK(seq->is_training());
  seq->eval();
  for (const auto& c : seq->children()) CHECK(!c->is_training());
  seq->train();
  for (const auto& c : seq->children()) CHECK(c->is_training());
  Tensor x = randn({2, 3, 4});
  Tensor y = seq(x);
  CHECK(y.shape() == Shape{2, 6});
  // the same computation written out
  auto& l1 = seq->at<nn::LinearImpl>(1);
  auto& l2 = seq->at<nn::LinearImpl>(4);
  Tensor want = silu(linear(gelu(linear(x.reshape({2, 12}), l1.weight, l1.bias)), l2.weight, l2.bias));
  CHECK(y.to_vector<float>() == want.to_vector<float>());
  CHECK_THROWS_WITH(seq->at<nn::ReLUImpl>(1), Catch::Contains("is a Linear"));
  CHECK_THROWS_WITH((*seq)[9], Catch::Contains("out of range"));

  nn::Residual res(nn::Sequential(nn::Linear(5, 5), nn::ReLU()));
  Tensor r = randn({3, 5});
  CHECK(res->named_parameters().keys() == std::vector<std::string>{"body.0.weight", "body.0.bias"});
  Tensor got = res(r), expect = add(res->body->forward(r), r);
  CHECK(got.to_vector<float>() == expect.to_vector<float>());
  nn::Residual bad(nn::Linear(5, 3));
  CHECK_THROWS_WITH(bad(r), Catch::Contains("shortcut"));
  nn::Residual proj(nn::Linear(5, 3), nn::Linear(5, 3));
  CHECK(proj(r).shape() == Shape{3, 3});

  nn::Flatten f(nn::FlattenOptions().start_dim(0).end_dim(1));
  CHECK(f(zeros({2, 3, 4})).shape() == Shape{6, 4});
  CHECK(nn::ReLU()(tensor({-1.0, 2.0})).to_vector<double>() == std::vector<double>{0, 2});
}

// A Linear that doubles its output: a subclass, whose forward Sequential must run as written.
struct DoubledLinearImpl : nn::LinearImpl {
  using LinearImpl::LinearImpl;
  Tensor forward(const Tensor& x) override { return mul(LinearImpl::forward(x), 2.0); }
};

namespace {

// y, dx and every parameter's gradient of net at x, with gy as y's gradient.
std::vector<Tensor> outputs_and_grads(nn::Sequential& net, const Tensor& x, const Tensor& gy) {
  Tensor xi = x.detach().requires_grad_(true);
  net->zero_grad();
  Tensor y = net(xi);
  y.backward(gy);
  std::vector<Tensor> r{y.detach(), xi.grad()};
  for (const Tensor& p : net->parameters()) r.push_back(p.grad());
  return r;
}

// conv, batch norm, a ReLU when `relu`, then a 2x2 MaxPool2d or (average) an AdaptiveAvgPool2d(1);
// nested: the batch norm (and relu) end a block and the pool follows it (mnist_train's fast model).
nn::Sequential bn_block_then_pool(bool average, bool relu, bool nested) {
  nn::Sequential block(nn::Conv2d(nn::Conv2dOptions(2, 3, 3).padding(1).bias(false)), nn::BatchNorm2d(3));
  if (relu) block->push_back(nn::ReLU());
  nn::Sequential out = block;
  if (nested) {
    out = nn::Sequential();  // an empty Sequential (one holder argument would copy the holder)
    out->push_back(block);
  }
  if (average) out->push_back(nn::AdaptiveAvgPool2d(1));
  else out->push_back(nn::MaxPool2d(2));
  return out;
}

// Two copies of make()'s net, the second without fuse_pool: the first ends in fused_node, the
// second in plain_node, and on h (with gy) both give the same outputs, gradients and buffers bit
// for bit, then the same eval outputs.
void check_pool_fusion(const std::function<nn::Sequential()>& make, const Tensor& h, const Tensor& gy,
                       const std::string& fused_node, const std::string& plain_node) {
  nn::Sequential fused = make(), plain = make();
  plain->load_state_dict(fused->state_dict());
  plain->fuse_pool = false;
  CHECK(fused(h).grad_fn()->name() == fused_node);
  CHECK(plain(h).grad_fn()->name() == plain_node);
  std::vector<Tensor> a = outputs_and_grads(fused, h, gy), b = outputs_and_grads(plain, h, gy);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("result " << i << " (0: y, 1: dx, then the parameters' grads)");
    CHECK(a[i].to_vector<float>() == b[i].to_vector<float>());
  }
  // the running statistics moved alike, and eval normalises with them alike
  for (const auto& [name, t] : fused->named_buffers()) {
    INFO(name);
    CHECK(t.to(DType::f64).to_vector<double>() == plain->named_buffers().at(name).to(DType::f64).to_vector<double>());
  }
  fused->eval();
  plain->eval();
  CHECK(fused(h).to_vector<float>() == plain(h).to_vector<float>());
}

}  // namespace

// Sequential's fusion (Note [fused activations] in nn/sequential.h).
TEST_CASE("nn Sequential runs a Linear and the ReLU after it as one linear, with the same results", "[nn]") {
  manual_seed(5);
  auto make = [] {
    return nn::Sequential(nn::Flatten(), nn::Linear(12, 8), nn::ReLU(), nn::ReLU(), nn::Linear(8, 6), nn::ReLU(),
                          nn::Linear(6, 3));
  };
  nn::Sequential fused = make(), plain = make();
  plain->load_state_dict(fused->state_dict());
  plain->fuse_activations = false;
  Tensor x = randn({5, 3, 4}, DType::f64);
  for (nn::Sequential* s : {&fused, &plain}) (*s)->to(DType::f64);
  Tensor gy = randn({5, 3}, DType::f64);
  std::vector<Tensor> a = outputs_and_grads(fused, x, gy), b = outputs_and_grads(plain, x, gy);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("result " << i << " (0: y, 1: dx, then the parameters' grads)");
    std::vector<double> va = a[i].to_vector<double>(), vb = b[i].to_vector<double>();
    REQUIRE(va.size() == vb.size());
    for (size_t j = 0; j < va.size(); ++j) CHECK(va[j] == Approx(vb[j]).margin(1e-12));
  }
  // the graph's last node: linear's when fused, relu's when not
  nn::Sequential pair(nn::Linear(4, 4), nn::ReLU());
  Tensor h = randn({2, 4});
  CHECK(pair(h).grad_fn()->name() == "linearBackward");
  pair->fuse_activations = false;
  CHECK(pair(h).grad_fn()->name() == "reluBackward");
  // two Linears in a row, a ReLU between or not, run as one mlp op (Note [fused MLP stacks])
  nn::Sequential stack(nn::Linear(4, 5), nn::ReLU(), nn::Linear(5, 3));
  CHECK(stack(h).grad_fn()->name() == "mlpBackward");
  stack->fuse_mlp = false;
  CHECK(stack(h).grad_fn()->name() == "linearBackward");
  // a subclass of Linear is not fused: its own forward runs
  nn::Sequential sub(std::make_shared<DoubledLinearImpl>(4, 4), nn::ReLU());
  auto& d = sub->at<DoubledLinearImpl>(0);
  Tensor want = relu(mul(linear(h, d.weight, d.bias), 2.0));
  CHECK(sub(h).to_vector<float>() == want.to_vector<float>());
}

TEST_CASE("nn Sequential runs a ReLU and the MaxPool2d after it as one max_pool2d, bit for bit", "[nn]") {
  manual_seed(6);
  auto make = [] {
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(4, 6, 3).padding(1)), nn::ReLU(),
                          nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)), nn::Flatten(),
                          nn::Linear(6 * 2 * 2, 3));
  };
  nn::Sequential fused = make(), plain = make();
  plain->load_state_dict(fused->state_dict());
  plain->fuse_activations = false;
  Tensor x = randn({3, 1, 8, 8});
  Tensor gy = randn({3, 3});
  std::vector<Tensor> a = outputs_and_grads(fused, x, gy), b = outputs_and_grads(plain, x, gy);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("result " << i << " (0: y, 1: dx, then the parameters' grads)");
    CHECK(a[i].to_vector<float>() == b[i].to_vector<float>());  // the same ops, the same order
  }
  // a ReLU that ends a nested block (mnist_train's fast model) fuses with the pool after the block
  auto make_blocks = [] {
    auto block = [](int64_t cin, int64_t cout) {
      return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(cin, cout, 3).padding(1).bias(false)), nn::BatchNorm2d(cout),
                            nn::ReLU());
    };
    return nn::Sequential(block(1, 4), nn::MaxPool2d(2), block(4, 6), nn::MaxPool2d(2), nn::Flatten(),
                          nn::Linear(6 * 2 * 2, 3));
  };
  nn::Sequential bf = make_blocks(), bp = make_blocks();
  bp->load_state_dict(bf->state_dict());
  bp->fuse_activations = false;
  std::vector<Tensor> c = outputs_and_grads(bf, x, gy), d = outputs_and_grads(bp, x, gy);
  REQUIRE(c.size() == d.size());
  for (size_t i = 0; i < c.size(); ++i) {
    INFO("blocks: result " << i);
    CHECK(c[i].to_vector<float>() == d[i].to_vector<float>());
  }
  // the pool's node follows the conv's directly when fused (no relu node between)
  nn::Sequential pair(nn::ReLU(), nn::MaxPool2d(2));
  Tensor h = randn({1, 2, 4, 4}).requires_grad_(true);
  CHECK(pair(h).grad_fn()->next_edges.at(0).fn->name() == "AccumulateGrad");
  pair->fuse_activations = false;
  CHECK(pair(h).grad_fn()->next_edges.at(0).fn->name() == "reluBackward");
  nn::Sequential nested(nn::Sequential(nn::Identity(), nn::ReLU()), nn::MaxPool2d(2));
  CHECK(nested(h).grad_fn()->next_edges.at(0).fn->name() == "AccumulateGrad");
}

TEST_CASE("nn Sequential runs a Conv2d, a ReLU or not, and a MaxPool2d as one conv2d_max_pool2d, bit for bit", "[nn]") {
  manual_seed(7);
  Tensor h = randn({2, 2, 6, 6}).requires_grad_(true);
  for (bool relu : {true, false}) {
    INFO("relu " << relu);
    auto make = [relu] {
      nn::Sequential s(nn::Conv2d(nn::Conv2dOptions(2, 3, 3).padding(1)));
      if (relu) s->push_back(nn::ReLU());
      s->push_back(nn::MaxPool2d(2));
      return s;
    };
    nn::Sequential fused = make(), plain = make();
    plain->load_state_dict(fused->state_dict());
    plain->fuse_pool = false;
    CHECK(fused(h).grad_fn()->name() == "conv2d_max_pool2dBackward");
    CHECK(plain(h).grad_fn()->name() == "max_pool2dBackward");
    Tensor gy = randn({2, 3, 3, 3});
    std::vector<Tensor> a = outputs_and_grads(fused, h, gy), b = outputs_and_grads(plain, h, gy);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("result " << i << " (0: y, 1: dx, then the parameters' grads)");
      CHECK(a[i].to_vector<float>() == b[i].to_vector<float>());  // the same ops, the same order
    }
  }
}

TEST_CASE("nn Sequential runs a BatchNorm2d, a ReLU or not, and a MaxPool2d as one batch_norm_max_pool2d", "[nn]") {
  manual_seed(8);
  Tensor h = randn({3, 2, 6, 6}).requires_grad_(true);
  for (bool relu : {true, false}) {
    for (bool nested : {false, true}) {
      INFO("relu " << relu << ", nested " << nested);
      auto make = [relu, nested] { return bn_block_then_pool(false, relu, nested); };
      check_pool_fusion(make, h, randn({3, 3, 3, 3}), "batch_norm_max_pool2dBackward", "max_pool2dBackward");
    }
  }
}

TEST_CASE("nn Sequential runs a BatchNorm2d, a ReLU or not, and a global AdaptiveAvgPool2d as one op", "[nn]") {
  manual_seed(11);
  Tensor h = randn({3, 2, 5, 5}).requires_grad_(true);
  for (bool relu : {true, false}) {
    for (bool nested : {false, true}) {
      INFO("relu " << relu << ", nested " << nested);
      auto make = [relu, nested] { return bn_block_then_pool(true, relu, nested); };
      check_pool_fusion(make, h, randn({3, 3, 1, 1}), "batch_norm_global_avg_pool2dBackward",
                        "adaptive_avg_pool2dBackward");
    }
  }
  // an average to anything but 1x1 stays a layer of its own
  nn::Sequential other(nn::BatchNorm2d(2), nn::ReLU(), nn::AdaptiveAvgPool2d(2));
  CHECK(other(h).grad_fn()->name() == "adaptive_avg_pool2dBackward");
}

TEST_CASE("nn state_dict round trip, strict and non-strict loading, shape mismatch", "[nn]") {
  manual_seed(3);
  Mlp a, b;
  CHECK(a->fc1->weight.to_vector<float>() != b->fc1->weight.to_vector<float>());
  Tensor w_handle = b->fc1->weight;
  b->load_state_dict(a->state_dict());
  for (const auto& [n, t] : a->state_dict()) {
    INFO(n);
    CHECK(b->state_dict().at(n).to_vector<double>() == t.to_vector<double>());
  }
  CHECK(w_handle.is_same(b->fc1->weight));  // loaded in place: member handles stay valid
  Tensor x = randn({3, 8});
  CHECK(a(x).to_vector<float>() == b(x).to_vector<float>());

  TensorDict missing;
  for (const auto& [n, t] : a->state_dict())
    if (n != "fc2.weight") missing.insert(n, t);
  CHECK_THROWS_WITH(b->load_state_dict(missing), Catch::Contains("missing key(s): \"fc2.weight\""));
  b->load_state_dict(missing, /*strict=*/false);
  TensorDict extra = a->state_dict();
  extra.insert("fc3.weight", zeros({1}));
  CHECK_THROWS_WITH(b->load_state_dict(extra), Catch::Contains("unexpected key(s): \"fc3.weight\""));
  TensorDict wrong = a->state_dict();
  wrong.at("fc1.bias") = zeros({17});
  std::vector<float> before = b->fc1->weight.to_vector<float>();
  CHECK_THROWS_WITH(b->load_state_dict(wrong, false),
                    Catch::Contains("size mismatch for: \"fc1.bias: the checkpoint has shape [17], the module [16]\""));
  CHECK(b->fc1->weight.to_vector<float>() == before);  // nothing was copied
  // dtype conversion on load
  TensorDict f64;
  for (const auto& [n, t] : a->state_dict()) f64.insert(n, is_floating(t.dtype()) ? t.to(DType::f64) : t);
  b->load_state_dict(f64);
  CHECK(b->fc1->weight.dtype() == DType::f32);
}

TEST_CASE("nn to(dtype) converts floating parameters in place, keeps integer buffers", "[nn]") {
  Mlp net;
  Tensor w = net->fc1->weight;
  sum(net(randn({2, 8}))).backward();
  net->to(DType::f64);
  CHECK(w.dtype() == DType::f64);  // the same handle
  CHECK(net->fc1->weight.dtype() == DType::f64);
  CHECK(net->fc1->weight.grad().dtype() == DType::f64);
  CHECK(net->steps.dtype() == DType::i64);
  CHECK(net->fc1->weight.requires_grad());
  net->zero_grad();
  Tensor y = net(randn({2, 8}, DType::f64));
  CHECK(y.dtype() == DType::f64);
  sum(y).backward();  // the gradient accumulator follows the new dtype
  CHECK(net->fc1->weight.grad().dtype() == DType::f64);
  net->to(kCPU);
}

TEST_CASE("nn printing: PyTorch-style tree and a summary with parameter counts", "[nn]") {
  nn::Sequential seq(nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10));
  std::ostringstream os;
  os << *seq;
  CHECK(os.str() ==
        "Sequential(\n"
        "  (0): Linear(in_features=784, out_features=128, bias=true)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=128, out_features=10, bias=true)\n"
        ")");
  std::string s = seq->summary();
  CHECK_THAT(s, Catch::Contains("100,480"));
  CHECK_THAT(s, Catch::Contains("1,290"));
  CHECK_THAT(s, Catch::Contains("parameters: 101,770 (trainable 101,770)"));
}

TEST_CASE("nn activation checkpointing: same gradients, lower peak memory", "[nn][checkpoint]") {
  // 4 segments of 4 x (Linear + GELU): without checkpointing all 32 activations stay alive until
  // backward; with it, the 4 segment inputs plus one segment's 8 recomputed activations.
  const int segments = 4, layers = 4;
  const int64_t width = 256, batch = 1024;
  auto make = [&](bool ckpt) {
    manual_seed(11);
    nn::Sequential net;
    for (int i = 0; i < segments; ++i) {
      nn::Sequential block;
      for (int j = 0; j < layers; ++j) {
        block->push_back(nn::Linear(width, width));
        block->push_back(nn::GELU());
      }
      if (ckpt) net->push_back(nn::Checkpoint(block));
      else net->push_back(block);
    }
    return net;
  };
  manual_seed(5);
  Tensor x = randn({batch, width});
  auto run = [&](nn::Sequential& net, size_t* peak) {
    reset_cpu_peak_stats();
    size_t base = cpu_allocator_stats().allocated_bytes;
    Tensor loss = mean(net(x));
    loss.backward();
    *peak = cpu_allocator_stats().peak_allocated_bytes - base;
    return loss.item();
  };
  nn::Sequential plain = make(false), ck = make(true);
  size_t peak_plain = 0, peak_ck = 0;
  double l1 = run(plain, &peak_plain), l2 = run(ck, &peak_ck);
  CHECK(l1 == l2);
  auto g1 = plain->named_parameters(), g2 = ck->named_parameters();
  REQUIRE(g1.size() == g2.size());
  for (size_t i = 0; i < g1.size(); ++i) {
    INFO(g1.items()[i].first << " vs " << g2.items()[i].first);
    CHECK(g1.items()[i].second.grad().to_vector<float>() == g2.items()[i].second.grad().to_vector<float>());
  }
  const double act = static_cast<double>(batch * width * 4);  // one activation, bytes
  WARN("activation checkpointing, " << segments << " segments of " << layers << " x (Linear(" << width
                                    << ") + GELU), batch " << batch << ": peak " << peak_plain / 1048576.0
                                    << " MiB without, " << peak_ck / 1048576.0 << " MiB with (one activation is "
                                    << act / 1048576.0 << " MiB)");
  CHECK(static_cast<double>(peak_ck) < 0.6 * static_cast<double>(peak_plain));
  CHECK(static_cast<double>(peak_plain) > 2.0 * segments * layers * act * 0.9);  // 2 activations per layer

  // The checkpointed forward keeps no graph inside the segment; eval or no_grad runs it plainly.
  ck->eval();
  {
    autograd::NoGradGuard ng;
    CHECK(ck(x).to_vector<float>() == plain(x).to_vector<float>());
  }
}

TEST_CASE("nn checkpoint replays the forward's random numbers and trains a first layer", "[nn][checkpoint]") {
  // A segment that draws random numbers: the recomputation must see the same ones.
  Tensor w = randn({4, 4});
  w.requires_grad_(true);
  auto seg = [&](const Tensor& in) { return mul(linear(in, w), rand({3, 4})); };
  manual_seed(9);
  Tensor x = randn({3, 4});  // does not require grad: gradients still reach w
  uint64_t off0 = default_generator().offset();
  Tensor y = nn::checkpoint(seg, x);
  uint64_t off1 = default_generator().offset();
  sum(y).backward();
  CHECK(default_generator().offset() == off1);  // backward restored the generator
  Tensor g_ck = w.grad().clone();
  w.reset_grad();
  default_generator().set_state(default_generator().seed(), off0);
  sum(seg(x)).backward();
  CHECK(g_ck.to_vector<float>() == w.grad().to_vector<float>());
  // a second backward through a released checkpoint is an error
  Tensor y2 = nn::checkpoint(seg, x);
  sum(y2).backward();
  CHECK_THROWS_WITH(sum(y2).backward(), Catch::Contains("second time"));
}

TEST_CASE("nn Dropout: train zeroes and rescales, eval is the identity, the seed reproduces the mask", "[nn]") {
  nn::Dropout drop(nn::DropoutOptions(0.25));
  Tensor x = ones({100000});
  manual_seed(21);
  Tensor y = drop(x);
  std::vector<float> v = y.to_vector<float>();
  size_t zeros_n = 0, wrong = 0;
  for (float e : v) {
    if (e == 0) ++zeros_n;
    else if (e != 1 / 0.75f) ++wrong;  // the kept ones are scaled by exactly 1 / (1 - p) in f32
  }
  CHECK(wrong == 0);
  CHECK(static_cast<double>(zeros_n) / v.size() == Approx(0.25).margin(0.01));
  manual_seed(21);
  CHECK(drop(x).to_vector<float>() == v);
  drop->eval();
  CHECK(drop(x).to_vector<float>() == x.to_vector<float>());
  std::ostringstream os;
  os << *drop;
  CHECK(os.str() == "Dropout(p=0.25)");
  CHECK_THROWS_WITH(nn::Dropout(1.5), Catch::Contains("must be in [0, 1]"));
}

TEST_CASE("nn loss modules: CrossEntropyLoss, NLLLoss, MSELoss match their functional forms", "[nn]") {
  manual_seed(8);
  Tensor logits = randn({6, 5}), target = tensor_i64({0, 4, 2, -100, 1, 3}, {6});
  Tensor w = tensor({1.0, 2.0, 0.5, 1.0, 3.0});
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().weight(w).label_smoothing(0.1));
  CrossEntropyOptions o;
  o.weight = w;
  o.label_smoothing = 0.1;
  CHECK(ce(logits, target).item() == cross_entropy(logits, target, o).item());
  CHECK(ce->state_dict().keys() == std::vector<std::string>{"weight"});  // saved and moved with the module
  // without smoothing, cross entropy is nll of log_softmax
  nn::CrossEntropyLoss plain;
  nn::NLLLoss nll;
  CHECK(plain(logits, target).item() == Approx(nll(log_softmax(logits, 1), target).item()).epsilon(1e-6));
  // reference value of the unweighted mean over the non-ignored rows
  std::vector<float> lv = logits.to_vector<float>();
  std::vector<int64_t> tv = target.to_vector<int64_t>();
  double total = 0;
  int count = 0;
  for (int n = 0; n < 6; ++n) {
    if (tv[static_cast<size_t>(n)] == -100) continue;
    double m = -1e30, s = 0;
    for (int c = 0; c < 5; ++c) m = std::max(m, static_cast<double>(lv[static_cast<size_t>(n * 5 + c)]));
    for (int c = 0; c < 5; ++c) s += std::exp(lv[static_cast<size_t>(n * 5 + c)] - m);
    total += m + std::log(s) - lv[static_cast<size_t>(n * 5 + tv[static_cast<size_t>(n)])];
    ++count;
  }
  CHECK(plain(logits, target).item() == Approx(total / count).epsilon(1e-5));
  nn::MSELoss mse_sum(Reduction::sum), mse_mean;
  Tensor a = tensor({1.0, 2.0, 3.0}), b = tensor({1.5, 2.0, 1.0});
  CHECK(mse_sum(a, b).item() == Approx(0.25 + 4.0));
  CHECK(mse_mean(a, b).item() == Approx(4.25 / 3));
  std::ostringstream os;
  os << *mse_sum << " " << *plain;
  CHECK(os.str() == "MSELoss(reduction=sum) CrossEntropyLoss(reduction=mean, ignore_index=-100, label_smoothing=0)");
}
