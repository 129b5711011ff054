#!/usr/bin/env bash
# End-to-end benchmark: ember's mnist_train against PyTorch (plain, tuned eager, torch.compile) on
# the same IDX files, models and recipe. Runs mlp at batch 64 and cnn at batch 128 for 5 epochs
# and prints one markdown table. See README.md.
#
#   bench/e2e/run.sh [--data DIR] [--epochs N] [--bin PATH] [--python PYTHON] [--ember-flags "..."]
#
# Environment overrides: DATA, EPOCHS, EMBER_BIN, PYTHON, EMBER_FLAGS.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
data="${DATA:-/usr/share/datasets/fashion-mnist}"
epochs="${EPOCHS:-5}"
bin="${EMBER_BIN:-$root/build/bin/mnist_train}"
python="${PYTHON:-python3}"
# ember's fastest fp32 settings on a GPU: the set on the device as uint8, the step in a CUDA graph,
# autotuned kernel variants (no --amp: PyTorch runs fp32 too)
ember_flags="${EMBER_FLAGS:---device-resident --graph --autotune}"

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --ember-flags) ember_flags="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

[[ -x "$bin" ]] || { echo "run.sh: error: $bin is not built (cmake --build build --target mnist_train)" >&2; exit 1; }
[[ -d "$data" ]] || { echo "run.sh: error: no data directory $data" >&2; exit 1; }
"$python" -c "import torch" 2>/dev/null || { echo "run.sh: error: $python cannot import torch" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
results="$work/results.jsonl"
: > "$results"

# One ember run: its summary lines become one JSON line like the PyTorch script's.
run_ember() {
  local model="$1" batch="$2" out="$work/ember_${1}.txt"
  local -a flags
  read -r -a flags <<< "$ember_flags"
  echo "ember: $model, batch $batch, $epochs epochs: $bin ${flags[*]}" >&2
  "$bin" --data "$data" --model "$model" --batch-size "$batch" --epochs "$epochs" --quiet "${flags[@]}" > "$out"
  "$python" - "$out" "$model" "$batch" "$epochs" >> "$results" <<'EOF'
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
                  "test_accuracy": grab(r"test accuracy\s+([0-9.]+)%")}))
EOF
}

run_torch() {
  local model="$1" batch="$2"
  echo "torch: $model, batch $batch, $epochs epochs (plain, tuned, compiled)" >&2
  "$python" "$here/train_torch.py" --data "$data" --model "$model" --batch-size "$batch" --epochs "$epochs" \
    --config all >> "$results"
}

for spec in "mlp 64" "cnn 128"; do
  read -r model batch <<< "$spec"
  run_ember "$model" "$batch"
  run_torch "$model" "$batch"
done

"$python" - "$results" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| model | batch | run | wall time (s) | samples/s | test acc | ember speed-up (wall) | ember speed-up (samples/s) |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for model in ("mlp", "cnn"):
    group = [r for r in rows if r["model"] == model]
    ember = next((r for r in group if r["config"] == "ember"), None)
    for r in group:
        if r["config"] == "ember" or ember is None:
            wall = rate = "-"
        else:
            wall = f"{r['wall_s'] / ember['wall_s']:.2f}x"
            rate = f"{ember['samples_per_s'] / r['samples_per_s']:.2f}x"
        name = "ember (best)" if r["config"] == "ember" else f"torch {r['config']}"
        print(f"| {model} | {r['batch_size']} | {name} | {r['wall_s']:.2f} | {r['samples_per_s']:.0f} | "
              f"{r['test_accuracy']:.2f}% | {wall} | {rate} |")
EOF
