#!/usr/bin/env bash
# The README's test command after scripts/setup.sh: one build, then every test that build can run.
# Which build depends on the machine:
#   gpu   nvcc and a CUDA GPU: the Release build with CUDA in build/; the GPU suites run on the GPU
#   sim   the CUDA toolkit but no GPU (CI): the SIMT simulator build in build-sim/ under ASan +
#         UBSan; the CPU suite and every GPU suite run, the CUDA kernels on the CPU (docs/simulator.md)
#   cpu   no CUDA toolkit: the CPU-only Release build in build/ (the GPU suite reports itself skipped)
# EMBER_TEST_BUILD=gpu|sim|cpu picks one; EMBER_TEST_JOBS (default 2) sets the build's and ctest's -j.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${EMBER_TEST_JOBS:-2}
nvcc_found() { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }
gpu_found() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

kind=${EMBER_TEST_BUILD:-}
if [ -z "$kind" ]; then
  if nvcc_found && gpu_found; then
    kind=gpu
  elif nvcc_found; then
    kind=sim
  else
    kind=cpu
  fi
fi

start=$(date +%s)
say() { echo "test.sh: $1 ($(($(date +%s) - start)) s)"; }

case "$kind" in
  gpu | cpu)
    dir=build
    cuda=ON
    if [ "$kind" = cpu ]; then cuda=OFF; fi
    say "the Release build in $dir/ (CUDA $cuda)"
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=$cuda
    ;;
  sim)
    dir=build-sim
    say "no GPU here: the simulator build in $dir/ under ASan + UBSan (docs/simulator.md)"
    # -g1 (line tables only): sanitizer reports keep their file:line frames, and the build takes
    # about a third less CPU than with full debug info (the kernels' templates make most of it).
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
      -DEMBER_CUDA_SIM=ON -DEMBER_SANITIZE=address,undefined
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  *)
    echo "test.sh: EMBER_TEST_BUILD must be gpu, sim or cpu, not '$kind'" >&2
    exit 2
    ;;
esac

cmake --build "$dir" -j"$jobs"
say "built; running the tests"
ctest --test-dir "$dir" -j"$jobs" --output-on-failure
say "every test passed"
