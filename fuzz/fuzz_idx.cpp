// libFuzzer target for the IDX parser (data/idx.cpp): any bytes must either parse or raise
// ember::Error, never crash, hang, read out of bounds or allocate what the input cannot justify
// (Note [validate before allocating]). Seeds: tests/corpus/idx (make_corpus.py); built by fuzz/CMakeLists.txt.
//
//   cmake -S . -B build-fuzz -G Ninja -DEMBER_FUZZ=ON -DEMBER_CUDA=OFF -DCMAKE_CXX_COMPILER=clang++-14
//   ninja -C build-fuzz fuzz_idx && ctest --test-dir build-fuzz -L fuzz   (fuzz/CMakeLists.txt)
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ember::data::IdxArray a = ember::data::parse_idx({data, size}, "fuzz");
    // The payload size must be exactly what the dims declare.
    if (a.data.size() != static_cast<size_t>(a.numel()) * ember::data::idx_type_size(a.type)) __builtin_trap();
    if (a.dims.size() <= 8 && a.numel() <= (1 << 20)) (void)a.to_tensor();
  } catch (const ember::Error&) {
    // rejected with a message: fine
  }
  return 0;
}
