#!/usr/bin/env bash
# The staged GPU check: one command on a GPU machine gives a verdict in priority order, each stage
# under its own time cap, within 8 minutes in all (docs/gpu-validation.md, "The procedure").
# scripts/gpu_bundle.sh copies this file into the bundle as gpu-bundle/run.sh; nothing is compiled
# on the GPU machine.
#
#   gpu-bundle/run.sh [--out DIR] [--only 2,3] [--dry-run] [--plan]
#   scripts/gpu_run.sh --tree build --dry-run        the same stages against a build tree
#
#   --out DIR     where the results go ($OUT when set, else gpu-check-out/): summary.md (rewritten
#                 after every step, so a stop loses nothing already found), results.tsv (one line a
#                 step), logs.tar.gz (every log, re-archived after every stage). At most 8 files.
#   --only LIST   run these stages only (comma-separated numbers), e.g. the failing ones of a
#                 first call
#   --steps REGEX within those stages, run only the steps whose name matches (extended regex)
#   --dry-run     run no stage: check the plan's caps, print every command line and have each
#                 program parse its own (mnist_train --check-options, bench_ops --list, the test
#                 binary's name filter, run.sh --dry-run), find the vendor libraries, write the
#                 summary. What `ctest -R gpu_run` checks without a GPU (tests/gpu_run/).
#   --plan        print the stages and their caps and exit
#   --find-libs   print where the vendor libraries are (name|folder|version) and exit
#   --tree DIR    use a build tree (DIR/bin, DIR/lib, the repository's bench/ and the Debian data)
#                 instead of the bundle's payload
#
# Environment: EMBER_LIB_SEARCH (extra folders to search for the vendor libraries, first),
# EMBER_FIND_ROOT (a prefix for the default search folders: the tests' fake toolkit and wheels),
# EMBER_PYTHON_SITE (python's site-packages folders, colon-separated; default: asked of python3),
# PYTHON (python3), GPU_RUN_SCALE (multiply every cap: a slower card or a longer lease),
# GPU_RUN_TEST_STAGE_<n> (tests only: a shell command run as stage n's body instead of its steps).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---- the plan: number | name | cap in seconds; the caps add up to <= 480 (8 minutes) ----
# Sized from an H200 run (docs/gpu-validation.md, 2026-11-27): the test cases took 41 s, the
# mnist_train steps about 1 s each, the PyTorch eager comparisons 35-37 s per model.
PLAN=(
  "1|machine: GPU, driver, vendor libraries|10"
  "2|correctness: ember_gpu_tests, mnist_train on the GPU, NCCL|120"
  "3|headline: mnist_train vs PyTorch, same GPU, data and recipe|170"
  "4|kernels vs cuBLAS/cuDNN/PyTorch and the roofline|110"
  "5|compute-sanitizer memcheck and racecheck (subset)|25"
  "6|calibration: cuobjdump resources, Nsight Compute on a few kernels|25"
)
PLAN_LIMIT_S=480

out="${OUT:-gpu-check-out}"
only=""
dry_run=0
tree=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --steps) export GPU_RUN_STEPS="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --tree) tree="$2"; shift 2 ;;
    --plan)
      for p in "${PLAN[@]}"; do IFS='|' read -r n name cap <<< "$p"; printf '%s  %4ss  %s\n' "$n" "$cap" "$name"; done
      exit 0 ;;
    --find-libs) find_libs_only=1; shift ;;
    --stage-body) stage_body="$2"; shift 2 ;;  # internal: the runner calls itself per stage
    --test-cases) shift; run_test_cases_args=("$@"); break ;;   # internal: stage 2's test runner
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -z "$only" || "$only" =~ ^[1-9](,[1-9])*$ ]] || { echo "run.sh: error: --only expects stage numbers like 2,3, got '$only'" >&2; exit 2; }
scale="${GPU_RUN_SCALE:-1}"
[[ "$scale" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "run.sh: error: GPU_RUN_SCALE must be a number, got '$scale'" >&2; exit 2; }
python="${PYTHON:-python3}"

# ---- where things are: the bundle's payload, or a build tree ----
# Sets REAL_BIN, LIBDIR, DATA, PY (the PyTorch scripts), E2E (bench/e2e/run.sh), TABLE (bench_table.py).
locate() {
  if [[ -n "$tree" ]]; then
    local t; t="$(cd "$tree" && pwd)" || { echo "run.sh: error: no build tree $tree" >&2; exit 2; }
    local repo; repo="$(cd "$here/.." && pwd)"
    REAL_BIN="$t/bin"; LIBDIR="$t/lib"; DATA="${DATA:-/usr/share/datasets/fashion-mnist}"
    PY="$repo/bench"; E2E="$repo/bench/e2e/run.sh"; TABLE="$repo/scripts/bench_table.py"
    return
  fi
  # the bundle: payload.tar.xz beside this script, unpacked once outside the bundle (which must
  # stay small enough to travel)
  [[ -f "$here/payload.tar.xz" ]] || { echo "run.sh: error: no $here/payload.tar.xz (build the bundle with scripts/gpu_bundle.sh)" >&2; exit 2; }
  local p; p="${TMPDIR:-/tmp}/ember-gpu-bundle.$(stat -c %s-%Y "$here/payload.tar.xz")"
  if [[ ! -f "$p/.unpacked" ]]; then
    rm -rf "$p" && mkdir -p "$p" && tar -xJf "$here/payload.tar.xz" -C "$p" || { echo "run.sh: error: cannot unpack $here/payload.tar.xz" >&2; exit 2; }
    # the data travels as xz'd raw IDX files (smaller than Debian's gzip); mnist_train reads raw IDX
    for f in "$p"/data/*.xz; do [[ -e "$f" ]] && xz -d "$f"; done
    touch "$p/.unpacked"
  fi
  REAL_BIN="$p/bin"; LIBDIR="$p/lib"; DATA="$p/data"; PY="$p/bench"; E2E="$p/bench/e2e/run.sh"; TABLE="$p/bench/bench_table.py"
}

# ---- the vendor libraries: found on the machine, never shipped ----
# Looks where the CUDA toolkit and PyTorch's wheels put them; prints "name|dir|version" lines.
python_sites() {
  if [[ -n "${EMBER_PYTHON_SITE+x}" ]]; then tr ':' '\n' <<< "$EMBER_PYTHON_SITE"; return; fi
  "$python" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null
}
search_dirs() {
  [[ -n "${EMBER_LIB_SEARCH:-}" ]] && tr ':' '\n' <<< "$EMBER_LIB_SEARCH"
  local r="${EMBER_FIND_ROOT:-}" d s
  for d in ${CUDA_HOME:+"$CUDA_HOME/lib64" "$CUDA_HOME/lib"} /usr/local/cuda/lib64 /usr/local/cuda/lib \
           /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    echo "$r$d"
  done
  while read -r s; do
    [[ -n "$s" ]] || continue
    for d in "$s"/nvidia/*/lib; do [[ -d "$d" ]] && echo "$d"; done
  done < <(python_sites)
}
# version of the library file $1 (a symlink chain ending in libX.so.MAJOR.MINOR...), else of the
# wheel that holds it (nvidia_X_cuNN-VERSION.dist-info beside nvidia/), else of its header
lib_version() {
  local f="$1" real v
  real="$(readlink -f "$f")"
  v="$(basename "$real" | sed -n 's/^lib[a-zA-Z_]*\.so\.\([0-9][0-9.]*\)$/\1/p')"
  if [[ "$v" == *.* ]]; then echo "$v"; return; fi
  local site; site="$(cd "$(dirname "$f")/../../.." 2>/dev/null && pwd)"
  local stem; stem="$(basename "$f" | sed 's/^lib\([a-zA-Z]*\).*/\1/')"
  local info
  for info in "$site"/nvidia_"$stem"_cu*-*.dist-info "$site"/nvidia_"${stem%Lt}"_cu*-*.dist-info; do
    [[ -d "$info" ]] && { basename "$info" .dist-info | sed 's/^[^-]*-//'; return; }
  done
  local h
  case "$stem" in
    cublas*) h=cublas_api.h ;;
    nccl) h=nccl.h ;;
    *) h="${stem}_version.h" ;;
  esac
  h="$(dirname "$f")/../include/$h"
  if [[ -f "$h" ]]; then
    local ma mi pa
    ma=$(sed -n 's/^#define [A-Z_]*_MAJOR  *\([0-9]*\).*/\1/p' "$h" | head -1)
    mi=$(sed -n 's/^#define [A-Z_]*_MINOR  *\([0-9]*\).*/\1/p' "$h" | head -1)
    pa=$(sed -n 's/^#define [A-Z_]*_PATCH\(LEVEL\)\{0,1\}  *\([0-9]*\).*/\2/p' "$h" | head -1)
    [[ -n "$ma" ]] && { echo "$ma.$mi.$pa"; return; }
  fi
  echo "${v:-unknown}"
}
# (libcudart travels in the bundle, matched to the build; the driver's libcuda is the machine's)
VENDOR_LIBS=(libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2)
find_libs() {
  local lib d found
  for lib in "${VENDOR_LIBS[@]}"; do
    found=""
    while read -r d; do
      [[ -n "$d" && -e "$d/$lib" ]] && { found="$d"; break; }
    done < <(search_dirs)
    if [[ -n "$found" ]]; then echo "$lib|$found|$(lib_version "$found/$lib")"; else echo "$lib|-|not found"; fi
  done
}

# ---- results: one line a step; the summary is rewritten from them after every step ----
work=""
results=""
stage_results_init() {
  mkdir -p "$out" || { echo "run.sh: error: cannot create $out" >&2; exit 2; }
  out="$(cd "$out" && pwd)"
  # logs gather outside the output folder (only the archive of them goes there: at most 8 files)
  work="$(mktemp -d "${TMPDIR:-/tmp}/ember-gpu-run.XXXXXX")"
  mkdir -p "$work/logs"
  results="$out/results.tsv"
}
# record STAGE STEP STATUS SECONDS NOTE
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$results"; write_summary; }

write_summary() {
  local s="$out/summary.md.tmp"
  {
    echo "# ember GPU check"
    echo
    [[ -f "$work/header.md" ]] && cat "$work/header.md"
    [[ -f "$work/machine.md" ]] && cat "$work/machine.md"
    echo
    echo "| stage | step | result | s | note |"
    echo "|---|---|---|---:|---|"
    [[ -f "$results" ]] && awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$results"
    local f
    for f in "$work"/tables/*.md; do
      [[ -f "$f" ]] || continue
      echo; cat "$f"
    done
  } > "$s" && mv -f "$s" "$out/summary.md"
}
archive_logs() {
  tar -czf "$out/logs.tar.gz.tmp" -C "$work" logs 2>/dev/null && mv -f "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
}

# step NAME CAP [CHECK] -- CMD...: runs CMD under its own cap, its output in logs/NAME.log.
# CHECK says how the dry run has the program parse its own command line: mnist, cases (the test
# runner's --check), bench_ops, e2e, py, none.
STAGE=0
step() {
  local name="$1" cap="$2" check="none"
  shift 2
  if [[ "$1" != "--" ]]; then check="$1"; shift; fi
  shift  # --
  [[ -z "${GPU_RUN_STEPS:-}" || "$name" =~ $GPU_RUN_STEPS ]] || return 0
  local log="$work/logs/s${STAGE}_${name}.log"
  cap=$(awk -v c="$cap" -v s="$scale" 'BEGIN { printf "%d", c * s + 0.5 }')
  if (( dry_run )); then
    printf '[%s] %s (cap %ss): %s\n' "$STAGE" "$name" "$cap" "$*" >> "$work/logs/dry_run.log"
    local rc=0
    case "$check" in
      mnist) "$@" --check-options > "$log" 2>&1 || rc=$? ;;
      bench_ops) "$@" --list > "$log" 2>&1 || rc=$? ;;
      e2e) "$@" --dry-run > "$log" 2>&1 || rc=$? ;;
      py) "$python" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$2" > "$log" 2>&1 || rc=$? ;;
      cases) "$@" --check > "$log" 2>&1 || rc=$? ;;
      none)  # ember's programs on the line must exist; the GPU machine's tools are not looked for here
        local a; for a in "$@"; do [[ "$a" == "$BIN"/* && ! -x "$a" ]] && { echo "not built: $a" > "$log"; rc=127; }; done ;;
    esac
    if (( rc == 0 )); then record "$STAGE" "$name" "parses" 0 "cap ${cap}s"; else record "$STAGE" "$name" "BAD COMMAND (rc $rc)" 0 "$(tail -c 300 "$log" | tr '\n\t|' '   ')"; fi
    return $rc
  fi
  local t0=$SECONDS rc=0
  # in the background, so a stop of the stage (TERM from its cap) reaches the step's own process
  # group: timeout makes one and signals all of it
  timeout -k 5 "$cap" "$@" > "$log" 2>&1 &
  step_pid=$!
  wait "$step_pid" || rc=$?
  step_pid=""
  local dt=$((SECONDS - t0)) status="ok"
  if (( rc == 124 || rc == 137 )); then status="TIMEOUT (cap ${cap}s)"
  elif (( rc != 0 )); then status="FAILED (rc $rc)"
  elif [[ -n "${STEP_FAIL_IF:-}" ]] && grep -q -E "$STEP_FAIL_IF" "$log"; then
    status="FAILED ($(grep -o -m1 -E "$STEP_FAIL_IF" "$log"))"; rc=1
  fi
  local note=""
  [[ -n "${STEP_NOTE:-}" ]] && note="$($STEP_NOTE "$log" 2>/dev/null | head -c 400 | tr '\n\t|' '   ')"
  [[ "$status" != ok && -z "$note" ]] && note="$(grep -v '^[[:space:]]*$' "$log" | tail -n 3 | head -c 400 | tr '\n\t|' '   ')"
  record "$STAGE" "$name" "$status" "$dt" "$note"
  return $rc
}

# ---- ember_gpu_tests: every test case in a process of its own, JOBS at a time ----
# A crash or a hang then costs one case, not the rest of the suite, and per-case results stream
# into the log. The dry run checks that each case's escaped name selects exactly that case.
catch_escape() { sed 's/[],[\\]/\\&/g' <<< "$1"; }
run_test_cases() {
  local bin="$1" dir="$2" jobs="$3" cap="$4" check="${5:-}"
  mkdir -p "$dir"
  # (Catch2 v2's listing exits with the number of cases listed: the names tell, not the status)
  "$bin" --list-test-names-only > "$dir/names.txt" 2> "$dir/list.err"
  local -a names escaped
  mapfile -t names < <(grep -v '^[[:space:]]*$' "$dir/names.txt")
  (( ${#names[@]} > 0 )) || { echo "cannot list the test cases of $bin"; cat "$dir/list.err"; return 1; }
  local n
  for n in "${names[@]}"; do escaped+=("$(catch_escape "$n")"); done
  if [[ "$check" == --check ]]; then
    local joined; joined="$(IFS=,; echo "${escaped[*]}")"  # one filter, the names OR'ed
    "$bin" --list-test-names-only "$joined" | grep -v '^[[:space:]]*$' > "$dir/matched.txt"
    if ! diff <(sort "$dir/names.txt" | grep -v '^[[:space:]]*$') <(sort "$dir/matched.txt") > "$dir/diff.txt"; then
      echo "test cases whose escaped name does not select exactly that case:"; cat "$dir/diff.txt"; return 1
    fi
    echo "test cases: ${#names[@]}, each selected by its own escaped name (run $jobs at a time, ${cap}s each)"
    return 0
  fi
  : > "$dir/rc.txt"
  local i running=0 threads=$(( $(nproc) / jobs > 0 ? $(nproc) / jobs : 1 ))
  for i in "${!names[@]}"; do
    while (( running >= jobs )); do wait -n; running=$((running - 1)); done
    (
      t0=$SECONDS
      # JOBS processes share the cores: each gets its share for the CPU references
      EMBER_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" timeout -k 5 "$cap" "$bin" "${escaped[$i]}" -d yes > "$dir/case_$i.log" 2>&1
      rc=$?
      grep -q 'No test cases matched' "$dir/case_$i.log" && rc=3
      echo "$rc $((SECONDS - t0)) $i" >> "$dir/rc.txt"
      printf '%-8s %3ss  %s\n' "$( ((rc == 0)) && echo ok || { ((rc == 124 || rc == 137)) && echo TIMEOUT || echo "FAIL($rc)"; })" "$((SECONDS - t0))" "${names[$i]}"
    ) &
    running=$((running + 1))
  done
  wait
  local pass=0 fail=0 tmo=0 skip=0 rc dt idx
  local -a failed
  while read -r rc dt idx; do
    if (( rc == 0 )); then pass=$((pass + 1))
    elif (( rc == 124 || rc == 137 )); then tmo=$((tmo + 1)); failed+=("timeout: ${names[$idx]}")
    else fail=$((fail + 1)); failed+=("rc $rc: ${names[$idx]}"); fi
    grep -qi 'skipped' "$dir/case_$idx.log" && skip=$((skip + 1))
  done < "$dir/rc.txt"
  for n in "${failed[@]}"; do echo "not passed: $n"; done
  grep -il 'skipped' "$dir"/case_*.log 2>/dev/null | while read -r f; do echo "skip message in $(basename "$f"): $(grep -i -m1 'skipped' "$f")"; done
  echo "test cases: ${#names[@]}: $pass passed, $fail failed, $tmo timed out ($skip with a skip message; failed: ${failed[*]:-none})"
  (( fail == 0 && tmo == 0 && pass == ${#names[@]} ))
}

# ---- the stages ----
note_mnist() { grep -E 'test accuracy|training time' "$1" | tr -s ' ' | paste -sd ';'; }
note_catch() { grep -E '^(test cases|All tests passed|No tests ran)' "$1" | tail -1; }

stage_1() {
  STEP_NOTE=""
  step nvidia_smi 5 -- nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,pcie.link.gen.max --format=csv
  find_libs > "$work/logs/s1_vendor_libs.txt"
  {
    echo "- commit: $(cat "$here/manifest.json" 2>/dev/null | sed -n 's/.*"commit": *"\([^"]*\)".*/\1/p' | head -1)"
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo none)"
    echo "- vendor libraries (name, folder, version):"
    sed 's/^/  - /; s/|/ — /g' "$work/logs/s1_vendor_libs.txt"
    echo "- torch: $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null || echo 'not importable')"
  } > "$work/machine.md"
  local missing; missing=$(grep -c '|not found$' "$work/logs/s1_vendor_libs.txt")
  record 1 vendor_libraries "$([[ $missing == 0 ]] && echo ok || echo "MISSING $missing")" 0 "$(cut -d'|' -f1,3 "$work/logs/s1_vendor_libs.txt" | tr '\n|' '; ')"
}

stage_2() {
  # every test case, in parallel processes (a crash or hang costs one case, not the suite)
  STEP_NOTE=note_catch
  step gpu_tests 80 cases -- "$0" --test-cases "$BIN/ember_gpu_tests" "$work/logs/gpu_tests" 8 60
  STEP_NOTE=note_mnist
  # a --graph run that falls back to eager steps still exits 0: that is a failure here
  STEP_FAIL_IF='cannot be captured'
  local m="$BIN/mnist_train" d=(--data "$DATA" --device cuda --quiet)
  step mnist_eager 20 mnist -- "$m" "${d[@]}" --epochs 1
  step mnist_graph_resident 15 mnist -- "$m" "${d[@]}" --epochs 1 --graph --device-resident
  step mnist_loader_workers 15 mnist -- "$m" "${d[@]}" --epochs 1 --workers 4 --pin-memory
  step mnist_cnn_bf16_graph 20 mnist -- "$m" "${d[@]}" --epochs 1 --model cnn --amp bf16 --graph --device-resident
  step mnist_fast_fp16_cl 20 mnist -- "$m" "${d[@]}" --epochs 1 --model fast --amp fp16 --channels-last --device-resident
  step mnist_sync_debug 15 mnist -- "$m" "${d[@]}" --epochs 1 --max-steps 200 --sync-debug --device-resident
  # the host loader's graph steps (the first H200 runs: the CNN's capture was invalidated, the
  # MLP's was not); when the capture fails, compute-sanitizer names the CUDA call that broke it
  step mnist_cnn_graph_host 15 mnist -- "$m" "${d[@]}" --epochs 1 --max-steps 100 --model cnn --graph --workers 2
  if grep -q 'cannot be captured' "$work/logs/s2_mnist_cnn_graph_host.log" 2>/dev/null; then
    local cs; cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
    STEP_FAIL_IF=""
    step capture_api_errors 25 -- "$cs" --tool memcheck --report-api-errors all --show-backtrace host \
         "$m" "${d[@]}" --epochs 1 --max-steps 3 --model cnn --graph --workers 2
  fi
  STEP_NOTE=""
  STEP_FAIL_IF=""
  step nccl_allreduce 20 -- "$BIN/ember_run" --nproc-per-node 1 -- "$BIN/bench_allreduce" --backend nccl --max-bytes 67108864 --iters 20
  step mnist_ddp_nccl 20 -- "$BIN/ember_run" --nproc-per-node 1 -- "$m" "${d[@]}" --epochs 1 --distributed
}

stage_3() {
  # ember's default, then ember's best beside PyTorch's plain, tuned and compiled loops (in that
  # order, so a stop at the cap loses the least important); 5 epochs, same data and recipe
  mkdir -p "$work/tables"
  STEP_NOTE=""
  local e=(env "EMBER_BIN=$BIN/mnist_train" "DATA=$DATA" "PYTHON=$python" EPOCHS=5)
  step e2e_ember_default 12 e2e -- "${e[@]}" "$E2E" --ember-flags "" --configs none --gpu-idle --table "$work/tables/3a_e2e_default.md"
  step e2e_ember_bf16 12 e2e -- "${e[@]}" "$E2E" --ember-flags "--graph --device-resident --amp bf16" --configs none \
       --gpu-idle --table "$work/tables/3b_e2e_bf16.md"
  # fp32 on both sides: ember's best fp32 flags (run.sh's GPU default) against PyTorch's three loops
  step e2e_mlp_vs_torch 43 e2e -- "${e[@]}" "$E2E" --models mlp --configs "plain tuned" --gpu-idle --table "$work/tables/3c_e2e_mlp.md"
  step e2e_cnn_vs_torch 43 e2e -- "${e[@]}" "$E2E" --models cnn --configs "plain tuned" --gpu-idle --table "$work/tables/3d_e2e_cnn.md"
  # torch.compile last: compiling the MLP and the CNN took over 30 s on an H200
  step e2e_vs_torch_compile 60 e2e -- "${e[@]}" "$E2E" --configs compiled --gpu-idle --table "$work/tables/3e_e2e_compiled.md"
}

stage_4() {
  mkdir -p "$work/tables"
  local b="$BIN/bench_ops" j="$work/logs"
  STEP_NOTE=""
  # the naive reference kernels are checked in stage 2, not timed here: at 8192^3 one run takes
  # most of a second (the first H200 run spent its whole cap on them)
  local q=(--device cuda --quick --min-time 0.05 --benchmark_filter=-naive)
  # which algorithm cuDNN and cuBLASLt took for each test sample (EMBER_VENDOR_LOG): where a vendor
  # variant's numbers differ from the CPU reference, the log names the kernel configuration
  step vendor_choices 15 -- env EMBER_VENDOR_LOG=1 "$BIN/ember_gpu_tests" "cuda op linear,cuda op conv2d_backward_input"
  step bench_rows 25 bench_ops -- "$b" "${q[@]}" --op softmax,cross_entropy,add,sum --json "$j/bench_rows.json"
  step bench_gemm 25 bench_ops -- "$b" "${q[@]}" --op matmul,linear --json "$j/bench_gemm.json"
  step bench_conv 40 bench_ops -- "$b" "${q[@]}" --op conv2d,conv2d_backward_input,conv2d_backward_weight --json "$j/bench_conv.json"
  step bench_h2d 5 -- "$BIN/bench_loader" --data "$DATA" --quick
  step torch_ops 15 py -- "$python" "$PY/torch_ops.py" --iters 20 --json "$j/torch_ops.json"
  (( dry_run )) && return 0
  "$python" "$TABLE" "$j"/bench_*.json "$j/torch_ops.json" > "$work/tables/4_kernels.md" 2> "$j/bench_table.err" || true
  write_summary
}

stage_5() {
  local cs; cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  STEP_NOTE=note_catch
  # a short subset (the first H200 run got through 16 cases in 20 s): an elementwise op, a
  # reduction, the softmax and cross-entropy row kernels; every buffer a cudaMalloc of its own
  step memcheck 12 -- env EMBER_CUDA_ALLOC=passthrough "$cs" --tool memcheck --error-exitcode 9 "$BIN/ember_gpu_tests" \
       "cuda op add,cuda op sum,cuda op softmax,cuda op cross_entropy"
  step racecheck 13 -- "$cs" --tool racecheck --error-exitcode 9 "$BIN/ember_gpu_tests" "cuda op softmax,cuda op sum"
}

stage_6() {
  local ncu; ncu="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
  local cuobjdump; cuobjdump="$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)"
  STEP_NOTE=""
  # registers, shared memory, stack and spills as the machine's tools read them from the cubins,
  # to set beside bench/model/kernel_resources_sm90.txt (which ptxas's build report gives)
  local kl="$LIBDIR/libember_kernels.so"
  [[ -f "$kl" ]] || kl="$REAL_BIN/ember_gpu_tests"
  step cuobjdump 3 -- "$cuobjdump" --dump-resource-usage "$kl"
  step ncu 22 -- "$ncu" --target-processes all --csv --page raw --launch-count 12 --metrics \
    l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,gpu__time_duration.sum \
    "$BIN/bench_ops" --device cuda --op add,softmax --quick --min-time 0.01 --benchmark_filter=-naive
}

if [[ -n "${find_libs_only:-}" ]]; then
  find_libs
  exit 0
fi
if [[ -n "${run_test_cases_args+x}" ]]; then
  run_test_cases "${run_test_cases_args[@]}"
  exit $?
fi

# ---- one stage's body, run by the loop below under the stage's cap ----
if [[ -n "${stage_body:-}" ]]; then
  out="$RUN_OUT"; work="$RUN_WORK"; results="$out/results.tsv"; STAGE="$stage_body"
  locate
  BIN="$RUN_BIN"
  step_pid=""
  trap '[[ -n "$step_pid" ]] && kill -TERM -- "-$step_pid" 2>/dev/null; exit 124' TERM
  # tests/gpu_run/test_gpu_run.sh replaces a stage's body with a command (a hang, a crash)
  override="GPU_RUN_TEST_STAGE_$stage_body"
  if [[ -n "${!override:-}" ]]; then step test_body 1000 -- bash -c "${!override}"; exit $?; fi
  "stage_$stage_body"
  exit $?
fi

# ---- the run ----
total=0
for p in "${PLAN[@]}"; do IFS='|' read -r n name cap <<< "$p"; total=$((total + cap)); done
if (( total > PLAN_LIMIT_S )); then
  echo "run.sh: error: the plan's caps add up to ${total}s, over ${PLAN_LIMIT_S}s" >&2; exit 2
fi
stage_results_init
: > "$results"
t_start=$SECONDS
locate
# ember's programs run through wrappers in $work/bin that set their LD_LIBRARY_PATH: the bundle's
# libraries (ember, gloo and what it needs), each vendor folder found, and lib/fallback (libstdc++,
# libgcc_s, zlib, libcudart of the build machine) only when the machine's own are missing or too
# old. PyTorch's processes keep the machine's environment: a library of ours ahead of its own
# could break it.
ld="$LIBDIR"
while IFS='|' read -r lib dir ver; do
  [[ "$dir" != - && ":$ld:" != *":$dir:"* ]] && ld="$ld:$dir"
done < <(find_libs)
if [[ -d "$LIBDIR/fallback" ]] && LD_LIBRARY_PATH="$ld" ldd "$REAL_BIN"/* 2>&1 | grep -q 'not found'; then
  ld="$ld:$LIBDIR/fallback"
fi
ld="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BIN="$work/bin"
mkdir -p "$BIN"
for f in "$REAL_BIN"/*; do
  [[ -f "$f" && -x "$f" ]] || continue
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$ld" "$f" > "$BIN/$(basename "$f")"
  chmod +x "$BIN/$(basename "$f")"
done
LD_LIBRARY_PATH="$ld" ldd "$REAL_BIN"/* > "$work/logs/ldd.txt" 2>&1
export RUN_BIN="$BIN" RUN_OUT="$out" RUN_WORK="$work"
echo "run.sh: $(date -u +%FT%TZ), out $out, plan ${total}s$( ((dry_run)) && echo ', dry run')"
{
  echo "- started: $(date -u +%FT%TZ) on $(hostname)$( ((dry_run)) && echo ' (dry run: nothing was timed)')"
  echo "- plan: $(for p in "${PLAN[@]}"; do IFS='|' read -r n name cap <<< "$p"; printf '%s %ss; ' "$n" "$cap"; done)total ${total}s"
} > "$work/header.md"
write_summary
overall=0
for p in "${PLAN[@]}"; do
  IFS='|' read -r n name cap <<< "$p"
  if [[ -n "$only" && ",$only," != *",$n,"* ]]; then continue; fi
  echo "run.sh: stage $n: $name (cap ${cap}s)"
  cap_s=$(awk -v c="$cap" -v s="$scale" 'BEGIN { printf "%d", c * s + 0.5 }')
  rc=0
  if (( dry_run )); then
    (STAGE=$n; "stage_$n") || rc=$?
  else
    # the stage body in a process of its own, so its cap holds whatever it runs (timeout signals
    # the whole process group); a stage that overruns is recorded and the next one starts
    timeout -k 5 "$((cap_s + 5))" "$0" --stage-body "$n" ${tree:+--tree "$tree"} --out "$out" || rc=$?
    if (( rc == 124 || rc == 137 )); then record "$n" "(stage)" "TIMEOUT (cap ${cap_s}s)" "$cap_s" "stopped at its cap; the next stage started"; fi
  fi
  (( rc != 0 )) && overall=1
  write_summary
  archive_logs
done
echo "- finished: $(date -u +%FT%TZ), $((SECONDS - t_start)) s" >> "$work/machine.md"
write_summary
archive_logs
rm -rf "$work"
# the verdict: every step ok (or, in a dry run, every command line parses)
awk -F'\t' '$3 != "ok" && $3 != "parses" { bad = 1 } END { exit bad }' "$results" || overall=1
nfiles=$(find "$out" -maxdepth 1 -type f | wc -l)
(( nfiles > 8 )) && { echo "run.sh: error: $out holds $nfiles files, over 8" >&2; overall=1; }
cat "$out/summary.md"
exit $overall
