#!/usr/bin/env bash
# Installs every Debian package ember's build, tests and main job need. Idempotent: packages that
# are already installed are skipped, and `apt-get update` runs at most once, only when something
# is missing. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  catch2                 # tests (Catch2 v2)
  libbenchmark-dev       # bench_ops
  zlib1g-dev             # gzip'd IDX files (streamed), PNG
  libdeflate-dev         # gzip'd IDX files inflated in one call (data/idx.cpp)
  nlohmann-json3-dev     # safetensors headers, JSON logs
  libstb-dev             # ImageFolder decoding (stb_image)
  libcli11-dev           # command lines of the programs
  libeigen3-dev          # ember_tune's Gaussian process (apps/ember_tune; skipped without it)
  libboost-context-dev   # the SIMT simulator's fibers (-DEMBER_CUDA_SIM=ON)
  libgloo-dev            # dist/: CPU collectives (the gloo backend)
  libssl-dev             # dist/: the rendezvous store's job token (HMAC-SHA256 from libcrypto)
  libdnnl-dev            # oneDNN: the CPU vendor variants ("dnnl"; optional, -DEMBER_DNNL=OFF without)
  dataset-fashion-mnist  # the main job's data: /usr/share/datasets/fashion-mnist
  openmpi-bin            # tests: mpirun launching mnist_train (ember links no MPI library)
  python3 python3-pip    # interop tests (safetensors), helper scripts
  clang-format           # tests: every C++/CUDA file follows .clang-format (scripts/check_format.py)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages are installed"
fi

# nvcc is optional: the CUDA toolkit is not a Debian package here. CMake enables CUDA when it is found.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found ($( (command -v nvcc || echo /usr/local/cuda/bin/nvcc) ))"
else
  echo "setup: no CUDA toolkit: ember builds CPU-only"
fi
