// The kernel efficiency gate: a checked-in file of per-kernel expectations
// (bench/model/kernel_expectations.txt) checked against the simulator's efficiency counters and
// the ptxas resource table by `kernel_model --gate FILE --quick` (a ctest entry of the simulator
// build). One expectation per line:
//
//   <kernel-name glob>[@<call glob>]  <counter>  >=|<=|==  <value>  # why this bar (required)
//
// The glob matches the whole demangled kernel name as the simulator reports it; '*' matches any
// run of characters, '?' one character, nothing else is special (kernel names are full of
// brackets). A glob cannot hold a space: `*` stands in for "(anonymous namespace)". The optional
// call glob narrows the line to some of the calls that launched the kernel, matched against
// "op/variant/case dtype" (e.g. `@matmul/*` for the square, tile-aligned matmul cases only).
// Counters:
//   global_load_efficiency, global_store_efficiency, global_efficiency   ideal / touched sectors
//   shared_conflict_factor                               wavefronts / ideal wavefronts (1 = none)
//   occupancy                 theoretical, fraction of the SM's warps, at the launch's block size
//   spills, registers         from the resource table (spill bytes stored + loaded; per thread)
// Blank lines and lines starting with '#' are ignored.
#pragma once

#include <string>
#include <vector>

#include "bench/model/gpu_model.h"
#include "bench/model/roofline.h"

namespace ember::model {

struct Expectation {
  std::string glob, counter;
  std::string call_glob = "*";
  enum class Cmp { ge, le, eq } cmp = Cmp::ge;
  double value = 0;
  std::string why;
  std::string file;
  int line = 0;
  std::string where() const { return file + ":" + std::to_string(line); }
};

// Throws std::runtime_error "FILE:LINE: what is wrong" on a malformed line, an unknown counter, or
// a line without its reason.
std::vector<Expectation> parse_expectations(const std::string& text, const std::string& file);
std::vector<Expectation> load_expectations(const std::string& path);

bool glob_match(const std::string& pattern, const std::string& name);
// Whether a counter comes from the resource table (occupancy, spills, registers).
bool needs_resources(const std::string& counter);

// One kernel's launches within one op call, as the gate sees them.
struct GateSubject {
  KernelStats stats;
  std::string context;                         // "op/variant/case dtype", for the message
  const KernelResources* resources = nullptr;  // nullptr: not in the resource table
  double occupancy = -1;                       // < 0: unknown
};

// The value of a counter for a subject; false (and *why set) when it cannot be known.
bool counter_value(const GateSubject& s, const std::string& counter, double* value, std::string* why);

// Every violation as "kernel K [context]: counter C = X, expected >= Y (FILE:LINE)", and every
// line whose globs matched no subject as "FILE:LINE: no kernel that ran matches 'GLOB'".
std::vector<std::string> check_expectations(const std::vector<Expectation>& lines,
                                            const std::vector<GateSubject>& subjects);

}  // namespace ember::model
