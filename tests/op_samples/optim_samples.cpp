// Test samples of sgd_step and adam_step (kernels/ops/optim.*): every option (momentum, dampening,
// nesterov, weight decay, amsgrad, decoupled decay, maximize), first and later steps, the AMP
// found_inf/inv_scale protocol, clipping folded into the step (an f32 or f64 norm that clips, one
// that does not, one that is NaN), lists with empty, scalar and 2^20+3 element tensors, and the
// ticket with which the CUDA kernel counts the steps itself (lists without an empty tensor).
#include <cmath>
#include <string>

#include "kernels/functional.h"
#include "kernels/ops/optim.h"
#include "kernels/options.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

using namespace optim_layout;

std::vector<Shape> sample_shapes(bool big, bool empty) {
  std::vector<Shape> s{{7}, {3, 5}, {1}, {}, {1023}};
  if (empty) s.insert(s.begin() + 3, Shape{0});
  if (big) s.push_back({(int64_t{1} << 20) + 3});
  return s;
}

struct SampleOpts {
  std::string name;
  bool big = false;
  float step = 0;         // initial step counters
  double found_inf = -1;  // < 0: undefined
  double inv_scale = -1;  // < 0: undefined
  bool ticket = false;    // a ticket (the CUDA kernel counts the steps), and no empty tensor
  double clip_norm = -1;  // < 0: undefined; else the norm, f32 (f64 with clip_f64), max_norm 1.5
  bool clip_f64 = false;
};

constexpr double kSampleMaxNorm = 1.5;

Tensor f32_scalar(double v, Shape shape = {}) { return full(shape, v, DType::f32); }

// What every optimizer sample starts with: the hyper-parameters, found_inf, inv_scale, the ticket,
// clip_norm, then the params and the grads, one tensor per shape. Returns the shapes.
std::vector<Shape> start_sample(OpSample& s, const SampleOpts& o, std::vector<double> hyper, uint64_t& seed) {
  s.name = o.name + (o.ticket ? ", ticket" : "");
  s.gradcheck = false;
  std::vector<Shape> shapes = sample_shapes(o.big, !o.ticket);
  s.inputs.push_back(tensor(hyper, DType::f64));
  s.inputs.push_back(o.found_inf >= 0 ? f32_scalar(o.found_inf, {1}) : Tensor());
  s.inputs.push_back(o.inv_scale >= 0 ? f32_scalar(o.inv_scale, {1}) : Tensor());
  s.inputs.push_back(o.ticket ? zeros({1}, DType::i32) : Tensor());
  s.inputs.push_back(o.clip_norm < 0 ? Tensor() : full({}, o.clip_norm, o.clip_f64 ? DType::f64 : DType::f32));
  for (const Shape& sh : shapes) s.inputs.push_back(samples::uniform(sh, -1, 1, ++seed));  // params
  for (const Shape& sh : shapes) s.inputs.push_back(samples::uniform(sh, -1, 1, ++seed));  // grads
  return shapes;
}

}  // namespace

std::vector<OpSample> samples_sgd_step() {
  std::vector<OpSample> out;
  uint64_t seed = 7100;
  auto mk = [&](const SampleOpts& o, const SgdHyper& hyper, bool bufs, bool nesterov, bool maximize) {
    OpSample s;
    std::vector<Shape> shapes = start_sample(s, o, hyper.values(), seed);
    int64_t n = static_cast<int64_t>(shapes.size());
    if (bufs) {
      for (const Shape& sh : shapes) s.inputs.push_back(samples::uniform(sh, -1, 1, ++seed));
      for (int64_t i = 0; i < n; ++i) s.inputs.push_back(f32_scalar(o.step));
    }
    s.keep_dtype = {kHyper, kFoundInf, kInvScale, kTicket, kClipNorm};
    if (bufs)
      for (int64_t i = 0; i < n; ++i) s.keep_dtype.push_back(static_cast<int>(kFirstTensor + 3 * n + i));
    s.attrs = SgdStepAttrs{n, bufs ? 1 : 0, nesterov ? 1 : 0, maximize ? 1 : 0, kSampleMaxNorm};
    out.push_back(std::move(s));
  };
  mk({"plain lr 0.1"}, {.lr = 0.1}, false, false, false);
  mk({"weight decay, maximize"}, {.lr = 0.05, .weight_decay = 0.01}, false, false, true);
  mk({"momentum first step (buffer = grad)", true}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1}, true, false, false);
  mk({"momentum later step, dampening, weight decay", false, 4.0f},
     {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}, true, false, false);
  mk({"nesterov later step", false, 2.0f}, {.lr = 0.03, .momentum = 0.8, .weight_decay = 5e-4}, true, true, false);
  mk({"inv_scale 0.5", false, 1.0f, -1, 0.5}, {.lr = 0.1, .momentum = 0.9}, true, false, false);
  mk({"found_inf set: nothing changes", false, 3.0f, 1.0, 0.5}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1}, true,
     true, false);
  mk({"found_inf clear", false, 3.0f, 0.0, 0.25}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1}, true, true, false);
  mk({"momentum first step", true, 0.0f, -1, -1, true}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1}, true, false,
     false);
  mk({"nesterov later step", false, 2.0f, -1, -1, true}, {.lr = 0.03, .momentum = 0.8, .weight_decay = 5e-4}, true,
     true, false);
  mk({"found_inf set: nothing changes", false, 3.0f, 1.0, 0.5, true}, {.lr = 0.1, .momentum = 0.9}, true, false, false);
  mk({"plain lr 0.1", false, 0.0f, -1, -1, true}, {.lr = 0.1}, false, false, false);
  mk({"clipped (norm 6: coef 1/4), momentum later step, weight decay", false, 3.0f, -1, -1, false, 6.0},
     {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}, true, false, false);
  mk({"clip norm under max_norm (coef 1), f64 norm, maximize", false, 0.0f, -1, -1, false, 1.0, true},
     {.lr = 0.05, .weight_decay = 0.01}, false, false, true);
  mk({"clip norm NaN: NaN parameters as clipping in place gives", false, 1.0f, -1, -1, false, std::nan("")},
     {.lr = 0.1, .momentum = 0.9}, true, false, false);
  mk({"clipped (norm 3), nesterov", false, 2.0f, -1, -1, true, 3.0}, {.lr = 0.03, .momentum = 0.8}, true, true, false);
  return out;
}

std::vector<OpSample> samples_adam_step() {
  std::vector<OpSample> out;
  uint64_t seed = 7300;
  auto mk = [&](const SampleOpts& o, std::vector<double> hyper, bool amsgrad, bool decoupled, bool maximize) {
    OpSample s;
    std::vector<Shape> shapes = start_sample(s, o, hyper, seed);
    int64_t n = static_cast<int64_t>(shapes.size());
    bool fresh = o.step == 0;
    for (const Shape& sh : shapes)  // exp_avg
      s.inputs.push_back(fresh ? zeros(sh, DType::f64) : samples::uniform(sh, -0.1, 0.1, ++seed));
    for (const Shape& sh : shapes)  // exp_avg_sq >= 0
      s.inputs.push_back(fresh ? zeros(sh, DType::f64) : samples::uniform(sh, 0, 0.05, ++seed));
    if (amsgrad)
      for (const Shape& sh : shapes)
        s.inputs.push_back(fresh ? zeros(sh, DType::f64) : samples::uniform(sh, 0, 0.05, ++seed));
    for (int64_t i = 0; i < n; ++i) s.inputs.push_back(f32_scalar(o.step));
    s.keep_dtype = {kHyper, kFoundInf, kInvScale, kTicket, kClipNorm};
    int step_list = amsgrad ? 5 : 4;
    for (int64_t i = 0; i < n; ++i) s.keep_dtype.push_back(static_cast<int>(kFirstTensor + step_list * n + i));
    s.attrs = AdamStepAttrs{n, amsgrad ? 1 : 0, decoupled ? 1 : 0, maximize ? 1 : 0, kSampleMaxNorm};
    s.tol = {{DType::f32, {1e-5, 1e-6}}};
    s.tol_note = "m / (sqrt(v) + eps) amplifies one-ulp differences of m and v (nvcc contracts a*b+c into FMAs)";
    out.push_back(std::move(s));
  };
  mk({"adam first step", true}, {1e-3, 0.9, 0.999, 1e-8, 0}, false, false, false);
  mk({"adam step 10, weight decay (L2)", false, 9.0f}, {1e-2, 0.9, 0.999, 1e-8, 0.1}, false, false, false);
  mk({"adamw step 5, decoupled weight decay", false, 4.0f}, {1e-2, 0.85, 0.99, 1e-6, 0.05}, false, true, false);
  mk({"adamw amsgrad step 3, maximize", false, 2.0f}, {3e-3, 0.9, 0.999, 1e-8, 0.01}, true, true, true);
  mk({"amsgrad first step", false, 0.0f}, {1e-3, 0.9, 0.999, 1e-8, 0}, true, false, false);
  mk({"inv_scale 1/1024", false, 1.0f, -1, 1.0 / 1024}, {1e-3, 0.9, 0.999, 1e-8, 0}, false, false, false);
  mk({"found_inf set: nothing changes", false, 6.0f, 1.0, 0.5}, {1e-3, 0.9, 0.999, 1e-8, 0.01}, true, true, false);
  mk({"found_inf clear", false, 6.0f, 0.0, 0.5}, {1e-3, 0.9, 0.999, 1e-8, 0.01}, true, true, false);
  mk({"adam first step", true, 0.0f, -1, -1, true}, {1e-3, 0.9, 0.999, 1e-8, 0}, false, false, false);
  mk({"adamw amsgrad step 3, maximize", false, 2.0f, -1, -1, true}, {3e-3, 0.9, 0.999, 1e-8, 0.01}, true, true, true);
  mk({"found_inf set: nothing changes", false, 6.0f, 1.0, 0.5, true}, {1e-3, 0.9, 0.999, 1e-8, 0.01}, false, true,
     false);
  mk({"inv_scale 1/1024", false, 1.0f, -1, 1.0 / 1024, true}, {1e-3, 0.9, 0.999, 1e-8, 0}, false, false, false);
  mk({"adamw clipped (norm 3), step 5", false, 4.0f, -1, -1, false, 3.0}, {1e-2, 0.85, 0.99, 1e-6, 0.05}, false, true,
     false);
  mk({"clipped (norm 4) after inv_scale 1/2, found_inf clear, amsgrad", false, 6.0f, 0.0, 0.5, false, 4.0},
     {1e-3, 0.9, 0.999, 1e-8, 0.01}, true, true, false);
  mk({"clip norm under max_norm (coef 1), f64 norm", false, 2.0f, -1, -1, false, 0.5, true},
     {1e-3, 0.9, 0.999, 1e-8, 0}, false, false, false);
  mk({"clip norm NaN: NaN parameters", false, 1.0f, -1, -1, false, std::nan("")}, {1e-3, 0.9, 0.999, 1e-8, 0}, false,
     false, false);
  mk({"adamw clipped (norm 3), first step", true, 0.0f, -1, -1, true, 3.0}, {1e-3, 0.9, 0.999, 1e-8, 0.01}, false, true,
     false);
  return out;
}

}  // namespace ember
