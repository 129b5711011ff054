// Test samples of dropout (kernels/ops/dropout.*): every p from 0 to 1, counter bases above 2^32,
// unaligned and transposed inputs, NaN and inf.
#include <limits>

#include "kernels/ops/dropout.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<OpSample> samples_dropout() {
  std::vector<OpSample> out;
  uint64_t seed = 3100;
  auto add = [&](std::string name, Tensor x, double p, uint64_t base = 17, bool gradcheck = true) {
    OpSample s;
    s.name = std::move(name);
    s.inputs = {std::move(x)};
    s.attrs = DropoutAttrs{p, 0x5eed0000u + seed, base};
    s.gradcheck = gradcheck;
    out.push_back(std::move(s));
  };
  auto u = [&](Shape s) { return samples::uniform(s, -2, 2, ++seed); };
  add("[5, 6] p 0.5", u({5, 6}), 0.5);
  add("[7] p 0.3", u({7}), 0.3);
  add("scalar p 0.5", u({}), 0.5);
  add("[1] p 0.2", u({1}), 0.2);
  add("[0] p 0.5", u({0}), 0.5);
  add("[1023] p 0.1", u({1023}), 0.1);
  add("[2^20+3] p 0.5", u({(1 << 20) + 3}), 0.5);
  add("[64, 128] p 0.2 (MNIST hidden)", u({64, 128}), 0.2);
  add("[1023] p 0 (keeps everything)", u({1023}), 0.0);
  add("[1023] p 1 (drops everything)", u({1023}), 1.0);
  add("[1023] p 0.9", u({1023}), 0.9);
  add("[4097] counter base above 2^32", u({4097}), 0.5, (uint64_t{1} << 32) + 3);
  add("transposed [6, 5] p 0.5", samples::transposed({6, 5}, -2, 2, ++seed), 0.5);
  add("offset by one element (unaligned) [1024] p 0.5", u({1025}).slice(0, 1, 1025), 0.5);
  {
    Tensor x = u({9});
    double* p = x.data<double>();
    p[0] = std::numeric_limits<double>::quiet_NaN();
    p[1] = std::numeric_limits<double>::infinity();
    p[2] = -std::numeric_limits<double>::infinity();
    add("NaN and inf stay NaN when dropped [9] p 0.5", x, 0.5, 17, false);
  }
  return out;
}

}  // namespace ember
