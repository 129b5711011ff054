// The public option types of the functional API (kernels/functional.h): what nn/, the layers above
// and users pass to the ops. The op-internal headers (kernels/ops/<op>.h) keep the formulas and the
// attribute structs the registry stores; they include this header, never the other way round.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ember {

// The activation fused into linear's epilogue.
enum class Activation : int64_t { none = 0, relu = 1, gelu = 2 };

// How a loss reduces its per-element values (kernels/ops/loss.h has the exact formulas).
enum class Reduction : int64_t { none = 0, mean = 1, sum = 2 };

// cross_entropy and nll_loss (PyTorch's arguments of the same names).
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Tensor weight;  // [C] class weights or undefined
};

// conv2d's functional options (libtorch's name for them; the module nn::Conv2d takes
// nn::Conv2dOptions, which adds channels, kernel size and bias); (h, w) pairs. It is also the
// leading member of the op's attributes (Conv2dAttrs), so it must stay trivially copyable with
// every byte initialised: plain int64_t fields, no padding. The setters chain (one value for both
// dims, or h and w):
//   conv2d(x, w, b, Conv2dFuncOptions().set_stride(2).set_padding(1).set_groups(4));
struct Conv2dFuncOptions {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;

  Conv2dFuncOptions& set_stride(int64_t h, int64_t w) { return set(stride, h, w); }
  Conv2dFuncOptions& set_stride(int64_t s) { return set(stride, s, s); }
  Conv2dFuncOptions& set_padding(int64_t h, int64_t w) { return set(padding, h, w); }
  Conv2dFuncOptions& set_padding(int64_t p) { return set(padding, p, p); }
  Conv2dFuncOptions& set_dilation(int64_t h, int64_t w) { return set(dilation, h, w); }
  Conv2dFuncOptions& set_dilation(int64_t d) { return set(dilation, d, d); }
  Conv2dFuncOptions& set_groups(int64_t g) {
    groups = g;
    return *this;
  }

 private:
  Conv2dFuncOptions& set(int64_t (&field)[2], int64_t h, int64_t w) {
    field[0] = h;
    field[1] = w;
    return *this;
  }
};

// sgd_step's hyperparameters (torch.optim.SGD's). The optimizer keeps them in an f64 device tensor
// (Note [optimizer hyperparameters on the device] in kernels/ops/optim.h) that holds this struct's
// fields in declaration order: the field list is the one statement of that layout. values() gives
// the tensor's contents; the kernels read it back with load_sgd_hyper (kernels/ops/optim.h).
struct SgdHyper {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;

  static constexpr int64_t kCount = 4;
  std::vector<double> values() const {
    const auto v = std::bit_cast<std::array<double, kCount>>(*this);
    return {v.begin(), v.end()};
  }
};
static_assert(sizeof(SgdHyper) == SgdHyper::kCount * sizeof(double), "SgdHyper is the f64 tensor's layout");

}  // namespace ember
