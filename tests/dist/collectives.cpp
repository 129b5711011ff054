// Collective scenarios: every collective against an answer computed here, for every dtype and
// sizes 0, 1, odd and larger than a DDP bucket; and the fault scenarios (a rank that exits early,
// one that hangs).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/dtype.h"
#include "dist/process_group.h"
#include "kernels/functional.h"
#include "tests/dist/scenarios.h"

namespace ember::testing::dist {

namespace {

using namespace ember::dist;

// Small integers, so that sums over ranks are exact in every dtype (bf16 included).
double value(int rank, int64_t i) { return static_cast<double>((rank * 3 + i * 7) % 9); }

template <class T>
void fill(Tensor& t, int rank) {
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(value(rank, i));
}

template <class T>
void check_reduced(const Tensor& t, ReduceOp op, int n, const std::string& what, int64_t offset = 0) {
  using A = acc_t<T>;
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    A acc = static_cast<A>(static_cast<T>(value(0, i + offset)));
    for (int r = 1; r < n; ++r) {
      A v = static_cast<A>(static_cast<T>(value(r, i + offset)));
      if (op == ReduceOp::kMax) acc = v > acc ? v : acc;
      else if (op == ReduceOp::kMin) acc = v < acc ? v : acc;
      else acc = static_cast<A>(static_cast<T>(acc + v));
    }
    if (op == ReduceOp::kAvg && n > 1) acc = static_cast<A>(static_cast<T>(acc / static_cast<A>(n)));
    T want = static_cast<T>(acc);
    if (!(static_cast<double>(p[i]) == static_cast<double>(want)))
      throw std::runtime_error(what + ": element " + std::to_string(i) + " is " +
                               std::to_string(static_cast<double>(p[i])) + ", expected " +
                               std::to_string(static_cast<double>(want)));
  }
}

int collectives(const std::vector<std::string>& args) {
  bool big = !args.empty() && args[0] == "big";
  auto pg = init_process_group();
  const int r = pg->rank(), n = pg->size();
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  std::vector<int64_t> sizes = {0, 1, 7, 1023};
  if (big) sizes = {(int64_t{25} << 20) / 4 + 13};  // > one 25 MB bucket of f32
  int checked = 0;
  for (DType dt : dtypes) {
    if (big && dt != DType::f32) continue;
    for (int64_t size : sizes) {
      const std::string tag = std::string(dtype_name(dt)) + "[" + std::to_string(size) + "]";
      EMBER_DISPATCH_NUMERIC(dt, "collectives", [&] {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
          Tensor t = empty({size}, TensorOptions().dtype(dt));
          fill<scalar_t>(t, r);
          pg->all_reduce(t, op)->wait();
          check_reduced<scalar_t>(t, op, n, "all_reduce " + std::string(to_string(op)) + " " + tag);
          ++checked;
        }
        // broadcast from the last rank
        Tensor b = empty({size}, TensorOptions().dtype(dt));
        fill<scalar_t>(b, r);
        pg->broadcast(b, n - 1)->wait();
        for (int64_t i = 0; i < size; ++i)
          expect(
              static_cast<double>(b.data<scalar_t>()[i]) == static_cast<double>(static_cast<scalar_t>(value(n - 1, i))),
              "broadcast " + tag + " element " + std::to_string(i));
        // all_gather: rank order
        Tensor in = empty({size}, TensorOptions().dtype(dt));
        fill<scalar_t>(in, r);
        Tensor out = empty({size * n}, TensorOptions().dtype(dt));
        pg->all_gather(out, in)->wait();
        for (int k = 0; k < n; ++k)
          for (int64_t i = 0; i < size; ++i)
            expect(static_cast<double>(out.data<scalar_t>()[k * size + i]) ==
                       static_cast<double>(static_cast<scalar_t>(value(k, i))),
                   "all_gather " + tag + " rank " + std::to_string(k) + " element " + std::to_string(i));
        // reduce_scatter: this rank's slice of the sum
        Tensor full_in = empty({size * n}, TensorOptions().dtype(dt));
        fill<scalar_t>(full_in, r);
        Tensor slice = empty({size}, TensorOptions().dtype(dt));
        pg->reduce_scatter(slice, full_in, ReduceOp::kSum)->wait();
        check_reduced<scalar_t>(slice, ReduceOp::kSum, n, "reduce_scatter " + tag, r * size);
        checked += 3;
      });
    }
  }
  // Many collectives in flight at once complete in order.
  std::vector<Tensor> ts;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 16; ++k) {
    ts.push_back(full({5}, static_cast<double>(r + k), TensorOptions().dtype(DType::f64)));
    works.push_back(pg->all_reduce(ts.back(), ReduceOp::kSum));
  }
  for (int k = 0; k < 16; ++k) {
    works[k]->wait();
    double want = 0;
    for (int q = 0; q < n; ++q) want += q + k;
    expect(ts[k].data<double>()[0] == want, "in-flight all_reduce " + std::to_string(k));
    expect(works[k]->is_completed(), "is_completed after wait");
  }
  pg->barrier()->wait();
  // Bad arguments are errors that name the problem, and leave the group usable.
  Tensor wrong = empty({3}, TensorOptions().dtype(DType::f32));
  Tensor small = empty({2}, TensorOptions().dtype(DType::f32));
  bool threw = false;
  try {
    pg->all_gather(small, wrong);
  } catch (const std::invalid_argument& e) {
    threw = std::string(e.what()).find("all_gather") != std::string::npos;
  }
  expect(threw, "all_gather with a wrong output size throws naming all_gather");
  Tensor t = full({3}, 1.0);
  pg->all_reduce(t)->wait();
  expect(t.data<float>()[0] == static_cast<float>(n), "the group works after a rejected call");
  std::printf("ok: %d collectives checked on rank %d of %d\n", checked, r, n);
  return 0;
}

// Rank `args[0]` exits with code `args[1]` (default 3; 0 too: leaving early is the fault, not the
// code) after the first all_reduce; the others go on to a second one, which must fail (not hang)
// naming all_reduce #2.
int exit_early(const std::vector<std::string>& args) {
  int quitter = args.empty() ? 1 : std::atoi(args[0].c_str());
  auto pg = init_process_group();
  Tensor t = full({16}, 1.0);
  pg->all_reduce(t)->wait();
  if (pg->rank() == quitter) {
    std::printf("rank %d: exiting early on purpose\n", pg->rank());
    std::fflush(stdout);
    std::_Exit(args.size() > 1 ? std::atoi(args[1].c_str()) : 3);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  try {
    pg->all_reduce(t)->wait();  // throws
  } catch (const DistError& e) {
    // the group is failed: every later call throws the first error
    std::string first = e.what();
    bool same = false;
    try {
      pg->all_reduce(t)->wait();
    } catch (const DistError& again) {
      same = first == again.what();
    }
    std::printf("a later call on the failed group %s the first error\n", same ? "repeats" : "does NOT repeat");
    throw;
  }
  std::printf("unexpected: the second all_reduce completed\n");
  return 0;
}

// Rank `args[0]` stops calling collectives (sleeps); the others must time out.
int hang(const std::vector<std::string>& args) {
  int sleeper = args.empty() ? 1 : std::atoi(args[0].c_str());
  auto pg = init_process_group();
  Tensor t = full({16}, 1.0);
  pg->all_reduce(t)->wait();
  if (pg->rank() == sleeper) {
    // long enough for the others' timeout (the test sets 3 s), short enough to keep the test quick
    std::this_thread::sleep_for(std::chrono::seconds(args.size() > 1 ? std::atoi(args[1].c_str()) : 60));
    return 0;
  }
  pg->all_reduce(t)->wait();  // throws after the timeout
  std::printf("unexpected: the second all_reduce completed\n");
  return 0;
}

// The ranks all_reduce tensors of different sizes (rank r: 16 + 8r elements), as two ranks running
// different models would: every rank must get an error naming the collective, never an abort.
int mismatch(const std::vector<std::string>& args) {
  auto pg = init_process_group();
  const std::string op = args.empty() ? "all_reduce" : args[0];
  Tensor t = full({16 + 8 * static_cast<int64_t>(pg->rank())}, 1.0);
  if (op == "all_reduce") pg->all_reduce(t)->wait();
  else if (op == "broadcast") pg->broadcast(t, 0)->wait();
  else throw std::invalid_argument("mismatch: unknown collective " + op);
  std::printf("unexpected: the mismatched %s completed\n", op.c_str());
  return 0;
}

// Just the rendezvous (for the launch-fault tests), then one all_reduce.
int join(const std::vector<std::string>&) {
  auto pg = init_process_group();
  Tensor t = full({4}, 1.0);
  pg->all_reduce(t)->wait();
  std::printf("ok: joined as rank %d of %d\n", pg->rank(), pg->size());
  return 0;
}

}  // namespace

void add_collective_scenarios(Scenarios& s) {
  s["collectives"] = collectives;
  s["exit_early"] = exit_early;
  s["hang"] = hang;
  s["join"] = join;
  s["mismatch"] = mismatch;
}

}  // namespace ember::testing::dist
