// Autotuning and backend choice, for every op in the registry (the cudnn.benchmark idea).
//
// With set_backend(op, "auto") (or set_backend_all("auto"), or set_backends("op=auto")), the first
// call of an op for a new key times every candidate variant and remembers the fastest; later calls
// with the same key run the winner with no timing. The key is (op, device and its name, input and
// output dtypes/shapes/strides, the attribute bytes, deterministic mode).
//
// Candidates: the variants for the device that accept the call, without kReference (the oracles
// and the lab's variants) and, in deterministic mode, without kNondeterministic ones (the registry
// filters them). A kSimOnly variant (run only in the simulator so far) is timed only after its
// outputs agree with the default variant's on the call (Note [simulator-only candidates] in
// autotune.cpp).
// Timing: a few warm-up runs, then `runs` timed runs, the median wins. On CUDA each run is timed
// with a pair of events on the current stream; on the CPU with the host's steady clock. The
// candidates write into scratch outputs (inputs that an op writes in place are cloned first), so
// tuning never changes the tensors of the call.
//
// Note [autotune sync]: tuning a new CUDA key synchronises the host once (it waits for the last
// timing event), and once more per simulator-only candidate checked; steady state adds no sync.
// While the current stream captures a CUDA graph nothing is timed: a key already tuned uses its
// winner, a new key the op's default variant (and is tuned on a later eager call).
//
// Disk cache: set_cache_file(path) loads the file's entries (a text file: a header line
// "# ember autotune cache v1", then one "key<TAB>variant" line per entry) and appends each new
// winner to it, one line per write() (processes sharing the file never interleave their lines).
// A damaged or foreign file gives one warning naming the file and the line, none of its entries
// is used, and it is started again (replaced atomically by the header alone); a file that cannot
// be created gives a warning too. A cached variant that no longer exists or does not accept the
// call is tuned again.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/registry.h"

namespace ember {

// Backend preferences as a string, e.g. "matmul=cublas,linear=auto,conv2d=cudnn". Each item is
// op=backend, where op is an op name or "*" (every op) and backend is default, auto, vendor, or
// the name of one of the op's variants; default, auto or vendor alone means every op ("vendor" is
// "*=vendor"). Errors name the unknown op or backend (with the known ones); nothing is changed
// unless the whole string is valid.
void set_backends(const std::string& spec);
// The current non-default preferences in the same syntax ("" when every op uses its default).
std::string backends();

namespace autotune {

// Installs the registry hook (the registry does this when it is first used).
void install();

// The tuner itself: picks one of `candidates` for the call (tuning it when the key is new).
// Returns nullptr when nothing could be timed (e.g. every candidate threw, or a new key while a
// graph is captured). This is the function installed as the registry's hook.
const Variant* choose(const OpInfo& info, const KernelCall& c, std::span<const Variant* const> candidates);

// The cache key of a call (see above). A CPU is named by its model, ISA and thread count; a GPU by
// its model, compute capability, the driver, CUDA runtime, cuBLASLt and cuDNN versions it runs with
// and ember's commit.
std::string key(const OpInfo& info, const KernelCall& c);

void set_cache_file(const std::string& path);  // "" stops using a file (entries stay in memory)
std::string cache_file();
void clear();  // forgets the in-memory entries (not the file), the disagreeing variants, the last warning

struct Entry {
  std::string key, variant;
  double ms = 0;           // median time of the winner (0 when loaded from disk)
  bool from_file = false;  // loaded from the cache file
};
std::vector<Entry> entries();

struct Stats {
  uint64_t tunings = 0;            // keys timed
  uint64_t hits = 0;               // calls served from the cache
  uint64_t capture_skips = 0;      // new keys seen while a graph was captured (default used)
  uint64_t failures = 0;           // candidates that threw while being timed (skipped)
  uint64_t keys_from_file = 0;     // keys the cache file answered (each counted once)
  double tuning_s = 0;             // wall time spent timing candidates
  uint64_t sim_only_checks = 0;    // kSimOnly candidates compared with the default before timing
  uint64_t sim_only_rejected = 0;  // ... that disagreed (left out on their device from then on)
};
Stats stats();
void reset_stats();

// Warm-up and timed runs per candidate (defaults 2 and 5).
void set_runs(int warmup, int timed);

// Tests of what follows from measurements: `ms_of` gives each candidate's time instead of running
// it (nullptr: measure again).
void set_timer_for_testing(double (*ms_of)(const Variant& v));

// The last warning ("" when none): about the cache file, or a simulator-only variant that
// disagreed with the default. Also printed to stderr.
std::string last_warning();

}  // namespace autotune
}  // namespace ember
