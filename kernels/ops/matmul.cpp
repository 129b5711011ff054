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

Cost matmul_cost(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  double M = static_cast<double>(a.shape()[a.dim() - 2]), K = static_cast<double>(a.shape()[a.dim() - 1]);
  double N = static_cast<double>(b.shape()[b.dim() - 1]);
  double batch = static_cast<double>(c.out[0].numel()) / std::max(1.0, M * N);
  return {static_cast<double>(a.nbytes() + b.nbytes() + c.out[0].nbytes()), 2.0 * batch * M * N * K};
}

}  // namespace

void define_op_matmul(OpInfo& info) {
  info.doc = "batched matrix product";
  info.infer = infer_matmul;
  info.backward = matmul_vjp;
  info.save = Save::inputs;
  info.cost = matmul_cost;
  info.contiguous_inputs = false;
  info.autocast = AutocastPolicy::lower;
  // The reference loop stays first: the generic tests compare every other CPU variant with it.
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = matmul_cpu,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference loop, parallel over rows"});
  info.add_variant({.name = "cpu_blocked",
                    .device = DeviceType::cpu,
                    .fn = matmul_cpu_blocked,
                    .dtypes = kFloatTypes,
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
