#!/usr/bin/env bash
# The GPU runner (scripts/gpu_run.sh, the bundle's run.sh) checked without a GPU, against a build
# tree: the plan fits 8 minutes, and each stage's planned steps fit the stage's cap (Note [runner
# sizing] in scripts/gpu_run.sh); the library finder finds libraries laid out as the CUDA toolkit and
# PyTorch's wheels lay them out, with their versions; a dry run has every stage's command line
# parsed by its own program; a stage that hangs or crashes is recorded and the next one runs; the
# summary and the log archive are always written, and the output folder holds at most 8 files.
#
#   tests/gpu_run/test_gpu_run.sh BUILD_DIR
set -uo pipefail
runner="$(cd "$(dirname "$0")/../.." && pwd)/scripts/gpu_run.sh"
build="$(cd "${1:?usage: test_gpu_run.sh BUILD_DIR}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
check() {  # check "what" CONDITION...
  local what="$1"; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
has() { grep -q -- "$2" "$1"; }
lacks() { ! grep -q -- "$2" "$1"; }
files_in() { find "$1" -maxdepth 1 -type f | wc -l; }

# ---- the plan ----
"$runner" --plan > "$tmp/plan.txt"
total=$(awk '{ sub(/s$/, "", $2); s += $2 } END { print s }' "$tmp/plan.txt")
check "the plan has six stages" test "$(wc -l < "$tmp/plan.txt")" -eq 6
check "the plan's caps add up to <= 480 s (got $total)" test "$total" -le 480

# ---- the library finder: a toolkit and a wheel layout ----
root="$tmp/root"
mkdir -p "$root/usr/local/cuda/lib64" "$root/usr/local/cuda/include"
touch "$root/usr/local/cuda/lib64/libcublas.so.13.1.0.3" "$root/usr/local/cuda/lib64/libcublasLt.so.13.1.0.3"
ln -s libcublas.so.13.1.0.3 "$root/usr/local/cuda/lib64/libcublas.so.13"
ln -s libcublasLt.so.13.1.0.3 "$root/usr/local/cuda/lib64/libcublasLt.so.13"
site="$tmp/site-packages"
mkdir -p "$site/nvidia/cudnn/lib" "$site/nvidia/nccl/lib" "$site/nvidia_cudnn_cu13-9.13.0.50.dist-info" \
         "$site/nvidia_nccl_cu13-2.28.3.dist-info" "$site/nvidia/cu13/lib" "$site/nvidia/cu13/include"
touch "$site/nvidia/cudnn/lib/libcudnn.so.9" "$site/nvidia/nccl/lib/libnccl.so.2"
# a wheel's cuBLAS that is found only when the toolkit has none (the toolkit's folders come first)
touch "$site/nvidia/cu13/lib/libcublas.so.13"
printf '#define CUBLAS_VER_MAJOR 13\n#define CUBLAS_VER_MINOR 2\n#define CUBLAS_VER_PATCH 7\n' > "$site/nvidia/cu13/include/cublas_api.h"
EMBER_FIND_ROOT="$root" EMBER_PYTHON_SITE="$site" "$runner" --find-libs > "$tmp/libs.txt"
cat "$tmp/libs.txt"
check "cuBLAS from the toolkit, its version from the file name" has "$tmp/libs.txt" "^libcublas.so.13|$root/usr/local/cuda/lib64|13.1.0.3$"
check "cuBLASLt from the toolkit" has "$tmp/libs.txt" "^libcublasLt.so.13|$root/usr/local/cuda/lib64|13.1.0.3$"
check "cuDNN from the wheel, its version from the dist-info" has "$tmp/libs.txt" "^libcudnn.so.9|$site/nvidia/cudnn/lib|9.13.0.50$"
check "NCCL from the wheel" has "$tmp/libs.txt" "^libnccl.so.2|$site/nvidia/nccl/lib|2.28.3$"
rm "$root/usr/local/cuda/lib64/libcublas.so.13"
EMBER_FIND_ROOT="$root" EMBER_PYTHON_SITE="$site" "$runner" --find-libs > "$tmp/libs2.txt"
check "without the toolkit's, the wheel's cuBLAS, its version from the header" \
      has "$tmp/libs2.txt" "^libcublas.so.13|$site/nvidia/cu13/lib|13.2.7$"
EMBER_FIND_ROOT="$tmp/nothing" EMBER_PYTHON_SITE="$tmp/nothing" EMBER_LIB_SEARCH="" CUDA_HOME="" \
  "$runner" --find-libs > "$tmp/libs3.txt"
check "a library found nowhere is reported as not found" has "$tmp/libs3.txt" "^libcudnn.so.9|-|not found$"

# ---- the dry run: every command line parses ----
"$runner" --tree "$build" --dry-run --out "$tmp/dry" > "$tmp/dry.log" 2>&1
rc=$?
check "the dry run exits 0 (rc $rc)" test "$rc" -eq 0
check "the dry run wrote the summary" test -s "$tmp/dry/summary.md"
check "the dry run archived its logs" test -s "$tmp/dry/logs.tar.gz"
check "every step of the dry run parses" lacks "$tmp/dry/results.tsv" "BAD COMMAND"
steps=$(grep -c $'\tparses\t' "$tmp/dry/results.tsv")
check "the dry run checked at least 20 command lines (got $steps)" test "$steps" -ge 20
check "the test binary's every case is selected by its own filter" has "$tmp/dry/results.tsv" $'gpu_tests\tparses'
check "the dry run's output folder holds at most 8 files" test "$(files_in "$tmp/dry")" -le 8
fits=$(grep -c $'\t(stage)\tfits\t' "$tmp/dry/results.tsv")
check "each of the six stages' planned steps fit its cap (got $fits)" test "$fits" -eq 6
check "no stage's steps add up to more than its cap" lacks "$tmp/dry/results.tsv" "STEPS OVER THE STAGE CAP"
check "an on-demand step's command line is checked, its cap not counted" \
      has "$tmp/dry/results.tsv" $'capture_api_errors\tparses\t0\tcap 25s, on demand'
if (( rc != 0 )); then cat "$tmp/dry.log"; cat "$tmp/dry/summary.md"; fi

# ---- a stage whose steps do not fit its cap fails the dry run ----
GPU_RUN_TEST_CAP_4=60 "$runner" --tree "$build" --dry-run --only 4 --out "$tmp/over" > /dev/null 2>&1
check "steps over their stage's cap fail the dry run" test $? -ne 0
check "and the summary says by how much" has "$tmp/over/summary.md" "| 4 | (stage) | STEPS OVER THE STAGE CAP | 0 | its planned steps' caps add up to [0-9]*s, over the stage's 60s"

# ---- a bad command line is caught by the dry run ----
mkdir -p "$tmp/badtree/bin"
ln -s "$build"/bin/* "$tmp/badtree/bin/"
rm -f "$tmp/badtree/bin/bench_allreduce"
ln -s "$build/lib" "$tmp/badtree/lib"
"$runner" --tree "$tmp/badtree" --dry-run --only 2 --out "$tmp/bad" > /dev/null 2>&1
check "a missing program fails the dry run" test $? -ne 0
check "and is named in the summary" has "$tmp/bad/summary.md" "not built: .*bench_allreduce"

# ---- a stage that hangs, one that crashes, one that passes ----
# (the hanging stage sleeps an odd time: pgrep below sees every process of the machine, and a
# 'sleep 60' of someone else's must not fail the check)
GPU_RUN_SCALE=0.02 GPU_RUN_TEST_STAGE_2='sleep 60.0417' GPU_RUN_TEST_STAGE_3='kill -SEGV $$' GPU_RUN_TEST_STAGE_4='echo fine' \
  timeout 60 "$runner" --tree "$build" --only 2,3,4 --out "$tmp/run" > "$tmp/run.log" 2>&1
rc=$?
check "a run with a failed stage exits 1 (rc $rc)" test "$rc" -eq 1
check "the hanging stage is stopped at its cap" has "$tmp/run/summary.md" "| 2 | (stage) | TIMEOUT (cap [0-9]*s)"
check "the crashing stage is recorded" has "$tmp/run/summary.md" "| 3 | test_body | FAILED (rc 139)"
check "the stage after them runs" has "$tmp/run/summary.md" "| 4 | test_body | ok"
check "stages not asked for do not run" lacks "$tmp/run/results.tsv" "^1"$'\t'
check "the logs are archived" test -s "$tmp/run/logs.tar.gz"
check "the output folder holds at most 8 files" test "$(files_in "$tmp/run")" -le 8
check "no stage process is left behind" bash -c "! pgrep -f '^sleep 60[.]0417$' > /dev/null"

# ---- usage errors ----
"$runner" --only x > /dev/null 2>&1
check "--only with a bad list is a usage error" test $? -eq 2
"$runner" --bogus > /dev/null 2>&1
check "an unknown flag is a usage error" test $? -eq 2

echo "$passes passed, $fails failed"
(( fails == 0 ))
