// Test samples of where (kernels/ops/where.*): condition, broadcast and empty cases.
#include "kernels/functional.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<OpSample> samples_where() {
  std::vector<OpSample> out;
  auto mk = [&](const char* name, Shape sc, Shape sa, Shape sb, uint64_t seed) {
    OpSample s;
    s.name = name;
    s.inputs = {gt(samples::uniform(sc, -1, 1, seed), 0.0), samples::uniform(sa, -2, 2, seed + 1),
                samples::uniform(sb, -2, 2, seed + 2)};
    s.grad_inputs = {1, 2};
    out.push_back(std::move(s));
  };
  mk("same shapes [1023]", {1023}, {1023}, {1023}, 1);
  mk("broadcast cond [5,1] a [5,6] b [6]", {5, 1}, {5, 6}, {6}, 10);
  mk("scalar b", {4, 4}, {4, 4}, {}, 20);
  mk("empty", {0, 3}, {0, 3}, {3}, 30);
  mk("[2^20+3]", {(1 << 20) + 3}, {(1 << 20) + 3}, {(1 << 20) + 3}, 40);
  return out;
}

}  // namespace ember
