// Benchmark shapes of the pooling ops and their gradients (kernels/ops/pool.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/ops/pool.h"

namespace ember {

namespace {

// The MNIST CNN's activations (after conv1 and conv2) and ResNet-50's stem pool and head; with
// `relu`, max pooling's MNIST cases again with the relu fused (Note [relu after max pooling]), as
// nn::Sequential runs the CNN's ReLU and MaxPool2d.
std::vector<BenchCase> pool_benches(int kind, bool relu) {
  struct S {
    LayerInput in;
    PoolAttrs a;
  };
  std::vector<S> shapes;
  for (int64_t n : {64, 512}) {
    shapes.push_back({{"mnist pool1 2x2", {n, 32, 28, 28}, false, DType::f32}, pool_attrs(2, 2, 2, 2, 0, 0)});
    shapes.push_back({{"mnist pool2 2x2", {n, 64, 14, 14}, false, DType::f32}, pool_attrs(2, 2, 2, 2, 0, 0)});
  }
  shapes.push_back({{"resnet50 stem 3x3 s2 p1", {32, 64, 112, 112}, true, DType::f16}, pool_attrs(3, 3, 2, 2, 1, 1)});
  shapes.push_back({{"resnet50 stem 3x3 s2 p1", {32, 64, 112, 112}, false, DType::f32}, pool_attrs(3, 3, 2, 2, 1, 1)});
  if (relu)
    for (size_t i = 0; i < 4; ++i) {  // the MNIST cases
      S s = shapes[i];
      s.a.relu = 1;
      shapes.push_back(s);
    }
  std::vector<BenchCase> out;
  for (const S& s : shapes) {
    PoolGeom g = pool_geometry("bench", s.in.x, s.a);
    BenchCase b;
    b.name = s.in.name() + (s.a.relu != 0 ? " relu" : "");
    b.attrs = kind == 0 ? s.a : with_input_size(s.a, g.H, g.W);
    b.make = [in = s.in, a = s.a, kind, g](Device d) {
      Tensor x = uniform(in.x, -1, 1, TensorOptions().dtype(in.dt).device(d));
      if (in.cl) x = contiguous_as(x, true);
      if (kind == 0) return std::vector<Tensor>{x};
      Shape ys{g.N, g.C, g.P, g.Q};
      Tensor gy = contiguous_as(uniform(ys, -1, 1, TensorOptions().dtype(in.dt).device(d)), in.cl);
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
    LayerInput in;
    int64_t oh, ow;
  };
  for (const S& s : std::vector<S>{{{"resnet50 head 7x7 -> 1x1", {32, 2048, 7, 7}, false, DType::f32}, 1, 1},
                                   {{"resnet50 head 7x7 -> 1x1", {32, 2048, 7, 7}, true, DType::f16}, 1, 1},
                                   {{"mnist fast model 7x7 -> 1x1", {512, 128, 7, 7}, false, DType::f32}, 1, 1},
                                   {{"14x14 -> 6x6 (overlapping bins)", {64, 64, 14, 14}, false, DType::f32}, 6, 6}}) {
    const Shape& x = s.in.x;
    BenchCase b;
    b.name = s.in.name();
    b.attrs = backward ? adaptive_pool_attrs(s.oh, s.ow, x[2], x[3]) : adaptive_pool_attrs(s.oh, s.ow);
    Shape shape = backward ? Shape{x[0], x[1], s.oh, s.ow} : x;
    bool cl = s.in.cl;
    DType dt = s.in.dt;
    b.make = [shape, cl, dt](Device d) {
      return std::vector<Tensor>{contiguous_as(uniform(shape, -1, 1, TensorOptions().dtype(dt).device(d)), cl)};
    };
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

std::vector<BenchCase> benches_max_pool2d() { return pool_benches(0, true); }
std::vector<BenchCase> benches_max_pool2d_backward() { return pool_benches(2, true); }
std::vector<BenchCase> benches_avg_pool2d() { return pool_benches(0, false); }
std::vector<BenchCase> benches_avg_pool2d_backward() { return pool_benches(1, false); }
std::vector<BenchCase> benches_adaptive_avg_pool2d() { return adaptive_benches(false); }
std::vector<BenchCase> benches_adaptive_avg_pool2d_backward() { return adaptive_benches(true); }

}  // namespace ember
