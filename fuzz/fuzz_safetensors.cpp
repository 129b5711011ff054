// libFuzzer target for the safetensors parser: any input must either load or throw ember::Error.
// Anything else (a crash, an ASan report, another exception type, a leak) is a bug.
//
//   cmake -S . -B build-fuzz -G Ninja -DEMBER_FUZZ=ON -DEMBER_CUDA=OFF -DCMAKE_CXX_COMPILER=clang++-14
//   ninja -C build-fuzz fuzz_safetensors
//   build-fuzz/bin/fuzz_safetensors -max_total_time=300 fuzz-corpus/ tests/corpus/safetensors/
//
// (Debian: clang-14 and libclang-rt-14-dev provide -fsanitize=fuzzer.) The tensors a valid input
// declares are bounded by the input size (validation checks the offsets against it before
// allocating), so the target needs no allocation limit of its own.
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ember::io::SafetensorsFile f = ember::io::from_safetensors_bytes(std::span<const uint8_t>(data, size));
    // Touch every tensor so a wrong size would show up under ASan.
    for (const auto& [name, t] : f.tensors) {
      const auto* p = static_cast<const volatile uint8_t*>(t.data_ptr());
      for (size_t i = 0; i < t.nbytes(); i += 64) (void)p[i];
    }
  } catch (const ember::Error&) {
  }
  return 0;
}
