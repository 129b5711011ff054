// How an op behaves under autocast (amp/): declared beside the op (OpInfo::autocast, or a unary
// functor's kAutocast), read by the runner. In its own header so that functor headers compiled for
// the device (kernels/ops/unary.h) can name a policy without the registry.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"

namespace ember {

class Tensor;

enum class AutocastPolicy : uint8_t {
  none,     // leave inputs alone (views, copies, integer ops)
  lower,    // cast floating inputs to the autocast dtype (matmul, linear, conv)
  fp32,     // cast floating inputs to f32 (softmax, losses, norms, reductions, exp/log/pow)
  promote,  // cast floating inputs to the widest floating input dtype (binary elementwise, cat)
};

namespace autocast {

// Casts `inputs` in place according to `policy` (kernels/autocast_policy.cpp). The op runner calls
// it while an autocast scope (core/autocast.h) is active; it is declared here, not beside the
// state in core/, because it runs ops (core/ may not call up into kernels/).
void apply_policy(AutocastPolicy policy, DeviceType device, std::vector<Tensor>& inputs);

}  // namespace autocast

}  // namespace ember
