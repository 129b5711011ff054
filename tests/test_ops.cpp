// The generic op tests on the CPU: coverage of ops.def, f64 gradcheck of every differentiable op,
// parity of every extra CPU variant with the op's CPU reference.
#include <catch2/catch.hpp>

#include "kernels/registry.h"
#include "tests/op_driver.h"

using namespace ember;

namespace {

void check_op_cpu(OpId id) {
  const OpInfo& info = op_info(id);
  std::vector<OpSample> samples = op_samples(id)();
  REQUIRE(!samples.empty());
  for (const OpSample& s : samples) {
    INFO(info.name << " [" << s.name << "]");
    for (const std::string& f : testing::gradcheck(info, s)) FAIL_CHECK(f);
    for (const std::string& f : testing::variant_parity(info, s, DeviceType::cpu)) FAIL_CHECK(f);
  }
}

}  // namespace

TEST_CASE("coverage: every op in ops.def has samples and the kernels its devices promise", "[ops][coverage]") {
  int count = 0;
  for (const OpInfo& info : all_ops()) {
    INFO("op " << info.name);
    ++count;
    const SamplesFn samples = op_samples(info.id);
    CHECK(samples != nullptr);
    if (samples != nullptr) CHECK(!samples().empty());
    CHECK(!info.doc.empty());
    if (info.view != nullptr) continue;
    bool cpu = false, cuda = false;
    for (const Variant& v : info.variants) {
      cpu = cpu || v.device == DeviceType::cpu;
      cuda = cuda || v.device == DeviceType::cuda;
    }
    CHECK(cpu);  // every op has a CPU implementation: the reference
    if ((info.devices & CUDA) && EMBER_WITH_CUDA) CHECK(cuda);
    CHECK(info.cost != nullptr);
  }
  CHECK(count == kNumOps);
  WARN("ops in the registry: " << count);
}

#define EMBER_OP_TEST_CASE(title, id) \
  TEST_CASE("op " title, "[ops]") { check_op_cpu(OpId::id); }
#include "tests/op_test_cases.def"
