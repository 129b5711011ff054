// Catch2's runner for the GPU suite: without a CUDA device it says so and exits 77, which ctest
// reports as "Skipped" (SKIP_RETURN_CODE), never as a pass.
//
// Kernel coverage: with EMBER_GPU_COVERAGE_DIR set (ctest sets it), each run writes which CUDA
// kernel variants ran, per dtype, into that folder; `ember_gpu_tests --variant-coverage DIR` (the
// last GPU ctest entry) merges the files, prints one line per variant and fails when a kernel
// variant never ran in one of f32, f16 and bf16 that it is registered for and its op's samples use.
// That includes the vendor variants (cuBLAS, cuBLASLt, cuDNN): the simulator build runs them on its
// emulation of the libraries (Note [simulated vendor libraries] in sim/libs/common.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "bench/lab/lab.h"
#include "core/cuda/runtime.h"
#include "kernels/openmp.h"
#include "kernels/registry.h"
#include "tests/catch_session.h"
#include "tests/op_samples/op_samples.h"
#include "tests/suite_env.h"

namespace {

constexpr ember::DType kChecked[] = {ember::DType::f32, ember::DType::f16, ember::DType::bf16};

void write_coverage(const char* dir, int argc, char** argv) {
  std::string name;
  for (int i = 1; i < argc; ++i) name += std::string(i > 1 ? " " : "") + argv[i];
  std::ofstream f(std::string(dir) + "/" + std::to_string(getpid()) + ".txt");
  f << "# " << name << "\n";
  for (const ember::OpInfo& info : ember::all_ops())
    for (const ember::Variant& v : info.variants) {
      if (v.device != ember::DeviceType::cuda) continue;
      for (int d = 0; d < ember::kNumDTypes; ++d)
        if (uint64_t n = ember::variant_runs(v, static_cast<ember::DType>(d)))
          f << info.name << ' ' << v.name << ' ' << static_cast<ember::DType>(d) << ' ' << n << "\n";
    }
}

int check_coverage(const std::string& dir) {
  std::map<std::string, uint64_t> runs;  // "op variant dtype" -> runs
  std::set<std::string> test_runs;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(e.path());
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("# ", 0) == 0) {
        test_runs.insert(line.substr(2));
        continue;
      }
      std::istringstream in(line);
      std::string op, var, dt;
      uint64_t n = 0;
      in >> op >> var >> dt >> n;
      runs[op + " " + var + " " + dt] += n;
    }
  }
  // A partial run (ctest -R, one test by hand) cannot cover everything: report, do not judge.
  const size_t cases = ember::testing::visible_test_cases();
  const bool complete = test_runs.size() >= cases;
  std::printf("CUDA kernel variants run by the GPU suite (%zu test runs of %zu test cases):\n", test_runs.size(),
              cases);
  int missing = 0, vendor = 0;
  for (const ember::OpInfo& info : ember::all_ops())
    for (const ember::Variant& v : info.variants) {
      if (v.device != ember::DeviceType::cuda) continue;
      if (v.flags & ember::kVendor) ++vendor;
      // required: the dtypes the variant is registered for that the op's samples use
      ember::DTypeSet sampled;
      if (ember::SamplesFn samples = ember::op_samples(info.id))
        for (const ember::OpSample& s : samples())
          for (ember::DType dt : kChecked)
            if (s.dtypes.has(dt)) sampled = sampled | ember::DTypeSet{dt};
      std::string ran, not_ran;
      for (ember::DType dt : kChecked) {
        if (!v.dtypes.has(dt) || !sampled.has(dt)) continue;
        std::ostringstream key;
        key << info.name << ' ' << v.name << ' ' << dt;
        auto it = runs.find(key.str());
        std::ostringstream cell;
        cell << dt;
        if (it != runs.end() && it->second > 0)
          cell << " x" << it->second, ran += (ran.empty() ? "" : ", ") + cell.str();
        else not_ran += (not_ran.empty() ? "" : ", ") + cell.str();
      }
      // variants for other dtypes only (integers, f64): any run counts
      if (ran.empty() && not_ran.empty()) {
        uint64_t any = 0;
        for (int d = 0; d < ember::kNumDTypes; ++d) {
          std::ostringstream key;
          key << info.name << ' ' << v.name << ' ' << static_cast<ember::DType>(d);
          if (auto it = runs.find(key.str()); it != runs.end()) any += it->second;
        }
        if (any > 0) ran = "x" + std::to_string(any);
        else not_ran = "any dtype";
      }
      std::printf("  %-28s %-16s%s ran: %s%s%s\n", info.name, v.name.c_str(),
                  (v.flags & ember::kVendor) ? " (vendor)" : "", ran.empty() ? "-" : ran.c_str(),
                  not_ran.empty() ? "" : "   NOT RUN: ", not_ran.c_str());
      if (!not_ran.empty()) ++missing;
    }
  std::printf("%d of them vendor variants (cuBLAS, cuBLASLt, cuDNN)\n", vendor);
  if (!complete) {
    std::printf("partial run of the GPU suite: coverage reported, not checked\n");
    return 0;
  }
  if (missing > 0) {
    std::printf("FAILED: %d kernel variant(s) never ran in a dtype they are registered for\n", missing);
    return 1;
  }
  std::printf("every kernel variant, vendor variants included, ran in every dtype it is registered for\n");
  return 0;
}

// Listing the test cases needs no device: the GPU runner's dry run checks its name filters on a
// machine without one (scripts/gpu_run.sh).
bool only_lists(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--list-test-names-only" || a == "--list-tests" || a == "-l" || a == "--list-tags" || a == "-t" ||
        a == "--help" || a == "-h" || a == "-?")
      return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  ember::restart_with_passive_openmp(argv);  // as tests/main_cpu.cpp
  ember::testing::set_suite_environment();   // as tests/main_cpu.cpp
  ember::register_lab_variants();            // the CUDA oracles (Note [lab variants])
  if (only_lists(argc, argv)) return ember::testing::run_catch(argc, argv);
  if (ember::cuda::device_count() == 0) {
    std::printf("SKIPPED: the GPU tests need a CUDA device (%s)\n", ember::cuda::unavailable_reason().c_str());
    return 77;
  }
  if (argc == 3 && std::string(argv[1]) == "--variant-coverage") return check_coverage(argv[2]);
  auto p = ember::cuda::properties(0);
  // on stderr: ctest's test discovery reads the test list from stdout
  std::fprintf(stderr, "GPU tests on %s (sm_%d%d, %d SMs)\n", p.name.c_str(), p.major, p.minor, p.sm_count);
  const int rc = ember::testing::run_catch(argc, argv);
  if (const char* dir = std::getenv("EMBER_GPU_COVERAGE_DIR"); dir != nullptr && *dir != '\0')
    write_coverage(dir, argc, argv);
  return rc;
}
