// The OpenMP runtime under the CPU vendor library (oneDNN runs its primitives on libgomp threads).
//
// Note [OpenMP wait policy]: libgomp's threads spin between parallel regions unless
// OMP_WAIT_POLICY=passive is in the environment, and beside ember's own thread pool on a small
// machine the spinning made oneDNN up to 8x slower (docs/perf.md, "CPU: oneDNN beside ember's
// kernels"). libgomp reads the variable in its constructor, before main and before any
// constructor of the program (a setenv in the executable's .preinit_array is undone when libc
// initialises its environment), so a program that wants the passive policy has to start with it.
#pragma once

namespace ember {

// When ember is built with oneDNN and the user has not chosen a policy, sets
// OMP_WAIT_POLICY=PASSIVE and re-executes the program (/proc/self/exe) with the same arguments;
// returns only when nothing had to be done (or the exec failed: the program goes on, spinning).
// Call it first thing in main(), before threads or files exist. Without oneDNN: nothing.
void restart_with_passive_openmp(char** argv);

}  // namespace ember
