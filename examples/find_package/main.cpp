// Trains y = 2x + 1 with ember's autograd and SGD: proof that find_package(ember) gives a working library.
#include <cstdio>

#include <ember/ember.h>

int main() {
  using namespace ember;
  manual_seed(0);
  Tensor x = randn({64, 1});
  Tensor y = add(mul(x, 2.0), 1.0);
  Tensor w = zeros({1, 1}).requires_grad_(), b = zeros({1}).requires_grad_();
  optim::SGD opt({w, b}, optim::SGDOptions(0.1));
  for (int i = 0; i < 300; ++i) {
    opt.zero_grad();
    mse_loss(add(matmul(x, w), b), y).backward();
    opt.step();
  }
  std::printf("w = %.4f, b = %.4f\n", w.item(), b.item());
  return (w.item() > 1.99 && w.item() < 2.01 && b.item() > 0.99 && b.item() < 1.01) ? 0 : 1;
}
