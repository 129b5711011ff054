// Problem setup shared by the CUDA GEMM variants, and the naive oracle.
//
// naive: one thread per output element, 16x16 blocks, the K loop straight from global memory
// through any strides, accumulating in acc_t (f32 for f16/bf16, f64 for f64). It is the
// kernel-level oracle (kReference): simple enough to trust, never chosen by default.
// Every FMA loads two operands (through L1/L2), so it runs far below the tiled kernels; it exists
// to be obviously right.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include <algorithm>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/gemm/gemm_common.cuh"

namespace ember::gemm {

namespace dev {

template <class T>
__global__ void naive_kernel(Args p) {
  using Acc = acc_t<T>;
  const T* A = static_cast<const T*>(p.a);
  const T* B = static_cast<const T*>(p.b);
  const T* bias = static_cast<const T*>(p.bias);
  T* C = static_cast<T*>(p.c);
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= p.N) return;
  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    int64_t ao, bo;
    batch_offsets(p, z, ao, bo);
    for (int64_t m = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; m < p.M;
         m += static_cast<int64_t>(gridDim.y) * blockDim.y) {
      const T* arow = A + ao + m * p.a_rs;
      const T* bcol = B + bo + n * p.b_cs;
      Acc acc = 0;
      for (int64_t k = 0; k < p.K; ++k) acc += static_cast<Acc>(arow[k * p.a_cs]) * static_cast<Acc>(bcol[k * p.b_rs]);
      if (bias != nullptr) acc += static_cast<Acc>(bias[n]);
      C[z * p.c_bs + m * p.c_rs + n] = static_cast<T>(activate(acc, p.act));
    }
  }
}

Args make_args(const Problem& p, int vec_bytes) {
  Args a{};
  a.M = p.M;
  a.N = p.N;
  a.K = p.K;
  a.a = p.a;
  a.a_rs = p.a_rs;
  a.a_cs = p.a_cs;
  a.b = p.b;
  a.b_rs = p.b_rs;
  a.b_cs = p.b_cs;
  a.c = p.c;
  a.c_rs = p.c_rs;
  a.c_bs = p.c_bs;
  a.bias = p.bias;
  a.act = p.act;
  a.nb = p.nb;
  a.batch = p.batch();
  for (int d = 0; d < p.nb; ++d) {
    a.bsize[d] = p.bsize[d];
    a.a_bs[d] = p.a_bs[d];
    a.b_bs[d] = p.b_bs[d];
  }
  const int64_t es = static_cast<int64_t>(dtype_size(p.dtype));
  const int64_t V = std::max<int64_t>(1, vec_bytes / es);
  auto ptr_ok = [&](const void* ptr, int64_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  auto batch_ok = [&](const int64_t* bs, int64_t v) {
    for (int d = 0; d < p.nb; ++d)
      if (bs[d] % v != 0) return false;
    return true;
  };
  if (p.a_kmajor()) a.a_vec = ptr_ok(p.a, V * es) && p.a_rs % V == 0 && p.K % V == 0 && batch_ok(p.a_bs, V);
  else a.a_vec = ptr_ok(p.a, V * es) && p.a_cs % V == 0 && p.M % V == 0 && batch_ok(p.a_bs, V);
  if (p.b_kmajor()) a.b_vec = ptr_ok(p.b, V * es) && p.b_cs % V == 0 && p.K % V == 0 && batch_ok(p.b_bs, V);
  else a.b_vec = ptr_ok(p.b, V * es) && p.b_rs % V == 0 && p.N % V == 0 && batch_ok(p.b_bs, V);
  a.c_vec = ptr_ok(p.c, V * es) && p.c_rs % V == 0 && p.c_bs % V == 0;
  a.c_pair = ptr_ok(p.c, 2 * es) && p.c_rs % 2 == 0 && p.c_bs % 2 == 0;
  a.kt_per_split = int64_t{1} << 40;  // one range holding every k tile
  a.ws = nullptr;
  a.tickets = nullptr;
  a.a_mask = nullptr;
  a.row_sum = nullptr;
  return a;
}

const char* fused_shape_refusal(const Problem& p) {
  constexpr int64_t kIntMax = (int64_t{1} << 31) - 1;
  if (p.batch() != 1) return "batched";
  if (p.b_kmajor()) return "B is not row-major";
  if (p.M > kIntMax || p.N > kIntMax || p.K > kIntMax) return "M, N or K past int32";
  return nullptr;
}

void check_fused_call(const Problem& p, const OuterFusion& fuse, const char* why, const char* name) {
  EMBER_CHECK(why == nullptr, "gemm ", name, ": the problem [", p.M, ", ", p.K, "] x [", p.K, ", ", p.N,
              "] is not taken: ", why ? why : "");
  EMBER_CHECK(fuse.row_sum == nullptr || p.N > 0, "gemm ", name, ": row sums need at least one column of C");
}

int choose_splits(int64_t tiles, int64_t ktiles, int64_t min_kt, int device) {
  const int64_t sms = cuda::sm_count(device);
  if (tiles * 2 > sms || ktiles < 2 * min_kt) return 1;
  const int64_t want = (sms + tiles - 1) / tiles;
  return static_cast<int>(std::max<int64_t>(1, std::min({want, ktiles / min_kt, int64_t{32}})));
}

int plan_splits(Args& args, const Problem& p, int64_t ktiles, int splits, int acc_bytes, int64_t tiles, Tensor& ws,
                cudaStream_t stream) {
  const int64_t per = (ktiles + splits - 1) / splits;
  const int used = static_cast<int>((ktiles + per - 1) / per);  // every split gets at least one k tile
  const int64_t elems = used * args.batch * p.M * p.N;
  ws = empty({elems}, TensorOptions(acc_bytes == 8 ? DType::f64 : DType::f32).device(p.device));
  args.kt_per_split = per;
  args.ws = ws.data_ptr();
  // choose_splits splits only grids of at most half the SMs, so the tiles fit the tickets
  args.tickets =
      tiles <= static_cast<int64_t>(cuda::kStreamTickets) ? cuda::stream_tickets(p.device.index, stream) : nullptr;
  return used;
}

// out[z, m, n] = act(sum over splits of ws[s][z][m][n] + bias[n]), the splits added in order.
template <class T, class Acc>
__global__ void splitk_reduce_kernel(const Acc* __restrict__ ws, int splits, int64_t total, int64_t M, int64_t N, T* C,
                                     int64_t c_rs, int64_t c_bs, const T* bias, int act) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i % N, m = (i / N) % M, z = i / (M * N);
    Acc v = 0;
    for (int s = 0; s < splits; ++s) v += ws[s * total + i];
    if (bias != nullptr) v += static_cast<Acc>(bias[n]);
    C[z * c_bs + m * c_rs + n] = static_cast<T>(activate(v, act));
  }
}

void finish_splits(const Args& args, const Problem& p, int splits, cudaStream_t stream) {
  if (args.tickets != nullptr) return;  // the GEMM kernel's last blocks reduced (finish_split_tile)
  const int64_t total = args.batch * p.M * p.N;
  const unsigned grid = cuda::grid_for(total, 256, p.device.index);
  EMBER_DISPATCH_FLOAT(p.dtype, "gemm split-K", [&] {
    using Acc = acc_t<scalar_t>;
    cuda::launch(splitk_reduce_kernel<scalar_t, Acc>, grid, 256, 0, stream, static_cast<const Acc*>(args.ws), splits,
                 total, p.M, p.N, static_cast<scalar_t*>(p.c), p.c_rs, p.c_bs, static_cast<const scalar_t*>(p.bias),
                 p.act);
  });
}

}  // namespace dev

void sum_splits(DType dtype, const void* ws, int splits, int64_t n, void* out, cudaStream_t stream, int device) {
  // one row of n outputs: no bias, no activation
  EMBER_DISPATCH_FLOAT(dtype, "split-K sum", [&] {
    using Acc = acc_t<scalar_t>;
    cuda::launch(dev::splitk_reduce_kernel<scalar_t, Acc>, cuda::grid_for(n, 256, device), 256, 0, stream,
                 static_cast<const Acc*>(ws), splits, n, int64_t{1}, n, static_cast<scalar_t*>(out), n, int64_t{0},
                 static_cast<const scalar_t*>(nullptr), 0);
  });
}

namespace {

// Strides of a matrix with R rows and C columns, made canonical where a dim of size 1 leaves them
// free: a single row or column gets the strides its contiguous copy would have.
void canonical_strides(int64_t R, int64_t C, int64_t& rs, int64_t& cs) {
  if (R == 1 && C == 1) {
    rs = 1;
    cs = 1;
  } else if (C == 1) {
    cs = 1;  // a column: row-major with leading dim rs
  } else if (R == 1) {
    rs = cs == 1 ? C : 1;
  }
}

bool layout_ok(int64_t R, int64_t C, int64_t rs, int64_t cs, Layout need) {
  switch (need) {
    case Layout::any: return true;
    case Layout::unit_stride: return cs == 1 || rs == 1;
    case Layout::vendor:
      if (cs == 1) return rs >= std::max<int64_t>(1, C);
      return rs == 1 && cs >= std::max<int64_t>(1, R);
  }
  return false;
}

// Batch strides of t (a [..., R, C] tensor) aligned to the output's batch shape (0 where broadcast).
int64_t batch_stride(const Tensor& t, const Shape& batch, int d) {
  const int tb = t.dim() - 2, nb = batch.size();
  const int i = d - (nb - tb);
  if (i < 0 || t.shape()[i] == 1) return 0;
  return t.strides()[i];
}

Problem matmul_problem(const Tensor& a, const Tensor& b, const Tensor& out) {
  Problem p;
  p.dtype = out.dtype();
  p.device = out.device();
  p.M = a.shape()[a.dim() - 2];
  p.K = a.shape()[a.dim() - 1];
  p.N = b.shape()[b.dim() - 1];
  p.a = a.data_ptr();
  p.a_rs = a.strides()[a.dim() - 2];
  p.a_cs = a.strides()[a.dim() - 1];
  p.b = b.data_ptr();
  p.b_rs = b.strides()[b.dim() - 2];
  p.b_cs = b.strides()[b.dim() - 1];
  canonical_strides(p.M, p.K, p.a_rs, p.a_cs);
  canonical_strides(p.K, p.N, p.b_rs, p.b_cs);
  p.c = out.data_ptr();
  p.c_rs = p.N;
  p.c_bs = p.M * p.N;
  // batch dims of size != 1, outermost first, then merged where both operands are contiguous
  // across them (C always is)
  Shape batch(out.shape().begin(), out.shape().end() - 2);
  int64_t size[kMaxDims], as[kMaxDims], bs[kMaxDims];
  int n = 0;
  for (int d = 0; d < static_cast<int>(batch.size()); ++d) {
    if (batch[d] == 1) continue;
    size[n] = batch[d];
    as[n] = batch_stride(a, batch, d);
    bs[n] = batch_stride(b, batch, d);
    if (n > 0 && as[n - 1] == as[n] * size[n] && bs[n - 1] == bs[n] * size[n]) {
      size[n - 1] *= size[n];
      as[n - 1] = as[n];
      bs[n - 1] = bs[n];
      continue;
    }
    ++n;
  }
  EMBER_CHECK(n <= kMaxBatchDims, "matmul: too many batch dims (", n, ")");
  p.nb = n;
  for (int d = 0; d < n; ++d) {
    p.bsize[d] = size[d];
    p.a_bs[d] = as[d];
    p.b_bs[d] = bs[d];
  }
  return p;
}

}  // namespace

Prepared prepare_matmul(const Tensor& a, const Tensor& b, const Tensor& out, Layout need) {
  EMBER_CHECK(out.is_contiguous(), "gemm: the output must be contiguous, got ", out.describe());
  Prepared r;
  r.p = matmul_problem(a, b, out);
  const Problem& p = r.p;
  bool a_ok = layout_ok(p.M, p.K, p.a_rs, p.a_cs, need), b_ok = layout_ok(p.K, p.N, p.b_rs, p.b_cs, need);
  if (a_ok && b_ok) return r;
  Tensor a2 = a_ok ? a : a.contiguous(), b2 = b_ok ? b : b.contiguous();
  r.keep = {a2, b2};
  r.p = matmul_problem(a2, b2, out);
  return r;
}

Prepared prepare_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, int act, Layout need) {
  EMBER_CHECK(x.is_contiguous() && w.is_contiguous() && y.is_contiguous() && (!bias.defined() || bias.is_contiguous()),
              "linear: the CUDA kernels expect contiguous operands");
  Prepared r;
  Problem& p = r.p;
  const int64_t in_f = w.shape()[1], out_f = w.shape()[0];
  p.dtype = y.dtype();
  p.device = y.device();
  p.M = 1;
  for (int d = 0; d + 1 < y.dim(); ++d) p.M *= y.shape()[d];
  p.N = out_f;
  p.K = in_f;
  p.a = x.data_ptr();
  p.a_rs = in_f;
  p.a_cs = 1;
  p.b = w.data_ptr();  // B = w^T: element (k, n) is w[n, k]
  p.b_rs = 1;
  p.b_cs = in_f;
  canonical_strides(p.M, p.K, p.a_rs, p.a_cs);
  canonical_strides(p.K, p.N, p.b_rs, p.b_cs);
  p.c = y.data_ptr();
  p.c_rs = out_f;
  p.c_bs = p.M * out_f;
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.act = act;
  (void)need;  // contiguous x and w are valid for every layout requirement
  return r;
}

// The problem prepare_linear would make from contiguous x and W: x [rows, in] K-major, B = W^T
// read in place K-major.
bool wgmma_takes_linear(const Tensor& x, const Tensor& w, bool tf32) {
  if (!x.is_contiguous() || !w.is_contiguous() || !wgmma_supported(x.device().index)) return false;
  Problem p;
  p.dtype = x.dtype();
  p.K = w.shape()[1];
  p.N = w.shape()[0];
  p.M = p.K > 0 ? x.numel() / p.K : 0;
  p.a = x.data_ptr();
  p.a_rs = p.K;
  p.a_cs = 1;
  p.b = w.data_ptr();
  p.b_rs = 1;
  p.b_cs = p.K;
  return wgmma_refusal(p, tf32).empty();
}

// One 2-d product with the operands read in place (prepare_matmul would copy an operand with no
// unit stride; the kernel refuses it).
bool wgmma_takes_matmul(const Tensor& a, const Tensor& b, bool tf32) {
  if (a.dim() != 2 || b.dim() != 2 || !wgmma_supported(a.device().index)) return false;
  Problem p;
  p.dtype = a.dtype();
  p.M = a.shape()[0];
  p.K = a.shape()[1];
  p.N = b.shape()[1];
  p.a = a.data_ptr();
  p.a_rs = a.stride(0);
  p.a_cs = a.stride(1);
  p.b = b.data_ptr();
  p.b_rs = b.stride(0);
  p.b_cs = b.stride(1);
  return wgmma_refusal(p, tf32).empty();
}

void run_naive(const Problem& p) {
  const int64_t batch = p.batch();
  if (p.M == 0 || p.N == 0 || batch == 0) return;
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  dev::Args args = dev::make_args(p, 16);
  dim3 block(16, 16);
  dim3 grid(static_cast<unsigned>((p.N + 15) / 16), static_cast<unsigned>(std::min<int64_t>((p.M + 15) / 16, 65535)),
            dev::grid_z(batch));
  EMBER_DISPATCH_FLOAT(p.dtype, "gemm naive",
                       [&] { cuda::launch(dev::naive_kernel<scalar_t>, grid, block, 0, stream, args); });
}

}  // namespace ember::gemm
