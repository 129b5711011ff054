#!/usr/bin/env bash
# Gathers the build dependencies that a bare GPU machine lacks (header-only libraries, Catch2's and
# Google Benchmark's CMake files, zlib headers) from this Debian machine into .deps/ (git-ignored),
# keeping the /usr layout, so scripts/gpu_check.sh can point CMake at them. Run after
# scripts/setup.sh; a few MB.
set -euo pipefail
cd "$(dirname "$0")/.."
D=.deps
rm -rf "$D" && mkdir -p "$D"
copy() {  # copy paths (files, dirs, symlinks resolved) under $D preserving their absolute path
  for p in "$@"; do
    [ -e "$p" ] || { echo "gpu_deps: missing $p (run scripts/setup.sh)" >&2; exit 1; }
    mkdir -p "$D$(dirname "$p")"
    cp -rL "$p" "$D$(dirname "$p")/"
  done
}
LIB=/usr/lib/x86_64-linux-gnu
copy /usr/include/catch2 /usr/lib/cmake/Catch2
copy /usr/include/benchmark $LIB/cmake/benchmark
cp -L $LIB/libbenchmark.so "$D$LIB/libbenchmark.so" 2>/dev/null || { mkdir -p "$D$LIB"; cp -L $LIB/libbenchmark.so "$D$LIB/"; }
for f in $LIB/libbenchmark.so.*; do cp -L "$f" "$D$LIB/"; done
copy /usr/include/nlohmann /usr/share/cmake/nlohmann_json
copy /usr/include/stb
copy /usr/include/CLI
[ -d /usr/share/cmake/CLI11 ] && copy /usr/share/cmake/CLI11
[ -d /usr/lib/cmake/CLI11 ] && copy /usr/lib/cmake/CLI11
copy /usr/include/zlib.h /usr/include/zconf.h
cp -L $LIB/libz.so "$D$LIB/libz.so"
du -sh "$D"
