// bench_cpu_gemm: GFLOP/s of matmul's CPU variants (the reference loop and the blocked GEMM, for
// every micro-kernel ISA the CPU supports) on a few shapes, after checking each result against the
// reference.
//
//   bench_cpu_gemm [--threads N] [--dtype f32|f64|f16|bf16] [--shapes MxKxN,...] [--no-ref] [--cputime]
//
// --cputime divides by the process's CPU time instead of the wall time: GFLOP/s per busy core,
// steadier on a shared machine (use it with --threads 1).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ember.h"
#include "kernels/gemm/cpu_gemm.h"
#include "kernels/registry.h"

using namespace ember;

namespace {

bool g_cputime = false;  // --cputime: CPU time of the process (per core rate; for a busy shared machine)

struct Shape3 {
  int64_t m, k, n;
};

std::vector<Shape3> parse_shapes(const std::string& s) {
  std::vector<Shape3> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    std::string one = s.substr(pos, end - pos);
    Shape3 sh{};
    if (std::sscanf(one.c_str(), "%ldx%ldx%ld", &sh.m, &sh.k, &sh.n) != 3) {
      std::fprintf(stderr, "bad shape '%s' (expected MxKxN)\n", one.c_str());
      std::exit(2);
    }
    out.push_back(sh);
    pos = end + 1;
  }
  return out;
}

double seconds_per_call(const Variant& v, const Tensor& a, const Tensor& b, double flops) {
  // at least 3 runs and ~0.5 s; the best time (the machine is shared)
  double best = 1e30, total = 0;
  for (int it = 0; it < 50 && (it < 3 || total < 0.5); ++it) {
    double dt;
    if (g_cputime) {
      timespec t0{}, t1{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
      call_variant(v, OpId::matmul, {a, b});
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
      dt = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    } else {
      auto t0 = std::chrono::steady_clock::now();
      call_variant(v, OpId::matmul, {a, b});
      dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    best = std::min(best, dt);
    total += dt;
    if (flops / dt < 1e8 && total > 2) break;  // slow reference: a couple of runs are enough
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype_s = "f32", shapes_s = "64x784x128,128x784x128,512x784x128,512x128x10,512x512x512,1024x1024x1024";
  bool ref = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) set_num_threads(std::atoi(argv[++i]));
    else if (a == "--dtype" && i + 1 < argc) dtype_s = argv[++i];
    else if (a == "--shapes" && i + 1 < argc) shapes_s = argv[++i];
    else if (a == "--no-ref") ref = false;
    else if (a == "--cputime") g_cputime = true;
    else {
      std::fprintf(stderr,
                   "usage: bench_cpu_gemm [--threads N] [--dtype f32|f64|f16|bf16] [--shapes MxKxN,...] [--no-ref] "
                   "[--cputime]\n");
      return 2;
    }
  }
  DType dt = dtype_s == "f64"    ? DType::f64
             : dtype_s == "f16"  ? DType::f16
             : dtype_s == "bf16" ? DType::bf16
                                 : DType::f32;
  const OpInfo& info = op_info(OpId::matmul);
  const Variant* refv = nullptr;
  const Variant* blocked = nullptr;
  for (const Variant& v : info.variants) {
    if (v.device != DeviceType::cpu) continue;
    if (v.name == "cpu") refv = &v;
    if (v.name == "cpu_blocked") blocked = &v;
  }
  if (refv == nullptr || blocked == nullptr) {
    std::fprintf(stderr, "matmul lacks the cpu / cpu_blocked variants\n");
    return 1;
  }
  std::string isas = gemm::supported_cpu_isas();
  std::printf("threads %d, dtype %s, micro-kernel ISAs: %s (default %s)\n", num_threads(), dtype_s.c_str(),
              isas.c_str(), gemm::default_cpu_isa().c_str());
  std::printf("%-18s %12s", "M x K x N", ref ? "reference" : "");
  std::vector<std::string> isa_list;
  for (size_t p = 0; p < isas.size();) {
    size_t e = isas.find(", ", p);
    if (e == std::string::npos) e = isas.size();
    isa_list.push_back(isas.substr(p, e - p));
    p = e + 2;
  }
  for (const auto& i : isa_list) std::printf(" %12s", i.c_str());
  std::printf("   (GFLOP/s)\n");
  for (Shape3 s : parse_shapes(shapes_s)) {
    Tensor a = uniform({s.m, s.k}, -1, 1).to(dt), b = uniform({s.k, s.n}, -1, 1).to(dt);
    double flops = 2.0 * s.m * s.k * s.n;
    Tensor want = call_variant(*refv, OpId::matmul, {a, b})[0].to(DType::f64);
    char name[64];
    std::snprintf(name, sizeof name, "%ldx%ldx%ld", s.m, s.k, s.n);
    std::printf("%-18s", name);
    if (ref) std::printf(" %12.2f", flops / seconds_per_call(*refv, a, b, flops) / 1e9);
    else std::printf(" %12s", "");
    for (const auto& i : isa_list) {
      gemm::set_cpu_isa(i);
      Tensor got = call_variant(*blocked, OpId::matmul, {a, b})[0].to(DType::f64);
      double worst = max(abs(sub(got, want))).item();
      double scale = max(abs(want)).item();
      // both round a sum of the same products once; only the order differs (one output ulp at most
      // for f16/bf16)
      const double rel = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : dt == DType::f16 ? 2e-3 : 1.6e-2;
      if (!(worst <= rel * std::max(1.0, scale))) {
        std::printf("  MISMATCH (%s: max error %g)\n", i.c_str(), worst);
        return 1;
      }
      std::printf(" %12.2f", flops / seconds_per_call(*blocked, a, b, flops) / 1e9);
    }
    gemm::set_cpu_isa("");
    std::printf("\n");
  }
  return 0;
}
