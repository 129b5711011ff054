// matmul: batched matrix product with broadcast batch dims.
//
// Shapes: a [..., M, K], b [..., K, N] -> out [broadcast(...), M, N]; a and b have >= 2 dims here
// (the functional API handles 1-D operands the numpy way). Any strides: a transposed view is read
// in place, without a copy.
// Gradients: da = g b^T, db = a^T g, each summed over the batch dims that were broadcast.
// FLOPs 2*M*N*K per batch.
//
// CPU: a reference loop (i, k, j order, so the inner loop runs along rows of b and out), parallel
// over batch x rows: the oracle (kReference). The default is "cpu_blocked" (kernels/gemm/cpu_gemm.h:
// packed panels, cache blocking, a register-blocked SIMD micro-kernel, multi-threaded).
#include "core/parallel.h"
#include "kernels/gemm/cpu_gemm.h"
#include "kernels/common/samples.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

void register_dnnl_matmul(OpInfo& info);  // matmul_dnnl.cpp, only when EMBER_WITH_DNNL

namespace {

std::vector<TensorSpec> infer_matmul(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 2, "matmul: expects two inputs");
  const Tensor &a = in[0], &b = in[1];
  EMBER_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: the kernel needs operands with >= 2 dims, got ", a.shape(),
              " and ", b.shape());
  EMBER_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: ", a.describe(), " and ", b.describe());
  EMBER_CHECK(is_floating(a.dtype()), "matmul: expects floating tensors, got ", a.describe());
  int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1];
  int64_t K2 = b.shape()[b.dim() - 2], N = b.shape()[b.dim() - 1];
  EMBER_CHECK(K == K2, "matmul: inner dimensions differ: a is ", a.shape(), " and b is ", b.shape(), " (", K, " vs ",
              K2, ")");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape out = broadcast_shapes(ba, bb);
  out.push_back(M);
  out.push_back(N);
  return {{out, a.dtype(), {}}};
}

// Strides of an operand's batch dims aligned to the output's batch shape (0 where broadcast).
std::vector<int64_t> batch_strides(const Tensor& t, const Shape& batch) {
  int nb = batch.size(), tb = t.dim() - 2;
  std::vector<int64_t> st(static_cast<size_t>(nb), 0);
  for (int i = 0; i < tb; ++i) {
    int o = nb - tb + i;
    st[static_cast<size_t>(o)] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  }
  return st;
}

void matmul_cpu(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  const Tensor& out = c.out[0];
  const int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1], N = b.shape()[b.dim() - 1];
  Shape batch(out.shape().begin(), out.shape().end() - 2);
  const int64_t nbatch = batch.numel();
  std::vector<int64_t> sa = batch_strides(a, batch), sb = batch_strides(b, batch);
  const int64_t am = a.strides()[a.dim() - 2], ak = a.strides()[a.dim() - 1];
  const int64_t bk = b.strides()[b.dim() - 2], bn = b.strides()[b.dim() - 1];
  EMBER_DISPATCH_FLOAT(a.dtype(), "matmul", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* ap = static_cast<const scalar_t*>(a.data_ptr());
    const scalar_t* bp = static_cast<const scalar_t*>(b.data_ptr());
    scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
    parallel_for(0, nbatch * M, std::max<int64_t>(1, 65536 / std::max<int64_t>(N * K, 1)), [&](int64_t lo, int64_t hi) {
      std::vector<acc> row(static_cast<size_t>(N));
      for (int64_t bm = lo; bm < hi; ++bm) {
        int64_t bi = bm / M, i = bm % M;
        int64_t offa = 0, offb = 0, rem = bi;
        for (int d = batch.size() - 1; d >= 0; --d) {
          int64_t idx = rem % batch[d];
          rem /= batch[d];
          offa += idx * sa[static_cast<size_t>(d)];
          offb += idx * sb[static_cast<size_t>(d)];
        }
        std::fill(row.begin(), row.end(), acc(0));
        const scalar_t* arow = ap + offa + i * am;
        for (int64_t k = 0; k < K; ++k) {
          acc av = static_cast<acc>(arow[k * ak]);
          const scalar_t* brow = bp + offb + k * bk;
          if (bn == 1)
            for (int64_t j = 0; j < N; ++j) row[static_cast<size_t>(j)] += av * static_cast<acc>(brow[j]);
          else
            for (int64_t j = 0; j < N; ++j) row[static_cast<size_t>(j)] += av * static_cast<acc>(brow[j * bn]);
        }
        scalar_t* orow = op + bm * N;
        for (int64_t j = 0; j < N; ++j) orow[j] = static_cast<scalar_t>(row[static_cast<size_t>(j)]);
      }
    });
  });
}

// Batch offsets (elements) of a and b for every flat batch index of the output.
void batch_offsets(const Tensor& a, const Tensor& b, const Shape& batch, std::vector<int64_t>& ao,
                   std::vector<int64_t>& bo) {
  const int64_t n = batch.numel();
  std::vector<int64_t> sa = batch_strides(a, batch), sb = batch_strides(b, batch);
  ao.assign(static_cast<size_t>(n), 0);
  bo.assign(static_cast<size_t>(n), 0);
  for (int64_t bi = 0; bi < n; ++bi) {
    int64_t rem = bi;
    for (int d = batch.size() - 1; d >= 0; --d) {
      int64_t idx = rem % batch[d];
      rem /= batch[d];
      ao[static_cast<size_t>(bi)] += idx * sa[static_cast<size_t>(d)];
      bo[static_cast<size_t>(bi)] += idx * sb[static_cast<size_t>(d)];
    }
  }
}

void matmul_cpu_blocked(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  const Tensor& out_arg = c.out[0];
  // the kernel writes rows with unit column stride: a non-contiguous output goes through a copy
  Tensor out = out_arg.is_contiguous() ? out_arg : empty(out_arg.shape(), TensorOptions(out_arg.dtype()));
  const int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1], N = b.shape()[b.dim() - 1];
  Shape batch(out.shape().begin(), out.shape().end() - 2);
  std::vector<int64_t> ao, bo, co(static_cast<size_t>(batch.numel()));
  batch_offsets(a, b, batch, ao, bo);
  for (size_t i = 0; i < co.size(); ++i) co[i] = static_cast<int64_t>(i) * M * N;
  EMBER_DISPATCH_FLOAT(a.dtype(), "matmul", [&] {
    gemm::CpuGemm<scalar_t> g;
    g.M = M;
    g.N = N;
    g.K = K;
    g.a = static_cast<const scalar_t*>(a.data_ptr());
    g.a_rs = a.strides()[a.dim() - 2];
    g.a_cs = a.strides()[a.dim() - 1];
    g.b = static_cast<const scalar_t*>(b.data_ptr());
    g.b_rs = b.strides()[b.dim() - 2];
    g.b_cs = b.strides()[b.dim() - 1];
    g.c = static_cast<scalar_t*>(out.data_ptr());
    g.c_rs = N;
    g.batch = batch.numel();
    g.a_off = ao.data();
    g.b_off = bo.data();
    g.c_off = co.data();
    gemm::cpu_gemm(g);
  });
  if (!out.is_same(out_arg)) {
    Tensor dst = out_arg;
    copy_(dst, out);
  }
}

std::vector<Tensor> matmul_vjp(const BackwardCtx& ctx) {
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
  Tensor g = ctx.grad(0);
  Tensor ga, gb;
  if (ctx.needs_grad(0)) ga = sum_to(matmul(g, b.transpose(-1, -2)), a.shape());
  if (ctx.needs_grad(1)) gb = sum_to(matmul(a.transpose(-1, -2), g), b.shape());
  return {ga, gb};
}

// Shapes cover the CUDA kernels' paths: single tiles and several with ragged edges (M, N > 128),
// K across several k tiles, every operand layout (row-major, transposed views, layouts that need
// a copy), 16-byte aligned operands (K, M or N multiples of 8) and unaligned ones, broadcast and
// multi-dim batches (one cuBLAS call per outer batch), vectors (M = 1, N = 1) and empty dims.
std::vector<OpSample> matmul_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 700;
  auto mk = [&](std::string name, Tensor a, Tensor b) {
    OpSample s;
    s.name = std::move(name);
    const int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1], N = b.shape()[b.dim() - 1];
    s.inputs = {std::move(a), std::move(b)};
    s.dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
    if (std::max({M, N, K}) > 64) {
      // products are exact in f32 for f16/bf16 inputs; only the order of the sums differs, so
      // the outputs agree to a few f32 ulps of the partial sums (atol) plus one output rounding (rtol)
      s.tol = {{DType::f32, {1e-5, 1e-4}}, {DType::f16, {1e-3, 1e-4}}, {DType::bf16, {1.6e-2, 1e-4}}};
      s.tol_note = "GEMM kernels (tiles, tensor cores, cuBLAS) sum the products in another order than the CPU loop";
      const std::vector<int64_t> ab(s.inputs[0].shape().begin(), s.inputs[0].shape().end() - 2);
      const std::vector<int64_t> bb(s.inputs[1].shape().begin(), s.inputs[1].shape().end() - 2);
      if (ab != bb) {
        // the gradient of a broadcast operand sums per-batch products already rounded to the dtype:
        // two roundings (an H200: 2 f16 ulps in one element of 5184)
        s.tol = {{DType::f32, {1e-5, 1e-4}}, {DType::f16, {2e-3, 1e-4}}, {DType::bf16, {3.2e-2, 1e-4}}};
        s.tol_note += "; a broadcast operand's gradient is a sum of rounded per-batch products";
      }
    }
    out.push_back(std::move(s));
  };
  auto u = [&](Shape s) { return samples::uniform(s, -1, 1, ++seed); };
  for (auto [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {3, 4, 5}, {17, 9, 13}, {64, 129, 33}, {7, 1000, 3}, {130, 264, 136}, {33, 2000, 17},
           {1, 300, 200}, {200, 300, 1}}) {
    mk(str("[", m, ",", k, "] x [", k, ",", n, "]"), u({m, k}), u({k, n}));
  }
  mk("a transposed", u({4, 6}).t(), u({4, 5}));
  mk("b transposed", u({6, 4}), u({5, 4}).t());
  mk("a transposed, aligned [136,264] x [264,72]", u({264, 136}).t(), u({264, 72}));
  mk("b transposed, aligned [72,136] x [136,200]", u({72, 136}), u({200, 136}).t());
  mk("both transposed [40,264] x [264,48]", u({264, 40}).t(), u({48, 264}).t());
  mk("a sliced (column stride 2) [20,35] x [35,9]", u({20, 70}).slice(1, 0, 70, 2), u({35, 9}));
  mk("a rows expanded (row stride 0) [16,24] x [24,8]", u({1, 24}).expand({16, 24}), u({24, 8}));
  mk("batched [2,3,4,5] x [2,3,5,2]", u({2, 3, 4, 5}), u({2, 3, 5, 2}));
  mk("batched aligned [3,72,136] x [3,136,80]", u({3, 72, 136}), u({3, 136, 80}));
  mk("broadcast batch [3,4,5] x [5,2]", u({3, 4, 5}), u({5, 2}));
  mk("broadcast transposed b [4,33,64] x [64,48]", u({4, 33, 64}), u({48, 64}).t());
  mk("broadcast batch [2,1,4,5] x [3,5,2]", u({2, 1, 4, 5}), u({3, 5, 2}));
  mk("broadcast batch [2,1,40,72] x [3,72,24]", u({2, 1, 40, 72}), u({3, 72, 24}));
  mk("K = 0", u({3, 0}), u({0, 4}));
  mk("M = 0", u({0, 3}), u({3, 4}));
  return out;
}

Cost matmul_cost(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  double M = static_cast<double>(a.shape()[a.dim() - 2]), K = static_cast<double>(a.shape()[a.dim() - 1]);
  double N = static_cast<double>(b.shape()[b.dim() - 1]);
  double batch = static_cast<double>(c.out[0].numel()) / std::max(1.0, M * N);
  return {static_cast<double>(a.nbytes() + b.nbytes() + c.out[0].nbytes()), 2.0 * batch * M * N * K};
}

// GEMMs at the sizes vendor libraries are judged by, in every dtype; and the x W^T layout (b a
// transposed view) that linear and the backward pass use.
std::vector<BenchCase> matmul_benches() {
  std::vector<BenchCase> out;
  for (int64_t n : {4096, 8192})
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      BenchCase c;
      c.name = str("[", n, ",", n, "] x [", n, ",", n, "] ", dt);
      c.inputs = {TensorSpec{Shape{n, n}, dt, {}, -1}, TensorSpec{Shape{n, n}, dt, {}, -1}};
      out.push_back(std::move(c));
    }
  for (DType dt : {DType::f32, DType::bf16}) {
    BenchCase c;
    c.name = str("[4096,4096] x [4096,4096]^T (b transposed) ", dt);
    c.inputs = {TensorSpec{Shape{4096, 4096}, dt, {}, -1}, TensorSpec{Shape{4096, 4096}, dt, Strides{1, 4096}, -1}};
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

void define_op_matmul(OpInfo& info) {
  info.doc = "batched matrix product";
  info.infer = infer_matmul;
  info.backward = matmul_vjp;
  info.save = Save::inputs;
  info.samples = matmul_samples;
  info.cost = matmul_cost;
  info.benches = matmul_benches;
  info.contiguous_inputs = false;
  info.autocast = AutocastPolicy::lower;
  // The reference loop stays first: the generic tests compare every other CPU variant with it.
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = matmul_cpu, .dtypes = kFloatTypes,
                    .flags = kReference, .note = "reference loop, parallel over rows"});
  info.add_variant({.name = "cpu_blocked", .device = DeviceType::cpu, .fn = matmul_cpu_blocked, .dtypes = kFloatTypes,
                    .note = "packed panels, cache blocking, SIMD micro-kernel (AVX-512/AVX2/generic), multi-threaded"});
#if EMBER_WITH_DNNL
  register_dnnl_matmul(info);  // matmul_dnnl.cpp: oneDNN, kVendor
#endif
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dim, got ", a.shape(), " and ",
              b.shape());
  DType t = promote_types(a.dtype(), b.dtype());
  if (!is_floating(t)) t = kDefaultFloat;
  Tensor x = a.dtype() == t ? a : cast(a, t), y = b.dtype() == t ? b : cast(b, t);
  bool va = x.dim() == 1, vb = y.dim() == 1;
  if (va) x = x.unsqueeze(0);
  if (vb) y = y.unsqueeze(-1);
  Tensor r = call1(OpId::matmul, {x, y});
  if (va) r = r.squeeze(-2);
  if (vb) r = r.squeeze(-1);
  return r;
}

}  // namespace ember
