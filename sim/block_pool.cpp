// The host threads that run a grid's blocks (run_blocks in internal.h). A grid's blocks are
// independent, so they are handed out one at a time to every thread of the pool; the stream
// thread that runs the launch works on them too. EMBER_SIM_THREADS sets the number of threads
// (default: EMBER_NUM_THREADS, as for ember's CPU thread pool, else one per core). A grid that starts
// while another one holds the pool (a second stream) runs on its own stream thread alone, so two
// grids at once never use more threads than the pool has.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "sim/internal.h"

namespace ember::sim {

namespace {

// One grid being run: blocks are claimed through `next`; the first exception stops the handing out.
struct Grid {
  const std::function<void(int64_t)>* body;
  int64_t blocks;
  std::atomic<int64_t> next{0};
  std::mutex error_mu;
  std::exception_ptr error;

  void work() {
    for (int64_t i = next.fetch_add(1); i < blocks; i = next.fetch_add(1)) {
      try {
        (*body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next.store(blocks);
      }
    }
  }
};

class BlockPool {
 public:
  explicit BlockPool(int threads) {
    for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { serve(); });
  }

  bool run(int64_t blocks, const std::function<void(int64_t)>& body) {
    std::unique_lock<std::mutex> owner(owner_, std::try_to_lock);
    if (!owner.owns_lock()) return false;
    Grid grid{&body, blocks};
    {
      std::lock_guard<std::mutex> lock(mu_);
      grid_ = &grid;
      ++generation_;
    }
    wake_.notify_all();
    grid.work();
    {
      std::unique_lock<std::mutex> lock(mu_);
      grid_ = nullptr;  // a helper that has not joined yet stays out
      left_.wait(lock, [&] { return working_ == 0; });
    }
    if (grid.error) std::rethrow_exception(grid.error);
    return true;
  }

 private:
  void serve() {
    uint64_t seen = 0;
    for (;;) {
      Grid* grid;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_ != seen && grid_ != nullptr; });
        seen = generation_;
        grid = grid_;
        ++working_;
      }
      grid->work();
      {
        std::lock_guard<std::mutex> lock(mu_);
        --working_;
      }
      left_.notify_all();
    }
  }

  std::vector<std::thread> helpers_;
  std::mutex owner_;  // held by the stream thread whose grid has the pool
  std::mutex mu_;
  std::condition_variable wake_, left_;
  Grid* grid_ = nullptr;
  uint64_t generation_ = 0;
  int working_ = 0;
};

int pool_threads() {
  if (config().block_threads > 0) return config().block_threads;
  if (const char* n = std::getenv("EMBER_NUM_THREADS"); n != nullptr && std::atoi(n) >= 1) return std::atoi(n);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

void run_blocks(int64_t blocks, const std::function<void(int64_t)>& body) {
  // Never destroyed: streams may still drain at exit (drain_all), after static destructors ran.
  static BlockPool* pool = new BlockPool(pool_threads());
  if (blocks <= 0) return;
  if (blocks == 1 || !pool->run(blocks, body))
    for (int64_t i = 0; i < blocks; ++i) body(i);
}

}  // namespace ember::sim
