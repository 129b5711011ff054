#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/env.h"
#include "core/error.h"

namespace ember {

namespace {

constexpr int64_t kMaxThreadsFromEnv = 4096;  // more than any machine ember runs on has cores

thread_local bool t_in_parallel = false;

struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t begin = 0, end = 0, chunk = 1, nchunks = 0;
  std::atomic<int64_t> next{0};
  std::mutex err_mu;
  std::exception_ptr err;

  void work() {
    for (;;) {
      int64_t c = next.fetch_add(1);
      if (c >= nchunks) return;
      int64_t b = begin + c * chunk, e = std::min(end, b + chunk);
      try {
        (*fn)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!err) err = std::current_exception();
        next.store(nchunks);  // stop handing out chunks
      }
    }
  }
};

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop_all(); }

  int size() const { return static_cast<int>(threads_.size()) + 1; }

  void resize(int n) {
    stop_all();
    stop_ = false;
    for (int i = 0; i + 1 < n; ++i) threads_.emplace_back([this] { loop(); });
  }

  // Returns false when another thread owns the pool (the caller then runs inline).
  bool run(Job& job) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      ++generation_;
    }
    cv_.notify_all();
    t_in_parallel = true;
    job.work();
    t_in_parallel = false;
    std::unique_lock<std::mutex> lock(mu_);
    job_ = nullptr;  // no new worker joins after this
    done_cv_.wait(lock, [&] { return active_ == 0; });
    return true;
  }

 private:
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ != nullptr); });
        if (stop_) return;
        seen = generation_;
        job = job_;
        ++active_;
      }
      t_in_parallel = true;
      job->work();
      t_in_parallel = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        --active_;
      }
      done_cv_.notify_all();
    }
  }

  void stop_all() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  std::vector<std::thread> threads_;
  std::mutex busy_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

// EMBER_NUM_THREADS, checked (Note [environment numbers] in core/env.h): "0" or "8x" is an error,
// not a silent fall-back to every core.
int default_threads() {
  if (auto n = env::integer("EMBER_NUM_THREADS", 1, kMaxThreadsFromEnv)) return static_cast<int>(*n);
  return std::max(1u, std::thread::hardware_concurrency());
}

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  EMBER_CHECK(n >= 1, "set_num_threads: need at least one thread, got ", n);
  EMBER_CHECK(!t_in_parallel, "set_num_threads inside a parallel region");
  pool().resize(n);
}

bool in_parallel_region() { return t_in_parallel; }

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t n = end - begin;
  int threads = t_in_parallel ? 1 : num_threads();
  if (threads == 1 || n < 2 * grain) {
    fn(begin, end);
    return;
  }
  Job job;
  job.fn = &fn;
  job.begin = begin;
  job.end = end;
  int64_t chunks = std::min<int64_t>(n / grain, int64_t{threads} * 4);
  job.chunk = (n + chunks - 1) / chunks;
  job.nchunks = (n + job.chunk - 1) / job.chunk;
  if (!pool().run(job)) {
    fn(begin, end);
    return;
  }
  if (job.err) std::rethrow_exception(job.err);
}

}  // namespace ember
