// Shared by tests/test_autotune_side_effects.cpp (CPU) and test_autotune_side_effects_gpu.cpp:
// runs the autotuner over every op's samples and checks that timing the candidates left every
// tensor of the call exactly as it was (Note [autotune scratch] in kernels/autotune.cpp).
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "kernels/autotune.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember::test {

// The bytes of a tensor, dense and on the host ("" for an undefined one).
inline std::string tensor_bytes(const Tensor& t) {
  if (!t.defined()) return "";
  Tensor h = t.contiguous().cpu();
  return std::string(static_cast<const char*>(h.data_ptr()), static_cast<size_t>(h.nbytes()));
}

// A call as the runner builds it: inputs made contiguous when the op wants that, outputs from
// infer() (an aliased output is its input).
struct RunnerCall {
  std::vector<Tensor> in, out;
  Attrs attrs;
  RunnerCall(const OpInfo& info, std::vector<Tensor> inputs, const Attrs& a, Device device)
      : in(std::move(inputs)), attrs(a) {
    if (info.contiguous_inputs)
      for (Tensor& t : in)
        if (t.defined() && !t.is_contiguous()) t = t.contiguous();
    for (const TensorSpec& s : info.infer(in, attrs)) {
      if (s.alias >= 0) {
        out.push_back(in.at(static_cast<size_t>(s.alias)));
        continue;
      }
      TensorOptions o = TensorOptions().dtype(s.dtype).device(device);
      out.push_back(s.strides.empty() ? empty(s.shape, o) : empty_strided(s.shape, s.strides, o));
    }
  }
  KernelCall call(OpId id) { return KernelCall{id, in, out, attrs}; }
};

// Timing `candidates` on the call must leave every input (and so every in-place output) as it
// was. Returns "" when it does, else which input of which op changed.
inline std::string tuning_changed_inputs(const OpInfo& info, RunnerCall& rc, std::span<const Variant* const> cands) {
  std::vector<std::string> before;
  std::vector<uint64_t> versions;
  for (const Tensor& t : rc.in) {
    before.push_back(tensor_bytes(t));
    versions.push_back(t.defined() ? t.version() : 0);
  }
  autotune::clear();
  (void)autotune::choose(info, rc.call(info.id), cands);
  for (size_t i = 0; i < rc.in.size(); ++i) {
    if (tensor_bytes(rc.in[i]) != before[i]) return str(info.name, ": input ", i, " was written while tuning");
    if (rc.in[i].defined() && rc.in[i].version() != versions[i])
      return str(info.name, ": input ", i, "'s version changed while tuning");
  }
  return "";
}

// A clean tuner for one test (no cache file, few timing runs), restored at scope exit.
struct TunerReset {
  TunerReset() {
    autotune::set_cache_file("");
    autotune::clear();
    autotune::reset_stats();
    autotune::set_runs(1, 2);
  }
  ~TunerReset() {
    autotune::clear();
    autotune::set_runs(2, 5);
    set_backend_all("default");
  }
};

}  // namespace ember::test
