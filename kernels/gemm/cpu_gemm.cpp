// The blocked CPU GEMM (see cpu_gemm.h for the design).
//
// The AVX2 micro-kernel issues 12 FMAs for 2 B loads and 6 broadcasts per k step, the AVX-512 one
// 24 FMAs for 2 loads and 12 broadcasts, so the loads never limit it; what is left is packing
// (O(MK + KN) per batch against O(MNK) FLOPs) and the tile edges.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include "kernels/gemm/cpu_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "kernels/ops/unary.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define EMBER_GEMM_X86 1
#include <cpuid.h>
#else
#define EMBER_GEMM_X86 0
#endif

#define EMBER_GEMM_INLINE __attribute__((always_inline)) inline

namespace ember::gemm {

namespace {

// ---- ISA choice ----

enum class Isa : int { generic = 0, avx2 = 1, avx512 = 2 };

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "generic";
  }
}

bool isa_supported(Isa i) {
#if EMBER_GEMM_X86
  if (i == Isa::avx512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (i == Isa::avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return true;
#else
  return i == Isa::generic;
#endif
}

// AMD's Zen 4 (family 19h) runs 512-bit FMAs as two 256-bit halves: the AVX2 kernel is faster
// there, its 6x16 tile having less edge work (docs/perf.md, "Measurements behind kernel
// decisions"), so it is preferred; Intel's server cores and Zen 5 have full-width AVX-512 units.
bool half_rate_avx512() {
#if EMBER_GEMM_X86
  if (!__builtin_cpu_is("amd")) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  unsigned family = (eax >> 8) & 0xf;
  if (family == 0xf) family += (eax >> 20) & 0xff;
  return family <= 0x19;
#else
  return false;
#endif
}

Isa best_isa() {
  static const Isa best = [] {
    if (isa_supported(Isa::avx512) && !half_rate_avx512()) return Isa::avx512;
    if (isa_supported(Isa::avx2)) return Isa::avx2;
    return Isa::generic;
  }();
  return best;
}

std::atomic<int> g_forced_isa{-1};

Isa current_isa() {
  int f = g_forced_isa.load(std::memory_order_relaxed);
  return f < 0 ? best_isa() : static_cast<Isa>(f);
}

// ---- aligned scratch ----

template <class S>
struct Buffer {
  explicit Buffer(size_t n) : n_(n) {
    if (n > 0) p_ = static_cast<S*>(::operator new(n * sizeof(S), std::align_val_t(64)));
  }
  ~Buffer() {
    if (p_ != nullptr) ::operator delete(p_, std::align_val_t(64));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  S* get() const { return p_; }

 private:
  S* p_ = nullptr;
  size_t n_ = 0;
};

// ---- the micro-kernel and the tile loop (compiled once per ISA) ----

template <class S, int W>
struct Vec {
  typedef S type __attribute__((vector_size(W * sizeof(S))));
};

// One MR x NR micro-tile over kc steps: a is an MR-row panel (kc x MR, k-major), b an NR-column
// panel (kc x NR). C (row stride ldc) is set (first) or accumulated; only mr x nr of it is valid
// (the panels are zero-padded, so the registers always hold a full tile).
template <class S, int W, int MR, int NV>
EMBER_GEMM_INLINE void micro(int64_t kc, const S* __restrict a, const S* __restrict b, S* __restrict c, int64_t ldc,
                             int mr, int nr, bool first) {
  using V = typename Vec<S, W>::type;
  constexpr int NR = W * NV;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int64_t k = 0; k < kc; ++k) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + k * NR + v * W, sizeof(V));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const S s = a[k * MR + i];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += s * bv[v];
    }
  }
  if (mr == MR && nr == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        S* p = c + i * ldc + v * W;
        V cur = acc[i][v];
        if (!first) {
          V old;
          std::memcpy(&old, p, sizeof(V));
          cur += old;
        }
        std::memcpy(p, &cur, sizeof(V));
      }
    return;
  }
  alignas(64) S tmp[MR * NR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(tmp + i * NR + v * W, &acc[i][v], sizeof(V));
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      S x = tmp[i * NR + j];
      c[i * ldc + j] = first ? x : c[i * ldc + j] + x;
    }
}

// Called once per micro-tile after its last K block: bias, activation, rounding to the output type.
template <class S>
using FinishFn = void (*)(const void* ctx, const S* src, int64_t lds, int64_t i, int64_t j, int mr, int nr);

// One MC x NC output tile of one batch.
template <class S>
struct Block {
  const S* ap = nullptr;  // packed A: the MR-row panel p starts at ap + p * K * MR
  const S* bp = nullptr;  // packed B: the NR-column panel q starts at bp + q * K * NR
  int64_t K = 0, KC = 0;
  int64_t m0 = 0, m1 = 0, n0 = 0, n1 = 0;  // m0 a multiple of MR, n0 of NR
  S* c = nullptr;                          // element (m0, n0): the output itself or a scratch tile
  int64_t ldc = 0;
  FinishFn<S> finish = nullptr;
  const void* ctx = nullptr;
};

template <class S, int W, int MR, int NV>
EMBER_GEMM_INLINE void run_block(const Block<S>& t) {
  constexpr int NR = W * NV;
  for (int64_t pc = 0; pc < t.K; pc += t.KC) {
    const int64_t kc = std::min(t.KC, t.K - pc);
    const bool first = pc == 0, last = pc + kc == t.K;
    for (int64_t j = t.n0; j < t.n1; j += NR) {
      const int nr = static_cast<int>(std::min<int64_t>(NR, t.n1 - j));
      const S* bpan = t.bp + (j / NR) * t.K * NR + pc * NR;
      for (int64_t i = t.m0; i < t.m1; i += MR) {
        const int mr = static_cast<int>(std::min<int64_t>(MR, t.m1 - i));
        const S* apan = t.ap + (i / MR) * t.K * MR + pc * MR;
        S* cc = t.c + (i - t.m0) * t.ldc + (j - t.n0);
        micro<S, W, MR, NV>(kc, apan, bpan, cc, t.ldc, mr, nr, first);
        if (last && t.finish != nullptr) t.finish(t.ctx, cc, t.ldc, i, j, mr, nr);
      }
    }
  }
}

#define EMBER_GEMM_BLOCK_FN(name, attr, S, W, MR, NV) \
  attr void name(const Block<S>& t) { run_block<S, W, MR, NV>(t); }

#if EMBER_GEMM_X86
#define EMBER_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define EMBER_AVX2 __attribute__((target("avx2,fma")))
EMBER_GEMM_BLOCK_FN(block_avx512_f32, EMBER_AVX512, float, 16, 12, 2)
EMBER_GEMM_BLOCK_FN(block_avx512_f64, EMBER_AVX512, double, 8, 12, 2)
EMBER_GEMM_BLOCK_FN(block_avx2_f32, EMBER_AVX2, float, 8, 6, 2)
EMBER_GEMM_BLOCK_FN(block_avx2_f64, EMBER_AVX2, double, 4, 6, 2)
#endif
EMBER_GEMM_BLOCK_FN(block_generic_f32, , float, 4, 6, 2)
EMBER_GEMM_BLOCK_FN(block_generic_f64, , double, 2, 6, 2)

template <class S>
struct Kernel {
  int mr, nr;
  int64_t kc, mc, nc;  // K block, preferred tile rows and columns
  void (*run)(const Block<S>&);
};

// KC keeps a B sliver (KC x NR) near 16 KiB so it stays in L1 while the MC x KC block of A streams
// from L2; MC x KC stays well inside a 1 MiB L2.
template <class S>
Kernel<S> kernel_for(Isa isa) {
  constexpr bool f32 = std::is_same_v<S, float>;
  auto make = [](int mr, int nr, void (*run)(const Block<S>&)) {
    int64_t kc = std::clamp<int64_t>(16384 / (nr * static_cast<int64_t>(sizeof(S))), 64, 256);
    int64_t mc = 96 / mr * mr;
    int64_t nc = 512 / nr * nr;
    return Kernel<S>{mr, nr, kc, mc, nc, run};
  };
  if constexpr (f32) {
#if EMBER_GEMM_X86
    if (isa == Isa::avx512) return make(12, 32, &block_avx512_f32);
    if (isa == Isa::avx2) return make(6, 16, &block_avx2_f32);
#endif
    return make(6, 8, &block_generic_f32);
  } else {
#if EMBER_GEMM_X86
    if (isa == Isa::avx512) return make(12, 16, &block_avx512_f64);
    if (isa == Isa::avx2) return make(6, 8, &block_avx2_f64);
#endif
    return make(6, 4, &block_generic_f64);
  }
}

// ---- packing (plain C++; runs at memory speed) ----

// Rows [p*W, p*W + W) of an R x K matrix X (X[r][k] at x[r * rs + k * cs]) into panel p:
// dst[k * W + r], zero rows past R. A's MR-row panels are panels of A, B's NR-column panels are
// panels of B^T (B with its strides swapped).
template <class T, class S>
void pack_panel(const T* x, int64_t rs, int64_t cs, int64_t R, int64_t K, int W, int64_t p, S* dst) {
  const int64_t r0 = p * W;
  const int w = static_cast<int>(std::min<int64_t>(W, R - r0));
  if (cs == 1) {  // each row contiguous: read along k
    for (int r = 0; r < w; ++r) {
      const T* src = x + (r0 + r) * rs;
      for (int64_t k = 0; k < K; ++k) dst[k * W + r] = static_cast<S>(src[k]);
    }
  } else if (rs == 1) {  // each column contiguous: read and write along r
    for (int64_t k = 0; k < K; ++k) {
      const T* src = x + k * cs + r0;
      S* d = dst + k * W;
      for (int r = 0; r < w; ++r) d[r] = static_cast<S>(src[r]);
    }
  } else {
    for (int64_t k = 0; k < K; ++k)
      for (int r = 0; r < w; ++r) dst[k * W + r] = static_cast<S>(x[(r0 + r) * rs + k * cs]);
  }
  if (w < W)
    for (int64_t k = 0; k < K; ++k)
      for (int r = w; r < W; ++r) dst[k * W + r] = S(0);
}

template <class T, class S>
void pack_a_panel(const T* a, int64_t rs, int64_t cs, int64_t M, int64_t K, int MR, int64_t p, S* dst) {
  pack_panel(a, rs, cs, M, K, MR, p, dst);
}

template <class T, class S>
void pack_b_panel(const T* b, int64_t rs, int64_t cs, int64_t N, int64_t K, int NR, int64_t q, S* dst) {
  pack_panel(b, cs, rs, N, K, NR, q, dst);
}

// ---- epilogue ----

template <class T>
struct FinishCtx {
  T* c = nullptr;  // this batch's output
  int64_t c_rs = 0;
  const T* bias = nullptr;
  int64_t bias_s = 1;
  int act = 0;
};

template <class S>
EMBER_GEMM_INLINE S activate(S v, int act) {
  if (act == 1) return unary::Relu::f(v);
  if (act == 2) return unary::Gelu::f(v);
  return v;
}

template <class T, class S>
void finish_tile(const void* vctx, const S* src, int64_t lds, int64_t i, int64_t j, int mr, int nr) {
  const auto& f = *static_cast<const FinishCtx<T>*>(vctx);
  for (int r = 0; r < mr; ++r) {
    T* out = f.c + (i + r) * f.c_rs + j;
    const S* s = src + r * lds;
    for (int q = 0; q < nr; ++q) {
      S v = s[q];
      if (f.bias != nullptr) v += static_cast<S>(f.bias[(j + q) * f.bias_s]);
      out[q] = static_cast<T>(activate(v, f.act));
    }
  }
}

// C = act(bias) when K == 0 (an empty sum is 0).
template <class T, class S>
void fill_empty_k(const CpuGemm<T>& g) {
  for (int64_t b = 0; b < g.batch; ++b) {
    T* c = g.c + (g.c_off != nullptr ? g.c_off[b] : 0);
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) {
        S v = g.bias != nullptr ? static_cast<S>(g.bias[j * g.bias_s]) : S(0);
        c[i * g.c_rs + j] = static_cast<T>(activate(v, g.act));
      }
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// What both schedules share: the micro-kernel, the packed panels' sizes and the epilogue.
template <class T, class S>
struct GemmPlan {
  static constexpr bool narrow = !std::is_same_v<T, S>;  // accumulate in S, then cast into T
  Kernel<S> kern;
  int64_t mpanels = 0, npanels = 0;
  size_t a_elems = 0, b_elems = 0;
  FinishFn<S> finish = nullptr;
  double flops = 0;
};

int64_t offset_of(const int64_t* o, int64_t b) { return o != nullptr ? o[b] : int64_t{0}; }

// One block of C (rows m0..m1, columns n0..n1 of batch entry ctx) with its scratch, if narrow.
template <class T, class S>
void gemm_block(const GemmPlan<T, S>& plan, const S* ap, const S* bp, int64_t K, const FinishCtx<T>& ctx, int64_t m0,
                int64_t m1, int64_t n0, int64_t n1, S* scratch, int64_t scratch_ld) {
  Block<S> t;
  t.ap = ap;
  t.bp = bp;
  t.K = K;
  t.KC = plan.kern.kc;
  t.m0 = m0;
  t.m1 = m1;
  t.n0 = n0;
  t.n1 = n1;
  if constexpr (GemmPlan<T, S>::narrow) {
    t.c = scratch;
    t.ldc = scratch_ld;
  } else {
    t.c = ctx.c + m0 * ctx.c_rs + n0;
    t.ldc = ctx.c_rs;
  }
  t.finish = plan.finish;
  t.ctx = &ctx;
  plan.kern.run(t);
}

// Many small problems: one batch entry per task, everything inside it serial.
template <class T, class S>
void gemm_small_batches(const CpuGemm<T>& g, const GemmPlan<T, S>& plan) {
  const int MR = plan.kern.mr, NR = plan.kern.nr;
  const int64_t M = g.M, N = g.N, K = g.K;
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(1e6 / plan.flops));
  parallel_for(0, g.batch, grain, [&](int64_t lo, int64_t hi) {
    Buffer<S> ap(plan.a_elems), bp(plan.b_elems), scratch(plan.narrow ? static_cast<size_t>(M * N) : 0);
    for (int64_t b = lo; b < hi; ++b) {
      if (b == lo || offset_of(g.a_off, b) != offset_of(g.a_off, b - 1))
        for (int64_t p = 0; p < plan.mpanels; ++p)
          pack_a_panel<T, S>(g.a + offset_of(g.a_off, b), g.a_rs, g.a_cs, M, K, MR, p, ap.get() + p * K * MR);
      if (b == lo || offset_of(g.b_off, b) != offset_of(g.b_off, b - 1))
        for (int64_t q = 0; q < plan.npanels; ++q)
          pack_b_panel<T, S>(g.b + offset_of(g.b_off, b), g.b_rs, g.b_cs, N, K, NR, q, bp.get() + q * K * NR);
      FinishCtx<T> ctx{g.c + offset_of(g.c_off, b), g.c_rs, g.bias, g.bias_s, g.act};
      gemm_block(plan, ap.get(), bp.get(), K, ctx, 0, M, 0, N, scratch.get(), N);
    }
  });
}

// One large problem (or a few): the batch entries in turn, each packed and then cut into MC x NC
// tiles, shrunk from the preferred size until there are enough tiles to keep every thread busy.
template <class T, class S>
void gemm_tiled(const CpuGemm<T>& g, const GemmPlan<T, S>& plan) {
  const int MR = plan.kern.mr, NR = plan.kern.nr;
  const int64_t M = g.M, N = g.N, K = g.K;
  const int threads = in_parallel_region() ? 1 : num_threads();
  int64_t mc = std::min(plan.kern.mc, round_up(M, MR)), nc = std::min(plan.kern.nc, round_up(N, NR));
  const int64_t want = plan.flops < 2e6 ? 1 : int64_t{4} * threads;
  while (ceil_div(M, mc) * ceil_div(N, nc) < want) {
    if (nc / NR >= mc / MR && nc > NR) nc = round_up(nc / 2, NR);
    else if (mc > MR) mc = round_up(mc / 2, MR);
    else break;
  }
  const int64_t tiles_n = ceil_div(N, nc), tiles = ceil_div(M, mc) * tiles_n;
  Buffer<S> ap(plan.a_elems), bp(plan.b_elems);
  for (int64_t b = 0; b < g.batch; ++b) {
    const bool pack_a = b == 0 || offset_of(g.a_off, b) != offset_of(g.a_off, b - 1);
    const bool pack_b = b == 0 || offset_of(g.b_off, b) != offset_of(g.b_off, b - 1);
    const int64_t na = pack_a ? plan.mpanels : 0, nb = pack_b ? plan.npanels : 0;
    const T* a = g.a + offset_of(g.a_off, b);
    const T* bb = g.b + offset_of(g.b_off, b);
    const int64_t pgrain = std::max<int64_t>(1, 65536 / (K * std::max(MR, NR)));
    parallel_for(0, na + nb, pgrain, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        if (p < na) pack_a_panel<T, S>(a, g.a_rs, g.a_cs, M, K, MR, p, ap.get() + p * K * MR);
        else pack_b_panel<T, S>(bb, g.b_rs, g.b_cs, N, K, NR, p - na, bp.get() + (p - na) * K * NR);
      }
    });
    FinishCtx<T> ctx{g.c + offset_of(g.c_off, b), g.c_rs, g.bias, g.bias_s, g.act};
    parallel_for(0, tiles, want == 1 ? tiles : 1, [&](int64_t lo, int64_t hi) {
      Buffer<S> scratch(plan.narrow ? static_cast<size_t>(mc * nc) : 0);
      for (int64_t tile = lo; tile < hi; ++tile) {
        const int64_t m0 = tile / tiles_n * mc, n0 = tile % tiles_n * nc;
        gemm_block(plan, ap.get(), bp.get(), K, ctx, m0, std::min(M, m0 + mc), n0, std::min(N, n0 + nc), scratch.get(),
                   nc);
      }
    });
  }
}

}  // namespace

template <class T>
void cpu_gemm(const CpuGemm<T>& g) {
  using S = acc_t<T>;
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, double>);
  EMBER_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0 && g.batch >= 0, "cpu_gemm: negative size M=", g.M, " N=", g.N,
              " K=", g.K, " batch=", g.batch);
  if (g.M == 0 || g.N == 0 || g.batch == 0) return;
  if (g.K == 0) {
    fill_empty_k<T, S>(g);
    return;
  }
  GemmPlan<T, S> plan;
  plan.kern = kernel_for<S>(current_isa());
  plan.mpanels = ceil_div(g.M, plan.kern.mr);
  plan.npanels = ceil_div(g.N, plan.kern.nr);
  plan.a_elems = static_cast<size_t>(plan.mpanels * plan.kern.mr * g.K);
  plan.b_elems = static_cast<size_t>(plan.npanels * plan.kern.nr * g.K);
  const bool epilogue = plan.narrow || g.bias != nullptr || g.act != 0;
  plan.finish = epilogue ? &finish_tile<T, S> : nullptr;
  plan.flops = 2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  if (g.batch > 1 && plan.flops < 4e6) gemm_small_batches(g, plan);
  else gemm_tiled(g, plan);
}

template void cpu_gemm<float>(const CpuGemm<float>&);
template void cpu_gemm<double>(const CpuGemm<double>&);
template void cpu_gemm<Half>(const CpuGemm<Half>&);
template void cpu_gemm<BFloat16>(const CpuGemm<BFloat16>&);

std::string cpu_isa() { return isa_name(current_isa()); }

void set_cpu_isa(const std::string& isa) {
  if (isa.empty()) {
    g_forced_isa = -1;
    return;
  }
  for (Isa i : {Isa::avx512, Isa::avx2, Isa::generic}) {
    if (isa != isa_name(i)) continue;
    EMBER_CHECK(isa_supported(i), "set_cpu_isa: this CPU cannot run the ", isa, " GEMM kernels (it supports ",
                supported_cpu_isas(), ")");
    g_forced_isa = static_cast<int>(i);
    return;
  }
  EMBER_FAIL("set_cpu_isa: unknown ISA '", isa, "' (expected avx512, avx2, generic or \"\" for automatic)");
}

std::string default_cpu_isa() { return isa_name(best_isa()); }

std::string supported_cpu_isas() {
  std::string s;
  for (Isa i : {Isa::avx512, Isa::avx2, Isa::generic})
    if (isa_supported(i)) s += (s.empty() ? "" : ", ") + std::string(isa_name(i));
  return s;
}

}  // namespace ember::gemm
