// bench_allreduce: collective bandwidth of ember's process groups, reported the way nccl-tests
// reports it. Start every rank of a job with the launcher:
//
//   ember_run --nproc-per-node 2 -- build/bin/bench_allreduce [--backend gloo|nccl]
//       [--op all_reduce|all_gather|broadcast|reduce_scatter] [--min-bytes 8] [--max-bytes 256M]
//       [--step-factor 2] [--iters 20] [--warmup 5] [--dtype f32] [--json FILE] [--fit]
//
// For every message size from --min-bytes to --max-bytes (x --step-factor each step) every rank:
//   1. checks the collective once: each rank fills its buffer with a known pattern, runs the
//      collective, and counts the elements that differ from the exact answer (the #wrong column,
//      summed over ranks; 0 is the only acceptable value);
//   2. waits at a barrier, runs --warmup untimed iterations, then --iters timed ones, each timed
//      around issue + wait (gloo: steady_clock on the host, wait() blocks until the result is in
//      memory; nccl: CUDA events on the current stream, since wait() only makes the stream wait);
//   3. takes, per iteration, the slowest rank's time (a collective is done when its last rank
//      is), and reports the median and the minimum over the iterations.
// Only rank 0 prints. The columns follow nccl-tests (doc/PERFORMANCE.md there):
//   size   bytes of the largest buffer: the all_reduce/broadcast buffer, the all_gather output,
//          the reduce_scatter input (the per-rank piece is size / n);
//   count  elements of that buffer;
//   algbw  size / time (GB/s, 1e9 B/s), from the median time;
//   busbw  algbw x the factor that makes it comparable to the link bandwidth a ring algorithm
//          needs: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast 1.
// The last lines give the peak busbw and the size where it is reached, the average busbw over
// the sizes (nccl-tests' "Avg bus bandwidth"), and for all_reduce a fit of the ring cost model
// T(S) = 2(n-1) alpha + 2(n-1)/n S / B to the median times (weighted by 1/T, so that small and
// large messages count alike); --fit prints the per-size comparison (docs/dist.md, "Cost model").
//
// The nccl path is compiled in every build (ember's CUDA runtime layer needs no CUDA header); in a
// build without CUDA or without NCCL, or on a machine without a GPU per local rank, --backend nccl
// fails at start with the reason. The default backend is nccl when this build has NCCL and a GPU
// is visible, else gloo; the default --max-bytes is 256M for gloo and 1G for nccl.
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/tensor.h"
#include "dist/backends.h"
#include "dist/process_group.h"

using namespace ember;

namespace {

using Clock = std::chrono::steady_clock;

enum class Op { all_reduce, all_gather, broadcast, reduce_scatter };

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce: return "all_reduce";
    case Op::all_gather: return "all_gather";
    case Op::broadcast: return "broadcast";
    case Op::reduce_scatter: return "reduce_scatter";
  }
  return "?";
}

// nccl-tests' bus-bandwidth factors (the bytes a ring moves over each link, relative to size).
double bus_factor(Op op, int n) {
  if (n <= 1) return op == Op::broadcast ? 1.0 : 0.0;
  switch (op) {
    case Op::all_reduce: return 2.0 * (n - 1) / n;
    case Op::all_gather:
    case Op::reduce_scatter: return static_cast<double>(n - 1) / n;
    case Op::broadcast: return 1.0;
  }
  return 1.0;
}

struct Args {
  std::string backend;  // "" = nccl when available with a GPU, else gloo
  Op op = Op::all_reduce;
  int64_t min_bytes = 8;
  int64_t max_bytes = -1;  // -1 = by backend
  int64_t step_factor = 2;
  int iters = 20;
  int warmup = 5;
  DType dtype = DType::f32;
  std::string json;
  bool fit = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "bench_allreduce: error: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

// "8", "64K", "256M", "1G" (also "1GB", "1GiB"): powers of 1024, as nccl-tests reads them.
int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(v > 0)) usage_error("'" + s + "' is not a positive size (e.g. 8, 64K, 256M, 1G)");
  std::string suffix(end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 1;
  if (!suffix.empty() && suffix != "B") {
    const std::string rest = suffix.substr(1);
    if (rest.empty() || rest == "B" || rest == "IB") {
      if (suffix[0] == 'K') mul = 1024.0;
      else if (suffix[0] == 'M') mul = 1024.0 * 1024;
      else if (suffix[0] == 'G') mul = 1024.0 * 1024 * 1024;
      else mul = 0;
    } else {
      mul = 0;
    }
    if (mul == 0) usage_error("'" + s + "': unknown size suffix (K, M or G)");
  }
  return static_cast<int64_t>(v * mul);
}

int parse_int(const std::string& flag, const std::string& s, int lo) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || v < lo || v > 1000000)
    usage_error(flag + " expects an integer >= " + std::to_string(lo) + ", got '" + s + "'");
  return static_cast<int>(v);
}

const char* const kHelp = R"(bench_allreduce: bandwidth of ember's collectives, like nccl-tests (run under ember_run)

usage: ember_run --nproc-per-node N -- bench_allreduce [options]

  --backend gloo|nccl   process-group backend (default: nccl with NCCL and a GPU, else gloo)
  --op OP               all_reduce (default), all_gather, broadcast or reduce_scatter
  --min-bytes S         smallest message (default 8)
  --max-bytes S         largest message (default 256M for gloo, 1G for nccl); K/M/G = 2^10/2^20/2^30
  --step-factor F       size multiplier between steps (default 2)
  --iters N             timed iterations per size (default 20)
  --warmup N            untimed iterations per size (default 5)
  --dtype T             f32 (default), f64, f16, bf16, i32, i64, u8
  --json FILE           rank 0 also writes the table as JSON
  --fit                 all_reduce: print the cost-model fit per size
  -h, --help            this help

Only rank 0 prints. time = median (and min) over iterations of the slowest rank's issue+wait time;
algbw = size/time; busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter),
1 (broadcast). #wrong: elements that differ from the exact answer in a check run, all ranks.
)";

Args parse_args(int argc, char** argv) {
  Args a;
  std::vector<std::string> v(argv + 1, argv + argc);
  for (size_t i = 0; i < v.size(); ++i) {
    std::string flag = v[i], value;
    bool has_value = false;
    if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= v.size()) usage_error(flag + " needs a value");
      return v[++i];
    };
    if (flag == "-h" || flag == "--help") {
      std::printf("%s", kHelp);
      std::exit(0);
    } else if (flag == "--backend") {
      a.backend = next();
      if (a.backend != "gloo" && a.backend != "nccl")
        usage_error("--backend expects gloo or nccl, got '" + a.backend + "'");
    } else if (flag == "--op") {
      std::string o = next();
      if (o == "all_reduce" || o == "allreduce") a.op = Op::all_reduce;
      else if (o == "all_gather" || o == "allgather") a.op = Op::all_gather;
      else if (o == "broadcast") a.op = Op::broadcast;
      else if (o == "reduce_scatter" || o == "reducescatter") a.op = Op::reduce_scatter;
      else usage_error("--op expects all_reduce, all_gather, broadcast or reduce_scatter, got '" + o + "'");
    } else if (flag == "--min-bytes" || flag == "-b") {
      a.min_bytes = parse_bytes(next());
    } else if (flag == "--max-bytes" || flag == "-e") {
      a.max_bytes = parse_bytes(next());
    } else if (flag == "--step-factor" || flag == "-f") {
      a.step_factor = parse_int(flag, next(), 2);
    } else if (flag == "--iters" || flag == "-n") {
      a.iters = parse_int(flag, next(), 1);
    } else if (flag == "--warmup" || flag == "-w") {
      a.warmup = parse_int(flag, next(), 0);
    } else if (flag == "--dtype") {
      std::string d = next();
      try {
        a.dtype = parse_dtype(d);
      } catch (const std::exception&) {
        usage_error("--dtype: unknown dtype '" + d + "'");
      }
      if (a.dtype == DType::boolean) usage_error("--dtype: bool has no sum");
    } else if (flag == "--json") {
      a.json = next();
    } else if (flag == "--fit") {
      a.fit = true;
    } else {
      usage_error("unknown argument '" + v[i] + "'");
    }
  }
  return a;
}

// The check pattern: rank r's element i. Small integers, so every dtype (u8 and bf16 included)
// holds every sum over up to 85 ranks exactly.
inline int pattern(int r, int64_t i) { return static_cast<int>((i + 3 * static_cast<int64_t>(r)) % 4); }

// A CPU tensor of `count` elements of `dt` holding rank r's pattern for elements offset.. .
Tensor pattern_tensor(DType dt, int64_t count, int r, int64_t offset = 0) {
  Tensor t = empty({count}, TensorOptions(dt));
  EMBER_DISPATCH_NUMERIC(dt, "bench_allreduce", [&] {
    auto* p = t.data<scalar_t>();
    for (int64_t i = 0; i < count; ++i) p[i] = static_cast<scalar_t>(static_cast<double>(pattern(r, offset + i)));
  });
  return t;
}

// Counts the elements of `got` (any device) that differ from expect(i).
template <class F>
int64_t count_wrong(const Tensor& got, F expect) {
  Tensor c = got.device().is_cuda() ? got.to(kCPU) : got;
  int64_t wrong = 0;
  EMBER_DISPATCH_NUMERIC(c.dtype(), "bench_allreduce", [&] {
    const auto* p = c.data<scalar_t>();
    for (int64_t i = 0; i < c.numel(); ++i)
      if (static_cast<double>(static_cast<acc_t<scalar_t>>(p[i])) != expect(i)) ++wrong;
  });
  return wrong;
}

struct Row {
  int64_t bytes = 0, count = 0;
  double median_us = 0, min_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
};

class Bench {
 public:
  Bench(const Args& a, dist::ProcessGroupPtr pg, Device dev) : a_(a), pg_(std::move(pg)), dev_(dev) {}

  Row run_size(int64_t bytes) {
    const int n = pg_->size(), r = pg_->rank();
    const int64_t es = static_cast<int64_t>(dtype_size(a_.dtype));
    int64_t count = bytes / es;
    const bool split = a_.op == Op::all_gather || a_.op == Op::reduce_scatter;
    if (split) count -= count % n;
    Row row;
    row.count = count;
    row.bytes = count * es;
    const int64_t piece = split ? count / n : count;

    // Buffers: `buf` is the all_reduce/broadcast buffer and the all_gather/reduce_scatter input,
    // `out` the all_gather/reduce_scatter output.
    const int64_t in_count = a_.op == Op::all_gather ? piece : count;
    Tensor buf = pattern_tensor(a_.dtype, in_count, r).to(dev_);
    Tensor out;
    if (a_.op == Op::all_gather) out = empty({count}, TensorOptions(a_.dtype).device(dev_));
    if (a_.op == Op::reduce_scatter) out = empty({piece}, TensorOptions(a_.dtype).device(dev_));

    // 1. the check
    issue(buf, out)->wait();
    sync();
    int64_t wrong = 0;
    switch (a_.op) {
      case Op::all_reduce: wrong = count_wrong(buf, [&](int64_t i) { return sum_over_ranks(i); }); break;
      case Op::broadcast:
        wrong = count_wrong(buf, [&](int64_t i) { return static_cast<double>(pattern(0, i)); });
        break;
      case Op::all_gather:
        wrong = count_wrong(
            out, [&](int64_t j) { return static_cast<double>(pattern(static_cast<int>(j / piece), j % piece)); });
        break;
      case Op::reduce_scatter:
        wrong = count_wrong(out, [&](int64_t k) { return sum_over_ranks(r * piece + k); });
        break;
    }

    // 2. timing: zeros (sums of zeros stay zeros: no overflow, no denormals), a barrier, warm-up
    buf.zero_();
    pg_->barrier()->wait();
    sync();
    for (int i = 0; i < a_.warmup; ++i) issue(buf, out)->wait();
    sync();
    std::vector<double> us(static_cast<size_t>(a_.iters));
    for (int i = 0; i < a_.iters; ++i) us[static_cast<size_t>(i)] = time_one(buf, out);

    // 3. the slowest rank per iteration; #wrong summed over ranks
    std::vector<double> merged = reduce_values(us, dist::ReduceOp::kMax);
    row.wrong = static_cast<int64_t>(reduce_values({static_cast<double>(wrong)}, dist::ReduceOp::kSum)[0]);
    std::vector<double> sorted = merged;
    std::sort(sorted.begin(), sorted.end());
    const size_t m = sorted.size();
    row.median_us = m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
    row.min_us = sorted.front();
    row.algbw = row.median_us > 0 ? static_cast<double>(row.bytes) / (row.median_us * 1e3) : 0;  // B/us / 1e3 = GB/s
    row.busbw = row.algbw * bus_factor(a_.op, n);
    return row;
  }

 private:
  double sum_over_ranks(int64_t i) const {
    double s = 0;
    for (int q = 0; q < pg_->size(); ++q) s += pattern(q, i);
    return s;
  }

  dist::WorkPtr issue(Tensor& buf, Tensor& out) {
    switch (a_.op) {
      case Op::all_reduce: return pg_->all_reduce(buf, dist::ReduceOp::kSum);
      case Op::broadcast: return pg_->broadcast(buf, 0);
      case Op::all_gather: return pg_->all_gather(out, buf);
      case Op::reduce_scatter: return pg_->reduce_scatter(out, buf, dist::ReduceOp::kSum);
    }
    throw std::logic_error("bench_allreduce: unknown op");
  }

  // Host waits for the device (nccl: wait() only orders the current stream).
  void sync() {
    if (dev_.is_cuda()) cuda::current_stream(dev_.index).synchronize();
  }

  // Microseconds for one issue + wait.
  double time_one(Tensor& buf, Tensor& out) {
    if (!dev_.is_cuda()) {
      const auto t0 = Clock::now();
      issue(buf, out)->wait();
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
    cuda::Stream s = cuda::current_stream(dev_.index);
    cuda::Event e0(true), e1(true);
    e0.record(s);
    issue(buf, out)->wait();
    e1.record(s);
    e1.synchronize();
    return 1e3 * static_cast<double>(e0.elapsed_ms(e1));
  }

  // Element-wise op over ranks of a few doubles (on the group's device: nccl needs CUDA tensors).
  std::vector<double> reduce_values(const std::vector<double>& v, dist::ReduceOp op) {
    Tensor t = empty({static_cast<int64_t>(v.size())}, TensorOptions(DType::f64));
    std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(double));
    Tensor d = t.to(dev_);
    pg_->all_reduce(d, op)->wait();
    sync();
    Tensor back = d.device().is_cuda() ? d.to(kCPU) : d;
    std::vector<double> res(v.size());
    std::memcpy(res.data(), back.data_ptr(), v.size() * sizeof(double));
    return res;
  }

  const Args& a_;
  dist::ProcessGroupPtr pg_;
  Device dev_;
};

std::string human_bytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30) && b % (int64_t{1} << 30) == 0)
    std::snprintf(buf, sizeof buf, "%lld GiB", static_cast<long long>(b >> 30));
  else if (b >= (1 << 20) && b % (1 << 20) == 0)
    std::snprintf(buf, sizeof buf, "%lld MiB", static_cast<long long>(b >> 20));
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%lld KiB", static_cast<long long>(b >> 10));
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

// Least squares for T = p + q S minimising sum ((p + q S - T) / T)^2: relative errors, so the
// latency-bound small sizes weigh as much as the bandwidth-bound large ones.
struct Fit {
  double p = 0, q = 0;  // us, us per byte
  bool ok = false;
};
Fit fit_linear_relative(const std::vector<Row>& rows, double Row::*time) {
  double s11 = 0, s12 = 0, s22 = 0, b1 = 0, b2 = 0;
  int used = 0;
  for (const Row& r : rows) {
    const double t = r.*time;
    if (!(t > 0)) continue;
    const double w1 = 1.0 / t, w2 = static_cast<double>(r.bytes) / t;
    s11 += w1 * w1;
    s12 += w1 * w2;
    s22 += w2 * w2;
    b1 += w1;
    b2 += w2;
    ++used;
  }
  Fit f;
  const double det = s11 * s22 - s12 * s12;
  if (used < 2 || !(std::fabs(det) > 0)) return f;
  f.p = (b1 * s22 - b2 * s12) / det;
  f.q = (s11 * b2 - s12 * b1) / det;
  f.ok = true;
  return f;
}

int run(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  const dist::LaunchEnv env = dist::launch_env();

  const bool gpu_ok = dist::nccl_available() && cuda::device_count() > env.local_rank;
  if (a.backend.empty()) a.backend = gpu_ok ? "nccl" : "gloo";
  Device dev = kCPU;
  if (a.backend == "nccl") {
    if (!cuda::compiled_with_cuda())
      throw std::runtime_error(
          "--backend nccl: this build has no CUDA (configured with EMBER_CUDA=OFF); use --backend gloo");
    if (!dist::nccl_available())
      throw std::runtime_error(
          "--backend nccl: this build has no NCCL (nccl.h and libnccl were not found when it was "
          "configured, or it is the simulator build); use --backend gloo");
    if (cuda::device_count() <= env.local_rank)
      throw std::runtime_error("--backend nccl: local rank " + std::to_string(env.local_rank) + " needs GPU " +
                               std::to_string(env.local_rank) + " but " +
                               (cuda::device_count() == 0
                                    ? cuda::unavailable_reason()
                                    : std::to_string(cuda::device_count()) + " GPU(s) are visible") +
                               " (one process per GPU: --nproc-per-node <= the GPU count)");
    dev = Device(DeviceType::cuda, env.local_rank);
    cuda::set_device(env.local_rank);
  }
  if (a.max_bytes < 0) a.max_bytes = a.backend == "nccl" ? (int64_t{1} << 30) : (int64_t{256} << 20);
  if (a.min_bytes > a.max_bytes) usage_error("--min-bytes is larger than --max-bytes");

  dist::Options o;
  o.backend = a.backend;
  o.device = dev;
  dist::ProcessGroupPtr pg = dist::init_process_group(o);
  const int n = pg->size(), rank = pg->rank();
  const bool print = rank == 0;
  const std::string dt_name(dtype_name(a.dtype));
  const char* dt = dt_name.c_str();

  if (print) {
    std::printf("# bench_allreduce: %s, backend %s, %d rank(s)%s, dtype %s, %s .. %s (x%lld), warmup %d, iters %d\n",
                op_name(a.op), pg->backend().c_str(), n, env.distributed ? "" : " (not under ember_run)", dt,
                human_bytes(a.min_bytes).c_str(), human_bytes(a.max_bytes).c_str(),
                static_cast<long long>(a.step_factor), a.warmup, a.iters);
    if (dev.is_cuda()) {
      cuda::DeviceProperties p = cuda::properties(dev.index);
      std::printf("# device: %s on every rank's cuda:LOCAL_RANK; times from CUDA events on the current stream\n",
                  p.name.c_str());
    } else {
      std::printf("# device: CPU tensors; times from the host clock around issue + wait\n");
    }
    if (a.op == Op::reduce_scatter && pg->backend() == "gloo")
      std::printf(
          "# note: gloo's reduce_scatter is an all_reduce of the whole input (dist/gloo_backend.cpp): "
          "its busbw is half of a real one\n");
    std::printf("# time: median and min over iterations of the slowest rank; GB/s = 1e9 B/s\n");
    std::printf("#\n");
    std::printf("# %12s %12s %6s %6s %12s %12s %9s %9s %7s\n", "size", "count", "type", "redop", "time", "min", "algbw",
                "busbw", "#wrong");
    std::printf("# %12s %12s %6s %6s %12s %12s %9s %9s %7s\n", "(B)", "(elements)", "", "", "(us)", "(us)", "(GB/s)",
                "(GB/s)", "");
    std::fflush(stdout);
  }

  Bench bench(a, pg, dev);
  std::vector<Row> rows;
  const int64_t es = static_cast<int64_t>(dtype_size(a.dtype));
  const bool split = a.op == Op::all_gather || a.op == Op::reduce_scatter;
  for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= a.step_factor) {
    if (bytes / es < (split ? n : 1)) continue;  // smaller than one element (per rank)
    Row row = bench.run_size(bytes);
    rows.push_back(row);
    if (print) {
      std::printf("  %12lld %12lld %6s %6s %12.1f %12.1f %9.3f %9.3f %7lld\n", static_cast<long long>(row.bytes),
                  static_cast<long long>(row.count), dt,
                  a.op == Op::all_reduce || a.op == Op::reduce_scatter ? "sum" : "-", row.median_us, row.min_us,
                  row.algbw, row.busbw, static_cast<long long>(row.wrong));
      std::fflush(stdout);
    }
    if (bytes > a.max_bytes / a.step_factor) break;  // no overflow past the last step
  }

  int64_t total_wrong = 0;
  const Row* peak = nullptr;
  double avg = 0;
  for (const Row& r : rows) {
    total_wrong += r.wrong;
    avg += r.busbw;
    if (peak == nullptr || r.busbw > peak->busbw) peak = &r;
  }
  if (!rows.empty()) avg /= static_cast<double>(rows.size());

  // The ring model fitted to the median times and to the minimum times (on a busy machine the
  // minimum is the closer estimate of what the transport itself costs).
  struct ModelFit {
    const char* on;
    double Row::*time;
    Fit fit;
    double alpha_us = 0, bw_gbs = 0, worst_rel = 0;
  };
  std::vector<ModelFit> fits;
  if (a.op == Op::all_reduce && n > 1) {
    for (ModelFit m : {ModelFit{"median", &Row::median_us, {}}, ModelFit{"min", &Row::min_us, {}}}) {
      m.fit = fit_linear_relative(rows, m.time);
      if (!m.fit.ok || !(m.fit.q > 0)) continue;
      m.alpha_us = m.fit.p / (2.0 * (n - 1));
      m.bw_gbs = bus_factor(a.op, n) / m.fit.q / 1e3;  // B per us / 1e3 = GB/s
      for (const Row& r : rows)
        m.worst_rel =
            std::max(m.worst_rel, std::fabs(m.fit.p + m.fit.q * static_cast<double>(r.bytes) - r.*m.time) / r.*m.time);
      fits.push_back(m);
    }
  }

  if (print) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong ? "WRONG" : "OK");
    if (peak != nullptr) {
      std::printf("# Avg bus bandwidth    : %.3f GB/s\n", avg);
      std::printf("# Peak bus bandwidth   : %.3f GB/s at %lld B (%s), %s %s, %d ranks, backend %s\n", peak->busbw,
                  static_cast<long long>(peak->bytes), human_bytes(peak->bytes).c_str(), op_name(a.op), dt, n,
                  pg->backend().c_str());
    }
    for (const ModelFit& m : fits)
      std::printf(
          "# Ring model fit (%-6s): T(S) = 2(n-1) alpha + 2(n-1)/n S/B, alpha = %.2f us, B = %.3f GB/s "
          "(T = %.1f us + S / %.3f GB/s; worst relative error %.0f%%)\n",
          m.on, m.alpha_us, m.bw_gbs, m.fit.p, 1.0 / m.fit.q / 1e3, 100.0 * m.worst_rel);
    if (a.fit && !fits.empty()) {
      std::printf("# %12s %12s %12s %8s %12s %12s %8s\n", "size (B)", "median us", "model us", "error", "min us",
                  "model us", "error");
      for (const Row& r : rows) {
        std::printf("  %12lld", static_cast<long long>(r.bytes));
        for (const ModelFit& m : fits) {
          const double model = m.fit.p + m.fit.q * static_cast<double>(r.bytes), t = r.*m.time;
          std::printf(" %12.1f %12.1f %+7.0f%%", t, model, 100.0 * (model - t) / t);
        }
        std::printf("\n");
      }
    }
    std::fflush(stdout);
    if (!a.json.empty()) {
      FILE* f = std::fopen(a.json.c_str(), "w");
      if (f == nullptr) throw std::runtime_error("cannot write " + a.json + ": " + std::strerror(errno));
      std::fprintf(f,
                   "{\"bench\": \"bench_allreduce\", \"op\": \"%s\", \"backend\": \"%s\", \"world_size\": %d, "
                   "\"dtype\": \"%s\", \"iters\": %d, \"warmup\": %d,\n \"rows\": [\n",
                   op_name(a.op), pg->backend().c_str(), n, dt, a.iters, a.warmup);
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::fprintf(f,
                     "  {\"bytes\": %lld, \"count\": %lld, \"time_us\": %.3f, \"min_us\": %.3f, \"algbw_gbs\": %.6f, "
                     "\"busbw_gbs\": %.6f, \"wrong\": %lld}%s\n",
                     static_cast<long long>(r.bytes), static_cast<long long>(r.count), r.median_us, r.min_us, r.algbw,
                     r.busbw, static_cast<long long>(r.wrong), i + 1 < rows.size() ? "," : "");
      }
      std::fprintf(f, " ],\n \"peak_busbw_gbs\": %.6f, \"peak_bytes\": %lld, \"avg_busbw_gbs\": %.6f, \"wrong\": %lld",
                   peak ? peak->busbw : 0.0, static_cast<long long>(peak ? peak->bytes : 0), avg,
                   static_cast<long long>(total_wrong));
      for (const ModelFit& m : fits)
        std::fprintf(f, ",\n \"fit_%s\": {\"alpha_us\": %.4f, \"bus_bandwidth_gbs\": %.6f, \"worst_rel_error\": %.4f}",
                     m.on, m.alpha_us, m.bw_gbs, m.worst_rel);
      std::fprintf(f, "}\n");
      std::fclose(f);
    }
  }
  pg.reset();
  dist::destroy_process_group();
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce (rank %d): error: %s\n", dist::launch_env().rank, e.what());
    return 1;
  }
}
