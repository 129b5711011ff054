#!/usr/bin/env bash
# Builds the GPU bundle on the build machine, so that nothing is compiled on the GPU machine:
# gpu-bundle/ (git-ignored) holds run.sh (scripts/gpu_run.sh, the staged check), manifest.json and
# payload.tar.xz: ember's programs for the check (Release, sm_90 SASS + compute_90 PTX) over shared
# layer libraries (EMBER_SHARED: the CUDA code once, not once per program), the shared libraries
# from Debian the GPU machine lacks, Fashion-MNIST, and the PyTorch side of the comparison. The
# vendor libraries (libcuda, cuBLAS, cuDNN, NCCL) are not in it: run.sh finds them on the machine.
#
#   scripts/gpu_bundle.sh [--build-dir build-bundle] [--out gpu-bundle] [--jobs 2]
#
# The repository and the bundle travel to the GPU machine together: at most 56 MiB in all (the
# limit is 64), which this script checks. docs/gpu-validation.md has the procedure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-bundle
out=gpu-bundle
jobs=2
data=/usr/share/datasets/fashion-mnist
limit_mib=56
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "gpu_bundle: error: no nvcc (the CUDA toolkit is needed to build the bundle)" >&2; exit 1; }
[[ -f "$data/train-images-idx3-ubyte.gz" ]] || { echo "gpu_bundle: error: no Fashion-MNIST in $data (scripts/setup.sh installs dataset-fashion-mnist)" >&2; exit 1; }

t0=$SECONDS
flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DEMBER_CUDA=ON -DEMBER_SHARED=ON
       -DEMBER_DNNL=OFF -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_BENCH=ON -DEMBER_BUILD_APPS=ON)
programs=(ember_gpu_tests mnist_train bench_ops bench_loader bench_allreduce ember_run)
mkdir -p "$build"
echo "gpu_bundle: configure $build (${flags[*]})"
cmake -S . -B "$build" "${flags[@]}" > "$build/gpu_bundle.configure.log" 2>&1 || { tail -30 "$build/gpu_bundle.configure.log"; exit 1; }
grep -q 'ember: CUDA' "$build/gpu_bundle.configure.log" || { echo "gpu_bundle: error: the configure did not enable CUDA (see $build/gpu_bundle.configure.log)" >&2; exit 1; }
echo "gpu_bundle: build ${programs[*]} (-j$jobs)"
cmake --build "$build" -j"$jobs" --target "${programs[@]}"
t_build=$((SECONDS - t0))

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib/fallback" "$stage/data" "$stage/bench/e2e"
for p in "${programs[@]}"; do cp "$build/bin/$p" "$stage/bin/"; done
cp -P "$build"/lib/libember_*.so* "$stage/lib/"

# The shared libraries the programs load that a bare GPU machine may lack: everything ldd finds
# except the C library's own, the driver and the vendor libraries run.sh finds on the machine.
# The ones every such machine has in some version (the C++ runtime, zlib, libcrypto, the CUDA
# runtime) go to lib/fallback/, which run.sh adds only when the machine's own are missing or older.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libcuda\.so|libcublas|libcublasLt|libcudnn|libnccl|libember_)'
for f in "$stage"/bin/* "$stage"/lib/libember_*.so; do
  LD_LIBRARY_PATH="$build/lib" ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  if [[ "$name" =~ ^(libstdc\+\+|libgcc_s|libz\.so|libgomp|libcrypto|libcudart) ]]; then
    cp -L "$path" "$stage/lib/fallback/$name"
  else
    cp -L "$path" "$stage/lib/$name"
  fi
done
if LD_LIBRARY_PATH="$stage/lib:$stage/lib/fallback" ldd "$stage"/bin/* | grep 'not found' | grep -v -E 'libcuda|libcublas|libcudnn|libnccl'; then
  echo "gpu_bundle: error: a library above is neither bundled nor a vendor library" >&2; exit 1
fi
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/*.so* 2> /dev/null || true

# Fashion-MNIST as xz'd raw IDX files: 22.6 MB for the training images instead of Debian's 26.4 MB gzip
for f in "$data"/*-ubyte.gz; do
  zcat "$f" | xz -9 -T"$jobs" > "$stage/data/$(basename "$f" .gz).xz"
done
cp bench/torch_ops.py scripts/bench_table.py "$stage/bench/"
cp bench/e2e/run.sh bench/e2e/train_torch.py "$stage/bench/e2e/"
# the GPU runs' results, which the GPU suite's library rule reads (run.sh sets EMBER_BENCH_RESULTS)
mkdir -p "$stage/bench/results"
cp bench/results/*.tsv "$stage/bench/results/"

rm -rf "$out" && mkdir -p "$out"
tar -C "$stage" -cf - . | xz -9 -T"$jobs" > "$out/payload.tar.xz"
cp scripts/gpu_run.sh "$out/run.sh"
chmod +x "$out/run.sh"

commit="$(git rev-parse HEAD 2> /dev/null || echo unknown)"
dirty="$(git status --porcelain 2> /dev/null | grep -v '^??' | head -1 || true)"
size_of() { du -sb "$1" | cut -f1; }
repo_bytes=$(git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)
bundle_bytes=$(size_of "$out")
total=$((repo_bytes + bundle_bytes))
{
  echo "{"
  echo "  \"commit\": \"$commit${dirty:+ (with uncommitted changes)}\","
  echo "  \"built\": \"$(date -u +%FT%TZ)\","
  echo "  \"build_flags\": \"${flags[*]}\","
  echo "  \"nvcc\": \"$( (command -v nvcc > /dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) | tail -1)\","
  echo "  \"programs\": [$(printf '"%s", ' "${programs[@]}" | sed 's/, $//')],"
  echo "  \"unpacked_bytes\": $(size_of "$stage"),"
  echo "  \"payload_bytes\": $(size_of "$out/payload.tar.xz"),"
  echo "  \"repository_bytes\": $repo_bytes,"
  echo "  \"build_seconds\": $t_build,"
  echo "  \"stages\": ["
  "$out/run.sh" --plan | awk '{ n = $1; cap = $2; sub(/s$/, "", cap); $1 = ""; $2 = ""; sub(/^ +/, ""); printf "%s    {\"stage\": %s, \"cap_s\": %s, \"what\": \"%s\"}", sep, n, cap, $0; sep = ",\n" } END { print "" }'
  echo "  ]"
  echo "}"
} > "$out/manifest.json"

echo "gpu_bundle: $out: $(du -sh "$out" | cut -f1) (payload $(du -sh "$out/payload.tar.xz" | cut -f1), unpacked $(du -sh "$stage" | cut -f1));" \
     "repository $((repo_bytes / 1048576)) MiB; together $((total / 1048576)) MiB of $limit_mib; built in ${t_build}s, bundled in $((SECONDS - t0 - t_build))s"
if (( total > limit_mib * 1048576 )); then
  echo "gpu_bundle: error: the repository and the bundle come to $((total / 1048576)) MiB, over $limit_mib MiB" >&2
  exit 1
fi
