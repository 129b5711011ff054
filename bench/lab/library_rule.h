// What keeps a kernel variant in the library rather than in the lab: the check behind
// tests/test_library_rule_gpu.cpp, and the reader of the GPU runs' results files (bench/results/).
//
// Note [library rule]: the library (kernels/) holds the variants production uses. A variant that is
// neither kVendor (cuBLAS, cuDNN, oneDNN: what ember is compared with and what `--backends vendor`
// runs) nor kReference (the oracles) earns its place by being chosen: for at least one of its op's
// test samples (tests/op_samples/, in each dtype the tests run it in) or benchmark cases
// (bench/op_shapes/) it is what the runner picks when nothing else is asked for
// (OpInfo::default_variant, with deterministic mode off or on), or it is the recorded winner of a
// benchmark case in a results file of a GPU run (bench/results/README.md). A variant that is
// neither is kept only to be compared with, so it belongs to the lab (bench/lab/, Note [lab
// variants] in kernels/lab_variants.h), where bench_ops and the parity tests still run it; or it
// stays, with the measurement that shows where it wins added to bench/results/. One exception
// waits for hardware: a variant flagged kSimOnly (it has run only in the simulator, so it is an
// autotune candidate checked against the default on each new key, Note [simulator-only candidates]
// in kernels/autotune.cpp) is kept as that, until a results file names it: a GPU run has then
// checked it, and the flag must go, leaving the variant to earn its place as any other. The check
// decides by selection alone: it builds calls from the inputs' shapes, strides and dtypes over
// storage that is never read, and runs no kernel.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/registry.h"

namespace ember {

// One line of a results file: one variant's time on one benchmark case.
struct BenchResult {
  std::string op, case_name, dtype, variant;
  std::string kind;  // "ember" or "vendor"
  double median_us = 0;
  bool winner = false;  // the fastest measured variant of its (op, case, dtype)
  std::string where;    // file:line, for messages
};

// Reads one results file (format: bench/results/README.md). Throws naming file:line on a line
// that does not follow the format.
std::vector<BenchResult> read_bench_results(const std::string& path);
// Every *.tsv file of `dir`, in name order. Throws when the folder does not exist.
std::vector<BenchResult> read_bench_results_dir(const std::string& dir);

// A call the rule asks the registry about: only the inputs' shapes, strides, offsets and dtypes
// matter (their values are never read, and they may live on any device).
struct RuleCall {
  std::string label;  // "sample 'transposed' f16", "benchmark '[64,784] -> 128 relu f32'"
  std::vector<Tensor> inputs;
  Attrs attrs;
  std::vector<DeviceType> devices;  // the devices whose default to ask for; empty: every device
};
// Hands op `info`'s calls to `visit`, in order, until `visit` returns false.
using RuleCalls = std::function<void(const OpInfo& info, const std::function<bool(const RuleCall&)>& visit)>;

struct RuleVerdict {
  const OpInfo* op = nullptr;
  const Variant* variant = nullptr;
  std::string earned_by;   // what keeps it in the library; empty: nothing does
  std::string ran_on_gpu;  // a kSimOnly variant's results line (file:line): its flag is stale
};

struct RuleReport {
  std::vector<RuleVerdict> verdicts;  // one per variant the rule applies to
  // Results lines that name an op, or an ember variant, the registry does not have (a stale name)
  std::vector<std::string> stale;
  size_t calls = 0;  // how many calls were asked about
  std::vector<const RuleVerdict*> failures() const;
  bool ok() const { return failures().empty() && stale.empty(); }
  // One line per failing variant and per stale results line, saying what to do; empty when ok()
  std::string message() const;
};

// Checks Note [library rule] for `ops`, asking `calls` for each op's calls until every variant of
// it is decided, and crediting the winners of `results`.
RuleReport check_library_rule(std::span<const OpInfo> ops, const RuleCalls& calls,
                              const std::vector<BenchResult>& results);

// The registry's calls for an op: its samples in the dtypes the tests run them in (f64 and the
// sample's dtypes on the CPU, the sample's on CUDA), then its benchmark cases with given input
// shapes, then those with custom inputs (made on the CPU, only when a variant is still undecided).
RuleCalls registry_rule_calls();

}  // namespace ember
