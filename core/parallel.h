// CPU parallelism: one process-wide pool of worker threads and parallel_for over index ranges.
//
// The pool size is EMBER_NUM_THREADS, else the hardware concurrency. A parallel_for inside another
// runs serially on the calling thread (no nested oversubscription). Exceptions thrown by the body
// reach the caller (the first one wins).
#pragma once

#include <cstdint>
#include <functional>

namespace ember {

int num_threads();
void set_num_threads(int n);

// Calls fn(begin_i, end_i) over disjoint chunks covering [begin, end). Chunks have at least
// `grain` indices; with fewer than 2*grain indices (or one thread) it runs inline.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// True inside a parallel_for body.
bool in_parallel_region();

}  // namespace ember
