// kernels/ops.def is the whole of a unary op's registration: its EMBER_UNARY(name, Functor) line
// yields the OpId pair, the registry entries, the functional API and its declarations in
// kernels/functional.h (docs/contributing.md). These tests hold that promise.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kernels/functional.h"
#include "kernels/ops/unary.h"
#include "kernels/registry.h"

using namespace ember;

namespace {

struct UnaryEntry {
  const char* name;
  OpId op, backward_op;
  Tensor (*fn)(const Tensor&);
  Tensor (*backward_fn)(const Tensor&, const Tensor&);
  AutocastPolicy autocast;  // the functor's kAutocast
  double lo, hi;            // the functor's sample domain
};

// One row per EMBER_UNARY line. Taking &ember::name and &ember::name##_backward needs their
// declarations: an entry whose functional.h declaration is missing (or is not the plain
// `Tensor name(const Tensor&)` / `Tensor name_backward(const Tensor&, const Tensor&)`) fails to
// compile here, and one whose definition is missing fails to link.
const std::vector<UnaryEntry>& unary_entries() {
  static const std::vector<UnaryEntry> entries = {
#define EMBER_UNARY(name, Functor) \
  {#name,                          \
   OpId::name,                     \
   OpId::name##_backward,          \
   &ember::name,                   \
   &ember::name##_backward,        \
   unary::Functor::kAutocast,      \
   unary::Functor::kLo,            \
   unary::Functor::kHi},
#include "kernels/ops.def"
  };
  return entries;
}

const Variant* cpu_variant(const OpInfo& info) {
  for (const Variant& v : info.variants)
    if (v.device == DeviceType::cpu) return &v;
  return nullptr;
}

}  // namespace

TEST_CASE("op list: every EMBER_UNARY line is an op pair in the registry", "[ops][unary][registry]") {
  const std::vector<UnaryEntry>& entries = unary_entries();
  REQUIRE(!entries.empty());
  for (const UnaryEntry& e : entries) {
    INFO("unary op " << e.name);
    CHECK(std::string(op_info(e.op).name) == e.name);
    CHECK(std::string(op_info(e.backward_op).name) == std::string(e.name) + "_backward");
    // The runner reads the policy the functor declares (unary.h), not a list in unary.cpp.
    CHECK(op_info(e.op).autocast == e.autocast);
    CHECK(op_info(e.op).differentiable());
    CHECK(!op_info(e.backward_op).differentiable());
  }
  // The registry's own count of unary ops: those define_unary made ("elementwise <name>" with a
  // <name>_backward op beside them). A unary op registered some other way than its ops.def line
  // would show up here and not in the table above.
  size_t in_registry = 0;
  for (const OpInfo& info : all_ops()) {
    std::string name = info.name;
    if (info.doc == "elementwise " + name && find_op(name + "_backward") != nullptr) ++in_registry;
  }
  CHECK(in_registry == entries.size());
}

TEST_CASE("op list: each unary op's functional API runs its own op", "[ops][unary][registry]") {
  for (const UnaryEntry& e : unary_entries()) {
    INFO("unary op " << e.name);
    // A point inside the sample domain (log, sqrt and rsqrt need positive inputs).
    double mid = (e.lo + e.hi) / 2;
    Tensor x = tensor({mid, e.lo + 0.25 * (e.hi - e.lo)}, TensorOptions(DType::f64));
    Tensor g = tensor({1.0, -0.5}, TensorOptions(DType::f64));
    const Variant* fwd = cpu_variant(op_info(e.op));
    const Variant* bwd = cpu_variant(op_info(e.backward_op));
    REQUIRE(fwd != nullptr);
    REQUIRE(bwd != nullptr);
    uint64_t fwd_runs = variant_runs(*fwd, DType::f64), bwd_runs = variant_runs(*bwd, DType::f64);
    Tensor y = e.fn(x);
    CHECK(variant_runs(*fwd, DType::f64) == fwd_runs + 1);
    CHECK(y.shape() == x.shape());
    Tensor dx = e.backward_fn(g, x);
    CHECK(variant_runs(*bwd, DType::f64) == bwd_runs + 1);
    CHECK(dx.shape() == x.shape());
  }
}
