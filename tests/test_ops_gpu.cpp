// The generic op tests on CUDA: every CUDA variant of every op against the CPU reference, per
// dtype (f32, f16, bf16 as each sample lists), and gradients through autograd against the CPU's.
#include <catch2/catch.hpp>

#include "kernels/registry.h"
#include "tests/op_driver.h"

using namespace ember;

namespace {

void check_op_cuda(OpId id) {
  const OpInfo& info = op_info(id);
  for (const OpSample& s : op_samples(id)()) {
    INFO(info.name << " [" << s.name << "]");
    for (const std::string& f : testing::variant_parity(info, s, DeviceType::cuda)) FAIL_CHECK(f);
    for (const std::string& f : testing::backward_parity(info, s, DeviceType::cuda)) FAIL_CHECK(f);
  }
}

}  // namespace

#define EMBER_OP_TEST_CASE(title, id) \
  TEST_CASE("cuda op " title, "[gpu][ops]") { check_op_cuda(OpId::id); }
#include "tests/op_test_cases.def"
