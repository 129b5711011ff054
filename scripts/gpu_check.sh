#!/usr/bin/env bash
# Checks everything on a machine with an NVIDIA GPU: builds for sm_90 (override with ARCH=...),
# runs the whole test suite including the `gpu` label, the kernel benchmark, the PyTorch op
# benchmark and the end-to-end comparison when their prerequisites exist, and prints a short table
# last. Logs and JSON go to $OUT (default: gpu-check-out/).
#
#   scripts/gpu_check.sh                 dependencies from the system (scripts/setup.sh)
#   EMBER_DEPS=.deps scripts/gpu_check.sh dependencies gathered by scripts/gpu_deps.sh (bare machine)
#   QUICK=1 ...                          short benchmark runs
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check-out}
ARCH=${ARCH:-90}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
status=()
note() { status+=("$1"); echo "== $1"; }

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

# ---- dependencies ----
CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DEMBER_CUDA=ON)
if [ -n "${EMBER_DEPS:-}" ]; then
  DEPS=$(cd "$EMBER_DEPS" && pwd)
  CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$DEPS/usr;$DEPS/usr/lib/x86_64-linux-gnu/cmake;$DEPS/usr/share/cmake;$DEPS/usr/lib/cmake"
               -DCMAKE_INCLUDE_PATH="$DEPS/usr/include" -DZLIB_ROOT="$DEPS/usr" -DZLIB_INCLUDE_DIR="$DEPS/usr/include"
               -DZLIB_LIBRARY="$DEPS/usr/lib/x86_64-linux-gnu/libz.so")
  export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export CPATH="$DEPS/usr/include:${CPATH:-}"
fi
# cuDNN may live in the toolkit or in PyTorch's site-packages (nvidia/cudnn)
if ! ls /usr/local/cuda/lib64/libcudnn.so* >/dev/null 2>&1; then
  CUDNN_LIB=$(find / -name 'libcudnn.so*' -not -path '*/proc/*' 2>/dev/null | head -1)
  if [ -n "$CUDNN_LIB" ]; then
    CUDNN_DIR=$(dirname "$CUDNN_LIB")
    CUDNN_INC=$(find "$(dirname "$CUDNN_DIR")" -name cudnn.h 2>/dev/null | head -1)
    [ -e "$CUDNN_DIR/libcudnn.so" ] || ln -sf "$CUDNN_LIB" "$CUDNN_DIR/libcudnn.so" 2>/dev/null || true
    CMAKE_ARGS+=(-DEMBER_CUDNN_LIBRARY="$CUDNN_DIR/libcudnn.so")
    [ -n "$CUDNN_INC" ] && CMAKE_ARGS+=(-DEMBER_CUDNN_INCLUDE="$(dirname "$CUDNN_INC")")
    export LD_LIBRARY_PATH="$CUDNN_DIR:${LD_LIBRARY_PATH:-}"
  fi
fi

# ---- build ----
if cmake -S . -B build-gpu "${CMAKE_ARGS[@]}" > "$OUT/configure.log" 2>&1 && cmake --build build-gpu -j"$JOBS" > "$OUT/build.log" 2>&1; then
  note "build sm_$ARCH: ok"
else
  note "build sm_$ARCH: FAILED (see $OUT/configure.log, $OUT/build.log)"
  tail -40 "$OUT/build.log" 2>/dev/null || tail -40 "$OUT/configure.log"
  printf '%s\n' "${status[@]}"
  exit 1
fi

# ---- tests (all labels; the gpu binary in full with per-case results) ----
ctest --test-dir build-gpu -j4 --output-on-failure > "$OUT/ctest.log" 2>&1
note "ctest: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
build-gpu/bin/ember_gpu_tests -r compact > "$OUT/gpu_tests.log" 2>&1
note "ember_gpu_tests: $(tail -1 "$OUT/gpu_tests.log")"

# ---- benchmarks ----
BENCH_ARGS=(--json "$OUT/bench_ops.json")
[ -n "${QUICK:-}" ] && BENCH_ARGS+=(--quick)
build-gpu/bin/bench_ops "${BENCH_ARGS[@]}" > "$OUT/bench_ops.log" 2>&1
note "bench_ops: exit $? (table in $OUT/bench_ops.log)"
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && [ -f bench/torch_ops.py ]; then
  PYTHONUNBUFFERED=1 python3 bench/torch_ops.py --json "$OUT/torch_ops.json" > "$OUT/torch_ops.log" 2>&1
  note "torch_ops.py: exit $?"
fi
if [ -x bench/e2e/run.sh ]; then
  bench/e2e/run.sh "$OUT" > "$OUT/e2e.log" 2>&1
  note "e2e comparison: exit $? (table in $OUT/e2e.log)"
fi
# ---- mnist_train on the GPU: the default run, the ablation ladder, mixed precision vs fp32 ----
if [ -x build-gpu/bin/mnist_train ]; then
  build-gpu/bin/mnist_train --quiet > "$OUT/mnist_default.log" 2>&1
  note "mnist_train default: exit $? ($(grep -m1 'test accuracy' "$OUT/mnist_default.log" | tr -s ' '))"
  build-gpu/bin/mnist_train --ablation > "$OUT/mnist_ablation.log" 2>&1
  note "mnist_train --ablation: exit $? (table in $OUT/mnist_ablation.log)"
  echo "model batch amp samples/s test_acc" > "$OUT/mnist_amp.txt"
  for model in cnn fast; do
    for bs in 128 512; do
      for amp in off fp16 bf16; do
        log="$OUT/mnist_amp_${model}_${bs}_${amp}.log"
        build-gpu/bin/mnist_train --quiet --model "$model" --batch-size "$bs" --amp "$amp" --epochs 5 --device-resident --graph > "$log" 2>&1
        echo "$model $bs $amp $(grep -m1 'training time' "$log" | grep -oE '[0-9.]+ samples/s' | cut -d' ' -f1) $(grep -m1 'test accuracy' "$log" | grep -oE '[0-9.]+%' | head -1)" >> "$OUT/mnist_amp.txt"
      done
    done
  done
  note "mnist_train --amp table: $OUT/mnist_amp.txt"
fi
[ -x build-gpu/bin/bench_loader ] && { build-gpu/bin/bench_loader > "$OUT/bench_loader.log" 2>&1; note "bench_loader: exit $?"; }

# ---- calibration: the model's inputs and the simulator's counters against the hardware ----
# (docs/gpu-validation.md, "Calibration: simulator counters vs Nsight Compute")
# 1. Per-kernel resources: this machine's build against the checked-in table (also a ctest entry
#    above); cuobjdump, which the dev machines lack, reads the same numbers back from the cubins.
python3 scripts/kernel_resources.py --build build-gpu --check > "$OUT/kernel_resources.log" 2>&1
note "kernel resources of the sm_$ARCH build vs bench/model/kernel_resources_sm90.txt: exit $? ($OUT/kernel_resources.log)"
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
if [ -x "$CUOBJDUMP" ]; then
  for lib in build-gpu/lib/libember_kernels.a build-gpu/lib/libember_train.a; do
    [ -f "$lib" ] && "$CUOBJDUMP" --dump-resource-usage "$lib"
  done > "$OUT/cuobjdump_resource_usage.txt" 2>&1
  note "cuobjdump --dump-resource-usage: exit $? ($OUT/cuobjdump_resource_usage.txt)"
fi
# 2. Nsight Compute on the benchmark shapes: global sectors and requests, shared-memory wavefronts
#    and occupancy per kernel launch, to set beside the simulator's counters for the same cases
#    (bench_ops --model). Metric names ncu does not know are dropped (and listed) instead of failing
#    the run; launches are capped (NCU_LAUNCHES) because every profiled launch is replayed once per
#    metric pass.
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ -x "$NCU" ] && [ -x build-gpu/bin/bench_ops ]; then
  NCU_METRICS=(l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
               l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
               l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
               l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
               sm__warps_active.avg.pct_of_peak_sustained_active sm__maximum_warps_per_active_cycle_pct
               launch__occupancy_limit_registers launch__occupancy_limit_shared_mem launch__occupancy_limit_warps
               launch__occupancy_limit_blocks launch__registers_per_thread launch__block_size launch__grid_size
               launch__shared_mem_per_block_static launch__shared_mem_per_block_dynamic gpu__time_duration.sum)
  "$NCU" --query-metrics --query-metrics-mode all > "$OUT/ncu_metrics_available.txt" 2>&1
  known=()
  for m in "${NCU_METRICS[@]}"; do
    # launch__* are launch attributes, which the metric listing may not show
    if [[ $m == launch__* ]] || grep -q -E "^${m%%.*}([. ]|$)" "$OUT/ncu_metrics_available.txt"; then
      known+=("$m")
    else
      echo "ncu: metric not offered, dropped: $m"
    fi
  done > "$OUT/ncu_metrics_dropped.txt"
  [ ${#known[@]} -eq 0 ] && known=("${NCU_METRICS[@]}")  # an unreadable listing: ask for all, let ncu say
  timeout 540 "$NCU" --csv --page raw --kernel-name-base demangled --launch-count "${NCU_LAUNCHES:-400}" \
    --metrics "$(IFS=,; echo "${known[*]}")" \
    build-gpu/bin/bench_ops --device cuda --op "${NCU_OPS:-add,sum,softmax,matmul,conv2d,max_pool2d,batch_norm,cross_entropy}" \
    --quick --min-time 0.01 > "$OUT/ncu_bench_ops.csv" 2> "$OUT/ncu_bench_ops.log"
  note "ncu on bench_ops (${#known[@]} metrics): exit $? ($OUT/ncu_bench_ops.csv; dropped metrics in $OUT/ncu_metrics_dropped.txt)"
fi

# ---- short table last ----
if [ -f "$OUT/bench_ops.json" ]; then
  python3 scripts/bench_table.py "$OUT/bench_ops.json" ${OUT:+"$OUT/torch_ops.json"} > "$OUT/summary.md" 2>/dev/null && cat "$OUT/summary.md"
fi
[ -f "$OUT/mnist_amp.txt" ] && column -t "$OUT/mnist_amp.txt"
echo
echo "== summary =="
printf '%s\n' "${status[@]}"
