// The registry's entry point for the benchmark lab (bench/lab/): variants that are not in the
// library but join an op's variants in the programs that link the lab.
//
// Note [lab variants]: kernels that exist only to be compared with are not in the library a user
// links: the one-thread-per-output CUDA oracles, and the variants that are neither a default nor a
// recorded winner (Note [library rule] in bench/lab/library_rule.h: softmax's forced row plans,
// index_add's atomics, ...). They are flagged kReference: never a default, never an autotune
// candidate. bench/lab/ builds them into ember_lab, which the tests and the benchmarks link;
// register_lab_variants() (bench/lab/lab.h) adds them at the start of main() through
// add_lab_variant, before any op has run: OpInfo::variants may only grow while nothing holds a
// pointer into it (the autotune cache and bench_ops keep `const Variant*`). A lab variant gets its
// variant_runs() slot like any other, so the GPU suite's coverage check (tests/main_gpu.cpp)
// requires it to run, and bench_ops and the parity tests run it as before.
#pragma once

#include "kernels/registry.h"

namespace ember {

// Adds lab variant `v` (flagged kReference) to op `id`. Fails for a variant without kReference,
// for a name the op already has on that device, and once any kernel variant has run.
void add_lab_variant(OpId id, Variant v);

}  // namespace ember
