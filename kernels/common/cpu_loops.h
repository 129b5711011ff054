// The generic CPU elementwise loop: one template runs every elementwise op (unary, binary,
// where, cast, copy) over an ElementwiseLayout, in parallel, with a tight inner loop that the
// compiler vectorises when every operand is contiguous.
//
//   cpu_map<Out, In...>(layout, {out, in...}, f): out[i] = f(in0[i], in1[i], ...)
// f receives the raw element values (Half/BFloat16 included) and returns something convertible to
// Out; op functors convert to acc_t themselves.
#pragma once

#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "core/parallel.h"
#include "kernels/common/layout.h"

namespace ember {

// Elements per parallel chunk: big enough that thread handoff is noise.
inline constexpr int64_t kCpuElementwiseGrain = 32768;

namespace detail {

template <class Out, class... Ins, class F, size_t... I>
inline void cpu_run(char* const* p, const int64_t* s, int64_t n, const F& f, std::index_sequence<I...>) {
  constexpr int N = sizeof...(Ins);
  bool dense = s[0] == static_cast<int64_t>(sizeof(Out));
  if constexpr (N > 0) {
    const size_t sizes[N] = {sizeof(Ins)...};
    for (int k = 0; k < N; ++k) dense = dense && s[k + 1] == static_cast<int64_t>(sizes[k]);
  }
  if (dense) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    std::tuple<const Ins*...> in{reinterpret_cast<const Ins*>(p[I + 1])...};
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(f(std::get<I>(in)[i]...));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out*>(p[0] + i * s[0]) =
        static_cast<Out>(f(*reinterpret_cast<const Ins*>(p[I + 1] + i * s[I + 1])...));
  }
}

}  // namespace detail

// Runs f over every element. operands[0] is the output; their dtypes must be Out, Ins... .
template <class Out, class... Ins, class F>
void cpu_map(const ElementwiseLayout& L, std::array<const Tensor*, 1 + sizeof...(Ins)> operands, const F& f) {
  constexpr int N = 1 + sizeof...(Ins);
  if (L.numel == 0) return;
  char* base[N];
  int64_t esize[N];
  for (int k = 0; k < N; ++k) {
    base[k] = static_cast<char*>(operands[k]->data_ptr());
    esize[k] = static_cast<int64_t>(operands[k]->element_size());
  }
  if (L.ndim == 0) {  // one element
    int64_t s[N];
    for (int k = 0; k < N; ++k) s[k] = esize[k];
    detail::cpu_run<Out, Ins...>(base, s, 1, f, std::index_sequence_for<Ins...>{});
    return;
  }
  const int nd = L.ndim;
  const int64_t inner = L.sizes[nd - 1];
  int64_t inner_stride[N];
  for (int k = 0; k < N; ++k) inner_stride[k] = L.strides[k][nd - 1] * esize[k];

  parallel_for(0, L.numel, kCpuElementwiseGrain, [&](int64_t begin, int64_t end) {
    // multi-index of `begin`
    int64_t idx[kMaxDims];
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % L.sizes[d];
      rem /= L.sizes[d];
    }
    int64_t pos = begin;
    while (pos < end) {
      int64_t run = std::min(end - pos, inner - idx[nd - 1]);
      char* p[N];
      for (int k = 0; k < N; ++k) {
        int64_t off = 0;
        for (int d = 0; d < nd; ++d) off += idx[d] * L.strides[k][d];
        p[k] = base[k] + off * esize[k];
      }
      detail::cpu_run<Out, Ins...>(p, inner_stride, run, f, std::index_sequence_for<Ins...>{});
      pos += run;
      // advance the multi-index by `run`
      idx[nd - 1] += run;
      for (int d = nd - 1; d > 0 && idx[d] >= L.sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

}  // namespace ember
