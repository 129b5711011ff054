// EMBER_ARG: chainable option fields, as libtorch's TORCH_ARG. In core/ because every layer's options
// use it (nn modules, optimizers and schedulers, SyncBatchNorm).
//
//   struct LinearOptions {
//     LinearOptions(int64_t in, int64_t out) : in_features_(in), out_features_(out) {}
//     EMBER_ARG(int64_t, in_features);
//     EMBER_ARG(bool, bias) = true;
//   };
//   LinearOptions(784, 128).bias(false);   o.bias() reads it.
//
// EMBER_FIELD: the same chainable setter over a public field, read as `o.name_`: the option
// structs whose fields are read directly (amp::GradScalerOptions, data::DistributedSamplerOptions).
//
//   struct GradScalerOptions {
//     EMBER_FIELD(double, init_scale) = 65536.0;
//   };
//   GradScalerOptions().init_scale(1024);   o.init_scale_ reads it.
#pragma once

#define EMBER_ARG(T, name)                                 \
 public:                                                   \
  auto name(const T& new_##name)->decltype(*this) {        \
    this->name##_ = new_##name;                            \
    return *this;                                          \
  }                                                        \
  const T& name() const noexcept { return this->name##_; } \
  T& name() noexcept { return this->name##_; }             \
                                                           \
 private:                                                  \
  T name##_

#define EMBER_FIELD(T, name)                        \
  auto name(const T& new_##name)->decltype(*this) { \
    this->name##_ = new_##name;                     \
    return *this;                                   \
  }                                                 \
  T name##_
