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
#                 step), logs.tar.gz (every log, re-archived after every stage), bench_results.tsv
#                 (stage 4's kernel times, for bench/results/README.md). At most 8 files.
#   --only LIST   run these stages only (comma-separated numbers), e.g. the failing ones of a
#                 first call
#   --steps REGEX within those stages, run only the steps whose name matches (extended regex);
#                 the on-demand steps (left out of the plan: they do not fit it) run only when named
#                 here, e.g. --only 3 --steps e2e_mlp_vs_torch_compile
#   --dry-run     run no stage: check the plan's caps and that each stage's steps fit its cap,
#                 print every command line and have each program parse its own (mnist_train
#                 --check-options, bench_ops --cases, the test binary's name filter, run.sh
#                 --dry-run), find the vendor libraries, write the summary. What `ctest -R gpu_run`
#                 checks without a GPU (tests/gpu_run/).
#   --plan        print the stages and their caps and exit
#   --find-libs   print where the vendor libraries are (name|folder|version) and exit
#   --tree DIR    use a build tree (DIR/bin, DIR/lib, the repository's bench/ and the Debian data)
#                 instead of the bundle's payload
#
# Environment: EMBER_LIB_SEARCH (extra folders to search for the vendor libraries, first),
# EMBER_FIND_ROOT (a prefix for the default search folders: the tests' fake toolkit and wheels),
# EMBER_PYTHON_SITE (python's site-packages folders, colon-separated; default: asked of python3),
# PYTHON (python3), GPU_RUN_SCALE (multiply every cap: a slower card or a longer lease),
# GPU_RUN_TEST_STAGE_<n> (tests only: a shell command run as stage n's body instead of its steps),
# GPU_RUN_TEST_CAP_<n> (tests only: stage n's cap in seconds instead of the plan's),
# EMBER_BENCH_RESULTS (the results files for the GPU suite's library rule; default: the bundle's or
# the repository's bench/results).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---- the plan: number | name | cap in seconds; the caps add up to <= 480 (8 minutes) ----
# Note [runner sizing]: every step has its own cap, and a stage's step caps add up to at most the
# stage's cap (the dry run checks it), so a step that runs to its cap never takes the time of the
# steps after it; a stage's cap is only a backstop for its body. The caps come from the H200 calls
# (docs/gpu-validation.md, "Sizing the runner"): about 1.3x or more of the time measured, or of the
# time estimated from the work for a step not measured alone. What did not fit was shrunk (bench_ops
# cases chosen with --case), split (a timeout loses one step's rows, not its stage's) or made an
# on-demand step, with the reason beside it.
PLAN=(
  "1|machine: GPU, driver, vendor libraries|10"
  "2|correctness: ember_gpu_tests, mnist_train on the GPU, NCCL|120"
  "3|headline: mnist_train vs PyTorch, same GPU, data and recipe|170"
  "4|kernels vs cuBLAS/cuDNN/PyTorch and the roofline|130"
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
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -z "$only" || "$only" =~ ^[1-9](,[1-9])*$ ]] || { echo "run.sh: error: --only expects stage numbers like 2,3, got '$only'" >&2; exit 2; }
scale="${GPU_RUN_SCALE:-1}"
[[ "$scale" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "run.sh: error: GPU_RUN_SCALE must be a number, got '$scale'" >&2; exit 2; }
python="${PYTHON:-python3}"

# ---- where things are: the bundle's payload, or a build tree ----
# Sets REAL_BIN, LIBDIR, DATA, PY (the PyTorch scripts), E2E (bench/e2e/run.sh), TABLE (bench_table.py),
# and exports EMBER_BENCH_RESULTS (the results files the GPU suite's library rule reads,
# bench/results/README.md) unless it is set.
locate() {
  if [[ -n "$tree" ]]; then
    local t; t="$(cd "$tree" && pwd)" || { echo "run.sh: error: no build tree $tree" >&2; exit 2; }
    local repo; repo="$(cd "$here/.." && pwd)"
    REAL_BIN="$t/bin"; LIBDIR="$t/lib"; DATA="${DATA:-/usr/share/datasets/fashion-mnist}"
    PY="$repo/bench"; E2E="$repo/bench/e2e/run.sh"; TABLE="$repo/scripts/bench_table.py"
    export EMBER_BENCH_RESULTS="${EMBER_BENCH_RESULTS:-$repo/bench/results}"
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
  export EMBER_BENCH_RESULTS="${EMBER_BENCH_RESULTS:-$p/bench/results}"
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
# runner's --check), bench_ops (--cases: the line must select some), e2e, py, none.
# With STEP_ON_DEMAND=1 the step is not part of the plan (Note [runner sizing]): it runs only when
# --steps names it, and the dry run checks its command line without counting its cap.
STAGE=0
STEP_CAPS=0  # the caps of the stage's planned steps so far (unscaled), for the dry run's check
step() {
  local name="$1" cap="$2" check="none"
  shift 2
  if [[ "$1" != "--" ]]; then check="$1"; shift; fi
  shift  # --
  local on_demand="${STEP_ON_DEMAND:-0}"
  if (( on_demand && ! dry_run )); then
    [[ -n "${GPU_RUN_STEPS:-}" && "$name" =~ $GPU_RUN_STEPS ]] || return 0
  fi
  [[ -z "${GPU_RUN_STEPS:-}" || "$name" =~ $GPU_RUN_STEPS ]] || return 0
  local log="$work/logs/s${STAGE}_${name}.log"
  (( on_demand )) || STEP_CAPS=$((STEP_CAPS + cap))
  cap=$(awk -v c="$cap" -v s="$scale" 'BEGIN { printf "%d", c * s + 0.5 }')
  if (( dry_run )); then
    printf '[%s] %s (cap %ss%s): %s\n' "$STAGE" "$name" "$cap" "$( ((on_demand)) && echo ', on demand')" "$*" >> "$work/logs/dry_run.log"
    local rc=0
    case "$check" in
      mnist) "$@" --check-options > "$log" 2>&1 || rc=$? ;;
      bench_ops) "$@" --cases > "$log" 2>&1 || rc=$? ;;
      e2e) "$@" --dry-run > "$log" 2>&1 || rc=$? ;;
      py) "$python" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$2" > "$log" 2>&1 || rc=$? ;;
      cases) "$@" --check > "$log" 2>&1 || rc=$? ;;
      none)  # ember's programs on the line must exist; the GPU machine's tools are not looked for here
        local a; for a in "$@"; do [[ "$a" == "$BIN"/* && ! -x "$a" ]] && { echo "not built: $a" > "$log"; rc=127; }; done ;;
    esac
    if (( rc == 0 )); then record "$STAGE" "$name" "parses" 0 "cap ${cap}s$( ((on_demand)) && echo ', on demand')"; else record "$STAGE" "$name" "BAD COMMAND (rc $rc)" 0 "$(tail -c 300 "$log" | tr '\n\t|' '   ')"; fi
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

# The commit of the programs: the bundle's manifest, else the repository's HEAD (a build tree).
run_commit() {
  local c; c="$(sed -n 's/.*"commit": *"\([^"]*\)".*/\1/p' "$here/manifest.json" 2>/dev/null | head -1)"
  [[ -n "$c" ]] || c="$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null)"
  echo "${c:-unknown}"
}

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
  # every test case, in parallel processes (a crash or hang costs one case, not the suite); 41 s for
  # 174 cases on the H200 (call 2), the whole stage 56 s with 181 (call 8); one case at most 30 s
  STEP_NOTE=note_catch
  step gpu_tests 62 cases -- "$0" --test-cases "$BIN/ember_gpu_tests" "$work/logs/gpu_tests" 8 30
  STEP_NOTE=note_mnist
  # a --graph run that falls back to eager steps still exits 0: that is a failure here
  STEP_FAIL_IF='cannot be captured'
  # about 1 s each on the H200 (one epoch, start-up and loading included)
  local m="$BIN/mnist_train" d=(--data "$DATA" --device cuda --quiet)
  step mnist_eager 6 mnist -- "$m" "${d[@]}" --epochs 1
  step mnist_graph_resident 6 mnist -- "$m" "${d[@]}" --epochs 1 --graph --device-resident
  step mnist_loader_workers 6 mnist -- "$m" "${d[@]}" --epochs 1 --workers 4 --pin-memory
  step mnist_cnn_bf16_graph 6 mnist -- "$m" "${d[@]}" --epochs 1 --model cnn --amp bf16 --graph --device-resident
  step mnist_fast_fp16_cl 6 mnist -- "$m" "${d[@]}" --epochs 1 --model fast --amp fp16 --channels-last --device-resident
  step mnist_sync_debug 6 mnist -- "$m" "${d[@]}" --epochs 1 --max-steps 200 --sync-debug --device-resident
  # the host loader's graph steps (the first H200 runs: the CNN's capture was invalidated, the
  # MLP's was not)
  step mnist_cnn_graph_host 6 mnist -- "$m" "${d[@]}" --epochs 1 --max-steps 100 --model cnn --graph --workers 2
  # On demand (--steps 'mnist_cnn_graph_host|capture_api_errors'): compute-sanitizer names the CUDA
  # call that broke a capture. It found the cause of calls 1-3's failures; the simulator now
  # refuses that call during a capture as the GPU does, and its 25 s do not fit the stage.
  STEP_FAIL_IF=""
  STEP_ON_DEMAND=1 step capture_api_errors 25 -- "$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)" \
       --tool memcheck --report-api-errors all --show-backtrace host \
       "$m" "${d[@]}" --epochs 1 --max-steps 3 --model cnn --graph --workers 2
  STEP_NOTE=""
  # NCCL's start-up (about a second) and one epoch
  step nccl_allreduce 8 -- "$BIN/ember_run" --nproc-per-node 1 -- "$BIN/bench_allreduce" --backend nccl --max-bytes 67108864 --iters 20
  step mnist_ddp_nccl 8 -- "$BIN/ember_run" --nproc-per-node 1 -- "$m" "${d[@]}" --epochs 1 --distributed
}

stage_3() {
  # ember's default, then ember's best beside PyTorch's graphed, plain and tuned loops (in that
  # order, so a stop at the cap loses the least important; compiled on demand); 5 epochs, same
  # data and recipe
  mkdir -p "$work/tables"
  STEP_NOTE=""
  local e=(env "EMBER_BIN=$BIN/mnist_train" "DATA=$DATA" "PYTHON=$python" EPOCHS=5)
  # two ember runs each: 1.2-2.0 s of wall time apiece on the H200
  step e2e_ember_default 10 e2e -- "${e[@]}" "$E2E" --ember-flags "" --configs none --gpu-idle --table "$work/tables/3a_e2e_default.md"
  # the fused Linear+ReLU's worth (Note [fused activations] in nn/sequential.h): the default run
  # above with the fusion off, on demand (--only 3 --steps 'e2e_ember_(default|unfused)')
  STEP_ON_DEMAND=1 step e2e_ember_unfused 10 e2e -- "${e[@]}" "$E2E" --ember-flags "--no-fuse-activations" \
       --configs none --gpu-idle --table "$work/tables/3h_e2e_unfused.md"
  # the fused MLP stack's worth (Note [fused MLP stacks] in nn/sequential.h): the stacks layer by
  # layer, pairs still fused, on demand (--only 3 --steps 'e2e_ember_(default|unfused|layers)')
  STEP_ON_DEMAND=1 step e2e_ember_layers 10 e2e -- "${e[@]}" "$E2E" --ember-flags "--no-fuse-mlp" \
       --configs none --gpu-idle --table "$work/tables/3i_e2e_layers.md"
  step e2e_ember_bf16 10 e2e -- "${e[@]}" "$E2E" --ember-flags "--graph --device-resident --amp bf16" --configs none \
       --gpu-idle --table "$work/tables/3b_e2e_bf16.md"
  # the honest yardstick (issue 36, item 7): ember's best fp32 flags against PyTorch's strongest
  # uncompiled loop, the whole step in one CUDA graph (train_torch.py --config graphed, not run on
  # a GPU before 2026-11-29), medians of 3, both models; estimated 45 s (3 x 2 x ~6 s for PyTorch's
  # process, ~1.5 s for ember's)
  step e2e_vs_torch_graphed 60 e2e -- "${e[@]}" "$E2E" --configs graphed --repeats 3 --gpu-idle \
       --table "$work/tables/3g_e2e_graphed.md"
  # fp32 on both sides: ember's best fp32 flags (run.sh's GPU default) against PyTorch's plain and
  # tuned loops; 35-37 s per model on the H200
  step e2e_mlp_vs_torch 43 e2e -- "${e[@]}" "$E2E" --models mlp --configs "plain tuned" --gpu-idle --table "$work/tables/3c_e2e_mlp.md"
  step e2e_cnn_vs_torch 43 e2e -- "${e[@]}" "$E2E" --models cnn --configs "plain tuned" --gpu-idle --table "$work/tables/3d_e2e_cnn.md"
  # torch.compile: both models took 88 s (call 5, the cap tripled), one model a step, both on
  # demand since the graphed loop above took their place in the plan (about 45 s for the CNN: its
  # run 33.4 s of wall time, plus start-up and ember's run); their rows are in docs/perf.md from
  # calls 5 and later
  STEP_ON_DEMAND=1 step e2e_cnn_vs_torch_compile 60 e2e -- "${e[@]}" "$E2E" --models cnn --configs compiled \
       --gpu-idle --table "$work/tables/3e_e2e_cnn_compiled.md"
  STEP_ON_DEMAND=1 step e2e_mlp_vs_torch_compile 60 e2e -- "${e[@]}" "$E2E" --models mlp --configs compiled --gpu-idle \
       --table "$work/tables/3f_e2e_mlp_compiled.md"
}

stage_4() {
  mkdir -p "$work/tables"
  local b="$BIN/bench_ops" j="$work/logs"
  STEP_NOTE=""
  # The naive reference kernels are checked in stage 2, not timed here: at 8192^3 one run takes
  # most of a second (the first H200 run spent its whole cap on them). A bench_ops step's time is
  # mostly the check of every variant against the CPU reference before it is timed (--quick times
  # 3 runs): a few seconds per variant at [8192, 32768] (1 GiB copied back and compared in f64)
  # and the naive CPU convolution (0.2-0.5 s per variant at 3-7 GFLOP on 16 cores). So the steps
  # take the cases the tables and bench/torch_ops.py compare, and one op family each.
  local q=(--device cuda --quick --min-time 0.05 --benchmark_filter=-naive)
  # which algorithm cuDNN and cuBLASLt took for each test sample (EMBER_VENDOR_LOG): where a vendor
  # variant's numbers differ from the CPU reference, the log names the kernel configuration (about
  # 6 s, call 5)
  step vendor_choices 8 -- env EMBER_VENDOR_LOG=1 "$BIN/ember_gpu_tests" "cuda op linear,cuda op conv2d_backward_input"
  # softmax alone: its five variants at [8192, 32768] f32 cost most (bf16 at that size left out:
  # another 20 s; PyTorch's row for it stays in torch_ops)
  step bench_softmax 20 bench_ops -- "$b" "${q[@]}" --op softmax --case 'f32$' --json "$j/bench_softmax.json"
  # the MNIST-size rows, the loss at [8192, 32768] f32 and the 2^26 elementwise and reduction
  # cases (the [8192, 8192] broadcast and per-dimension cases left out: no PyTorch row beside them)
  step bench_rows 12 bench_ops -- "$b" "${q[@]}" --op cross_entropy,add,sum \
       --case '^\[(8192, 32768|64, 10|512, 10)\] f32$|^2\^26 (f32|bf16)$|^\[2\^26\] all f32$' --json "$j/bench_rows.json"
  # about 10 s in call 7 (the 4096^3 and 8192^3 GEMMs are checked against cuBLAS on the device);
  # since then the Hopper GEMM's two variants and five large cases (b transposed, [8192, 4096]).
  # Its variants in clusters of 2 (Note [multicast GEMM]) are left out: the next step, on demand.
  step bench_gemm 23 bench_ops -- "$b" --device cuda --quick --min-time 0.05 '--benchmark_filter=-naive|wgmma_c2' \
       --op matmul,linear --json "$j/bench_gemm.json"
  # the Hopper GEMM in clusters of 2 sharing B by TMA multicast beside its plain 128x256 tile and
  # cuBLAS / cuBLASLt at the large 16-bit GEMMs (about 10 cases, 5 variants: estimated 6 s); the
  # stage has no room, so on demand (--only 4 --steps bench_gemm_cluster)
  STEP_ON_DEMAND=1 step bench_gemm_cluster 8 bench_ops -- "$b" "${q[@]}" --op matmul,linear \
       --variant wgmma_128x256,wgmma_c2_128x128,wgmma_c2_128x256,cublas,cublaslt --case '^\[(4096|8192),.*f16$' \
       --json "$j/bench_gemm_cluster.json"
  # a linear layer's backward at the MNIST models' layers, batch 64 and 512, f32 and bf16: the fused
  # one-launch kernel, the composite and cuBLAS (Note [fused linear backward]); 36 small cases
  step bench_linear_backward 13 bench_ops -- "$b" "${q[@]}" --op linear_backward_input,linear_backward_weight \
       --case '^\[(64|512),' --json "$j/bench_linear_backward.json"
  # the MNIST models' Linear/ReLU stacks as one op, batch 64 and 512, f32 and bf16: the fused
  # kernels against the layers one by one and on cuBLAS (Note [fused MLP]); 16 cases, estimated
  # 5 s; the stage has no room, so on demand (--only 4 --steps bench_mlp)
  STEP_ON_DEMAND=1 step bench_mlp 8 bench_ops -- "$b" "${q[@]}" --op mlp,mlp_backward --case '\[(64|512),' \
       --json "$j/bench_mlp.json"
  # the MNIST CNN's max pools both ways, plain and with the relu fused (Note [relu after max
  # pooling]): what the relu costs inside the pool; 16 small cases, one variant each; on demand
  STEP_ON_DEMAND=1 step bench_pool 5 bench_ops -- "$b" "${q[@]}" --op max_pool2d,max_pool2d_backward \
       --case '^mnist' --json "$j/bench_pool.json"
  # the convolutions ember trains (the MNIST CNN at batch 128, f32 and bf16) first, then two
  # ResNet-50 shapes, a 3x3 and a 1x1, in f32; the other batch sizes, ResNet shapes, f16 and (since
  # the linear backward rows took their time) bf16 channels-last are left out (126 cases a
  # direction never fitted: calls 2-8)
  local conv=conv2d,conv2d_backward_input,conv2d_backward_weight
  step bench_conv_mnist 15 bench_ops -- "$b" "${q[@]}" --op "$conv" --case ' n128 (f32|bf16)( bias)?$' \
       --json "$j/bench_conv_mnist.json"
  # the MNIST CNN's conv, relu, pool layers as conv2d_max_pool2d and its gradient ops on the pooled
  # gradient (Note [max pooling in the conv backward]): the direct kernels' unpooling against
  # max_pool2d_backward + cuDNN; about 4 s estimated, the stage has no room, so on demand
  STEP_ON_DEMAND=1 step bench_conv_pooled 6 bench_ops -- "$b" "${q[@]}" --op "$conv,conv2d_max_pool2d" \
       --case ' n128 .*pool' --json "$j/bench_conv_pooled.json"
  # the fast model's batch norm, relu, pool layers as batch_norm_max_pool2d and
  # batch_norm_global_avg_pool2d and batch_norm_backward on the pooled or averaged gradient (Notes
  # [max pooling in the batch norm backward], [global average pooling in the batch norm backward])
  # beside batch_norm and batch_norm_backward alone at the same shapes; on demand
  STEP_ON_DEMAND=1 step bench_bn_pooled 6 bench_ops -- "$b" "${q[@]}" \
       --op batch_norm,batch_norm_backward,batch_norm_max_pool2d,batch_norm_global_avg_pool2d \
       --case '^mnist after' --json "$j/bench_bn_pooled.json"
  step bench_conv_resnet 14 bench_ops -- "$b" "${q[@]}" --op "$conv" \
       --case '^resnet50 (64->64 3x3 56x56|1x1 256->64 56x56) n32 f32$' --json "$j/bench_conv_resnet.json"
  # the Hopper GEMM as a 1x1 convolution (conv2d's wgmma_1x1 lab variant, channels-last bf16) beside
  # ours and cuDNN at ResNet-50's 1x1 shapes; about 4 s estimated, the stage has no room, so on
  # demand (--only 4 --steps bench_conv_wgmma)
  STEP_ON_DEMAND=1 step bench_conv_wgmma 6 bench_ops -- "$b" "${q[@]}" --op conv2d \
       --case '^resnet50 1x1 [0-9]+->[0-9]+ [0-9x]+ n32 bf16 channels-last$' --json "$j/bench_conv_wgmma.json"
  step bench_h2d 5 -- "$BIN/bench_loader" --data "$DATA" --quick
  # PyTorch on the same ops and, for the convolutions, the same shapes (its names differ; its
  # rooflines always run)
  step torch_ops 20 py -- "$python" "$PY/torch_ops.py" --iters 20 --only '^(softmax|cross_entropy|add|sum|matmul|linear.*|conv2d(_backward_.*)?)$' \
       --case '^(?!\[\d+, \d+, \d+, \d+\] \* )|^\[128, (1, 28|32, 14), |^\[32, (64, 56, 56\] \* \[64, 64, 3|256, 56, 56\] \* \[64, 256, 1), ' \
       --json "$j/torch_ops.json"
  # PyTorch's conv, relu, 2x2 pool layers of the MNIST CNN at batch 128, forward and the layer's
  # whole backward, beside bench_conv_pooled's rows; on demand (--only 4 --steps torch_conv_pooled)
  STEP_ON_DEMAND=1 step torch_conv_pooled 8 py -- "$python" "$PY/torch_ops.py" --iters 20 --only '^conv2d_max_pool2d' \
       --case '^\[128, ' --json "$j/torch_conv_pooled.json"
  (( dry_run )) && return 0
  "$python" "$TABLE" "$j"/bench_*.json "$j/torch_ops.json" > "$work/tables/4_kernels.md" 2> "$j/bench_table.err" || true
  # the machine-readable results (bench/results/README.md): every variant timed above and which won
  # each case; the repository keeps it as bench/results/<gpu>-<date>-<commit>.tsv
  local about
  about="$(printf '%s\n' "$(date -u +%F), commit $(run_commit), GPU: $(nvidia-smi --query-gpu=name,driver_version \
    --format=csv,noheader 2>/dev/null | head -1)" "gpu-bundle/run.sh stage 4: bench_ops ${q[*]}, the bench_* steps' cases")"
  "$python" "$TABLE" --results "$out/bench_results.tsv" --source "$about" "$j"/bench_*.json >> "$j/bench_table.err" 2>&1 || true
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
  # Never wrote counters in its cap on the H200: the first 12 kernels of the process were the
  # rooflines' (a 1 GiB fill, the 8192^3 cuBLAS GEMMs), each replayed once per metric pass. Only
  # ember's elementwise and row kernels are profiled now, add's and softmax's (and the L2 flush's
  # fills, elementwise too).
  step ncu 22 -- "$ncu" --target-processes all --csv --page raw --launch-count 12 \
    --kernel-name 'regex:elementwise_vec_kernel|regs_kernel|warp_kernel|block_kernel' --metrics \
    l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,gpu__time_duration.sum \
    "$BIN/bench_ops" --device cuda --op add,softmax --quick --min-time 0.01 --benchmark_filter=-naive
}

# The dry run's check of Note [runner sizing]: the caps of stage N's planned steps (STEP_CAPS,
# summed by step) add up to at most the stage's cap CAP (both unscaled).
check_stage_fit() {
  local n="$1" cap="$2"
  if (( STEP_CAPS > cap )); then
    record "$n" "(stage)" "STEPS OVER THE STAGE CAP" 0 \
      "its planned steps' caps add up to ${STEP_CAPS}s, over the stage's ${cap}s (Note [runner sizing])"
    return 1
  fi
  record "$n" "(stage)" "fits" 0 "its planned steps' caps add up to ${STEP_CAPS}s of ${cap}s"
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
  cap_override="GPU_RUN_TEST_CAP_$n"
  [[ -n "${!cap_override:-}" ]] && cap="${!cap_override}"
  echo "run.sh: stage $n: $name (cap ${cap}s)"
  cap_s=$(awk -v c="$cap" -v s="$scale" 'BEGIN { printf "%d", c * s + 0.5 }')
  rc=0
  if (( dry_run )); then
    (
      STAGE=$n
      STEP_CAPS=0
      body_rc=0
      "stage_$n" || body_rc=$?
      check_stage_fit "$n" "$cap" && exit "$body_rc"
    ) || rc=$?
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
awk -F'\t' '$3 != "ok" && $3 != "parses" && $3 != "fits" { bad = 1 } END { exit bad }' "$results" || overall=1
nfiles=$(find "$out" -maxdepth 1 -type f | wc -l)
(( nfiles > 8 )) && { echo "run.sh: error: $out holds $nfiles files, over 8" >&2; overall=1; }
cat "$out/summary.md"
exit $overall
