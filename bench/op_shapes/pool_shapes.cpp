// Benchmark shapes of the pooling ops and their gradients (kernels/ops/pool.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/ops/pool.h"

namespace ember {

namespace {

// The MNIST CNN's activations (after conv1 and conv2) and ResNet-50's stem pool and head.
std::vector<BenchCase> pool_benches(int kind) {
  struct S {
    const char* name;
    Shape x;
    PoolAttrs a;
    bool cl;
    DType dt;
  };
  std::vector<S> shapes;
  for (int64_t n : {64, 512}) {
    shapes.push_back({"mnist pool1 2x2", {n, 32, 28, 28}, pool_attrs(2, 2, 2, 2, 0, 0), false, DType::f32});
    shapes.push_back({"mnist pool2 2x2", {n, 64, 14, 14}, pool_attrs(2, 2, 2, 2, 0, 0), false, DType::f32});
  }
  shapes.push_back({"resnet50 stem 3x3 s2 p1", {32, 64, 112, 112}, pool_attrs(3, 3, 2, 2, 1, 1), true, DType::f16});
  shapes.push_back({"resnet50 stem 3x3 s2 p1", {32, 64, 112, 112}, pool_attrs(3, 3, 2, 2, 1, 1), false, DType::f32});
  std::vector<BenchCase> out;
  for (const S& s : shapes) {
    PoolGeom g = pool_geometry("bench", s.x, s.a);
    BenchCase b;
    b.name = str(s.name, " ", s.x, " ", s.dt, s.cl ? " channels-last" : "");
    b.attrs = kind == 0 ? s.a : with_input_size(s.a, g.H, g.W);
    Shape xs = s.x;
    PoolAttrs a = s.a;
    bool cl = s.cl;
    DType dt = s.dt;
    b.make = [xs, a, cl, dt, kind, g](Device d) {
      Tensor x = uniform(xs, -1, 1, TensorOptions().dtype(dt).device(d));
      if (cl) x = contiguous_as(x, true);
      if (kind == 0) return std::vector<Tensor>{x};
      Shape ys{g.N, g.C, g.P, g.Q};
      Tensor gy = contiguous_as(uniform(ys, -1, 1, TensorOptions().dtype(dt).device(d)), cl);
      if (kind == 1) return std::vector<Tensor>{gy};
      return std::vector<Tensor>{gy, call(OpId::max_pool2d, {x}, a)[1]};  // kind 2: max backward
    };
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<BenchCase> adaptive_benches(bool backward) {
  std::vector<BenchCase> out;
  struct S {
    const char* name;
    Shape x;
    int64_t oh, ow;
    bool cl;
    DType dt;
  };
  for (const S& s : std::vector<S>{{"resnet50 head 7x7 -> 1x1", {32, 2048, 7, 7}, 1, 1, false, DType::f32},
                                   {"resnet50 head 7x7 -> 1x1", {32, 2048, 7, 7}, 1, 1, true, DType::f16},
                                   {"mnist 7x7 -> 1x1", {512, 64, 7, 7}, 1, 1, false, DType::f32},
                                   {"14x14 -> 6x6 (overlapping bins)", {64, 64, 14, 14}, 6, 6, false, DType::f32}}) {
    BenchCase b;
    b.name = str(s.name, " ", s.x, " ", s.dt, s.cl ? " channels-last" : "");
    b.attrs = backward ? adaptive_pool_attrs(s.oh, s.ow, s.x[2], s.x[3]) : adaptive_pool_attrs(s.oh, s.ow);
    Shape shape = backward ? Shape{s.x[0], s.x[1], s.oh, s.ow} : s.x;
    bool cl = s.cl;
    DType dt = s.dt;
    b.make = [shape, cl, dt](Device d) {
      return std::vector<Tensor>{contiguous_as(uniform(shape, -1, 1, TensorOptions().dtype(dt).device(d)), cl)};
    };
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

std::vector<BenchCase> benches_max_pool2d() { return pool_benches(0); }
std::vector<BenchCase> benches_max_pool2d_backward() { return pool_benches(2); }
std::vector<BenchCase> benches_avg_pool2d() { return pool_benches(0); }
std::vector<BenchCase> benches_avg_pool2d_backward() { return pool_benches(1); }
std::vector<BenchCase> benches_adaptive_avg_pool2d() { return adaptive_benches(false); }
std::vector<BenchCase> benches_adaptive_avg_pool2d_backward() { return adaptive_benches(true); }

}  // namespace ember
