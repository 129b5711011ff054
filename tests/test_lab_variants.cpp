// The registry's entry point for the benchmark lab (kernels/lab_variants.h, Note [lab variants]):
// it takes oracles (kReference) only, and only before any kernel ran.
#include <catch2/catch.hpp>

#include "kernels/functional.h"
#include "kernels/lab_variants.h"

using namespace ember;

TEST_CASE("lab variants: add_lab_variant takes kReference variants only, before any kernel ran", "[registry]") {
  Variant v{.name = "test_lab", .device = DeviceType::cpu, .fn = [](const KernelCall&) {}, .dtypes = kFloatTypes};
  CHECK_THROWS_WITH(add_lab_variant(OpId::relu, v), Catch::Contains("not flagged kReference"));
  Tensor y = add(ones({3}), ones({3}));  // kernels run
  v.flags = kReference;
  CHECK_THROWS_WITH(add_lab_variant(OpId::relu, v), Catch::Contains("after a kernel ran"));
  for (const Variant& r : op_info(OpId::relu).variants) CHECK(r.name != "test_lab");
}
