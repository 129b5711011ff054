#!/usr/bin/env bash
# End-to-end benchmark: ember's mnist_train against PyTorch (plain, tuned eager, torch.compile, the
# step in one CUDA graph) on the same IDX files, models and recipe. Runs mlp at batch 64 and cnn at
# batch 128 for 5 epochs and prints one markdown table. See README.md.
#
#   bench/e2e/run.sh [--data DIR] [--epochs N] [--bin PATH] [--python PYTHON] [--ember-flags "..."]
#                    [--device cpu|cuda] [--threads N] [--repeats N] [--configs "plain tuned ..."|none] [--dry-run]
#                    [--gpu-idle] [--table FILE] [--models "mlp cnn"]
#
# --configs none runs ember alone; --gpu-idle samples nvidia-smi's utilization every 100 ms during
# each run and adds the GPU's idle % (over the whole process: start-up, loading, evaluation
# included); --table also writes the table to FILE.
# Environment overrides: DATA, EPOCHS, EMBER_BIN, PYTHON, EMBER_FLAGS, DEVICE, THREADS, REPEATS, CONFIGS.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
data="${DATA:-/usr/share/datasets/fashion-mnist}"
epochs="${EPOCHS:-5}"
bin="${EMBER_BIN:-$root/build/bin/mnist_train}"
python="${PYTHON:-python3}"
# empty: the GPU comparison as it always ran (mnist_train and PyTorch pick the GPU themselves)
device="${DEVICE:-}"
threads="${THREADS:-}"
repeats="${REPEATS:-3}"
configs="${CONFIGS:-}"
ember_flags="${EMBER_FLAGS-unset}"
dry_run=0
gpu_idle=0
models="mlp cnn"
table=""

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --ember-flags) ember_flags="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --gpu-idle) gpu_idle=1; shift ;;
    --models) models="$2"; shift 2 ;;
    --table) table="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

case "$device" in
  ""|cuda|cuda:*) ;;
  cpu) ;;
  *) echo "run.sh: error: --device must be cpu or cuda[:N], not '$device'" >&2; exit 2 ;;
esac
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: error: --repeats must be a positive integer, not '$repeats'" >&2; exit 2; }
if [[ "$device" == cpu ]]; then
  # On the CPU both sides get the same number of threads (EMBER_NUM_THREADS for ember,
  # torch.set_num_threads for PyTorch); default: every core.
  threads="${threads:-$(nproc)}"
  [[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: error: --threads must be a positive integer, not '$threads'" >&2; exit 2; }
  # ember's plain eager loop with its default kernels (on the CPU measured on this machine, oneDNN's
  # among the candidates: Note [CPU defaults] in kernels/registry.h); --device-resident and --graph
  # are GPU features
  [[ "$ember_flags" == unset ]] && ember_flags=""
  # torch.compile's "reduce-overhead" mode is CUDA graphs; on the CPU it compiles C++ for minutes
  configs="${configs:-plain tuned}"
  # PyTorch's OpenMP threads spin between parallel regions by default; on a shared machine that
  # made its 2-thread MLP run many times slower (a 2-epoch run had not finished after 3 minutes;
  # passive: 2.1 s per epoch). ember's pool sleeps on a condition variable, so passive is the like
  # for like setting. An OMP_WAIT_POLICY already in the environment is kept.
  export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
else
  [[ -n "$threads" ]] && { echo "run.sh: error: --threads applies to --device cpu only" >&2; exit 2; }
  # ember's fastest fp32 settings on a GPU: the set on the device as uint8, the step in a CUDA graph,
  # autotuned kernel variants (no --amp: PyTorch runs fp32 too)
  [[ "$ember_flags" == unset ]] && ember_flags="--device-resident --graph --autotune"
  configs="${configs:-plain tuned compiled graphed}"
fi
[[ "$configs" == none ]] && configs=""
for c in $configs; do
  case "$c" in plain|tuned|compiled|graphed) ;; *) echo "run.sh: error: unknown PyTorch config '$c'" >&2; exit 2 ;; esac
done

ember_device_flags=()
torch_device_flags=()
ember_env=()
if [[ -n "$device" ]]; then
  ember_device_flags=(--device "$device")
  torch_device_flags=(--device "$device")
fi
if [[ -n "$threads" ]]; then
  ember_env=(env "EMBER_NUM_THREADS=$threads")
  torch_device_flags+=(--threads "$threads")
fi

if (( ! dry_run )); then
  [[ -x "$bin" ]] || { echo "run.sh: error: $bin is not built (cmake --build build --target mnist_train)" >&2; exit 1; }
  [[ -d "$data" ]] || { echo "run.sh: error: no data directory $data" >&2; exit 1; }
  if [[ -n "$configs" ]]; then
    "$python" -c "import torch" 2>/dev/null || { echo "run.sh: error: $python cannot import torch" >&2; exit 1; }
  fi
  if (( gpu_idle )) && ! command -v nvidia-smi > /dev/null; then
    echo "run.sh: error: --gpu-idle needs nvidia-smi" >&2; exit 1
  fi
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
results="$work/results.jsonl"
: > "$results"

# measured OUT CMD...: runs CMD with its stdout in OUT; with --gpu-idle it leaves the GPU's idle %
# during the run in $idle (100 - the mean of nvidia-smi's utilization samples).
idle=""
measured() {
  local out="$1"; shift
  if (( ! gpu_idle )); then "$@" > "$out"; return; fi
  local samples="$work/utilization.txt" sampler rc=0
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 > "$samples" 2>/dev/null &
  sampler=$!
  "$@" > "$out" || rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  idle=$(awk '$1 ~ /^[0-9]+$/ { s += $1; n++ } END { if (n) printf "%.1f", 100 - s / n }' "$samples")
  return $rc
}
# add_result FILE: its JSON lines, with the GPU idle % when measured, appended to the results
add_result() {
  "$python" - "$1" "$idle" >> "$results" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    if line.strip().startswith("{"):
        row = json.loads(line)
        if sys.argv[2]:
            row["gpu_idle_pct"] = float(sys.argv[2])
        print(json.dumps(row))
EOF
}

# One ember run: its summary lines become one JSON line like the PyTorch script's.
run_ember() {
  local model="$1" batch="$2" out="$work/ember_${1}.txt"
  local -a flags
  read -r -a flags <<< "$ember_flags"
  local -a cmd=("${ember_env[@]}" "$bin" --data "$data" --model "$model" --batch-size "$batch" --epochs "$epochs"
                --quiet "${ember_device_flags[@]}" "${flags[@]}")
  echo "ember: $model, batch $batch, $epochs epochs: ${cmd[*]}" >&2
  (( dry_run )) && return 0
  measured "$out" "${cmd[@]}"
  "$python" - "$out" "$model" "$batch" "$epochs" > "$out.json" <<'EOF'
import json, re, sys
path, model, batch, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
text = open(path).read()
def grab(pattern):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"run.sh: error: no '{pattern}' in mnist_train's output ({path})")
    return float(m.group(1))
print(json.dumps({"config": "ember", "model": model, "batch_size": batch, "epochs": epochs,
                  "wall_s": grab(r"total time\s+([0-9.]+) s"),
                  "samples_per_s": grab(r"training time\s+[0-9.]+ s, ([0-9.]+) samples/s"),
                  "startup_s": grab(r"start-up\s+([0-9.]+) s"),
                  "timed_s": grab(r"timed\s+([0-9.]+) s,"),
                  "timed_samples_per_s": grab(r"timed\s+[0-9.]+ s, ([0-9.]+) samples/s"),
                  "warmup_s": grab(r"timed\s+.*after a warm-up of ([0-9.]+) s"),
                  "test_accuracy": grab(r"test accuracy\s+([0-9.]+)%")}))
EOF
  add_result "$out.json"
}

run_torch() {
  local model="$1" batch="$2" config="$3"
  local -a cmd=("$python" "$here/train_torch.py" --data "$data" --model "$model" --batch-size "$batch"
                --epochs "$epochs" --config "$config" "${torch_device_flags[@]}")
  echo "torch: $model, batch $batch, $epochs epochs, $config: ${cmd[*]}" >&2
  (( dry_run )) && return 0
  measured "$work/torch.json" "${cmd[@]}"
  add_result "$work/torch.json"
}

# Runs alternate (ember, then each PyTorch config, then ember again ...) so that a slow spell of a
# shared machine lands on both sides; the table shows the median of the --repeats runs of each row.
for ((rep = 1; rep <= repeats; ++rep)); do
  for spec in "mlp 64" "cnn 128"; do
    read -r model batch <<< "$spec"
    [[ " $models " == *" $model "* ]] || continue
    run_ember "$model" "$batch"
    for config in $configs; do run_torch "$model" "$batch" "$config"; done
  done
done
(( dry_run )) && exit 0

"$python" - "$results" "$repeats" "$threads" "$ember_flags" <<'EOF' | tee ${table:+"$table"}
import json, os, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
repeats, threads = int(sys.argv[2]), sys.argv[3]
def median_row(group):
    out = dict(group[0])
    for key in ("wall_s", "samples_per_s", "test_accuracy", "gpu_idle_pct", "timed_s", "timed_samples_per_s",
                "warmup_s", "startup_s"):
        if all(key in r for r in group):
            out[key] = statistics.median(r[key] for r in group)
    out["runs"] = len(group)
    return out
idle = any("gpu_idle_pct" in r for r in rows)
def num(r, key, fmt):
    return format(r[key], fmt) if key in r else "-"
print("| model | batch | run | timed (s) | samples/s (timed) | warm-up (s) | start-up (s) | wall (s) | test acc "
      "| ember speed-up (timed) | ember speed-up (wall) |" + (" GPU idle % |" if idle else ""))
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if idle else ""))
for model in ("mlp", "cnn"):
    configs = []
    for r in rows:
        if r["model"] == model and r["config"] not in configs:
            configs.append(r["config"])
    group = {c: median_row([r for r in rows if r["model"] == model and r["config"] == c]) for c in configs}
    ember = group.get("ember")
    for c, r in group.items():
        wall = timed = "-"
        if c != "ember" and ember is not None:
            wall = f"{r['wall_s'] / ember['wall_s']:.2f}x"
            if "timed_s" in r and "timed_s" in ember:
                timed = f"{r['timed_s'] / ember['timed_s']:.2f}x"
        name = f"ember {sys.argv[4] or '(default flags)'}" if c == "ember" else f"torch {c}"
        print(f"| {model} | {r['batch_size']} | {name} | {num(r, 'timed_s', '.3f')} | "
              f"{num(r, 'timed_samples_per_s', '.0f')} | {num(r, 'warmup_s', '.3f')} | {num(r, 'startup_s', '.2f')} | "
              f"{r['wall_s']:.2f} | {r['test_accuracy']:.2f}% | {timed} | {wall} |"
              + (f" {r['gpu_idle_pct']:.0f} |" if "gpu_idle_pct" in r else (" - |" if idle else "")))
print("\ntimed: training and the per-epoch evaluations after the warm-up (the first optimizer step, and with "
      "tuning one evaluation forward per batch shape), the same rule on both sides (bench/e2e/README.md); "
      "torch.compile's compilation is in its warm-up.")
if repeats > 1:
    print(f"Each row: the median of {repeats} runs, ember and PyTorch alternating.")
if threads:
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')} for both processes.")
    torch_threads = sorted({r.get("threads") for r in rows if r["config"] != "ember"} - {None})
    print(f"Threads: ember EMBER_NUM_THREADS={threads}, PyTorch torch.set_num_threads({threads})"
          + (f" (reported: {', '.join(map(str, torch_threads))})" if torch_threads else "") + ".")
EOF
