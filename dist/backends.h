// The backends behind init_process_group (internal to dist/).
#pragma once

#include <chrono>
#include <atomic>
#include <memory>
#include <string>

#include "dist/process_group.h"
#include "dist/store.h"

namespace ember::dist {

// Gloo over TCP for CPU tensors (dist/gloo_backend.cpp). `store` is this group's namespace.
ProcessGroupPtr make_gloo_group(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout);

// NCCL for CUDA tensors on `device` (dist/nccl_backend.cpp). Throws DistError in builds without
// NCCL (CPU-only and the simulator build), naming why.
ProcessGroupPtr make_nccl_group(std::shared_ptr<Store> store, int rank, int size, int device,
                                std::chrono::milliseconds timeout);
bool nccl_available();

// Progress bookkeeping shared by the backends (Note [dist faults] in process_group.cpp): each rank
// publishes the sequence number of the last collective it completed under "progress/<rank>"
// (at most every `period`, from the group's watchdog), and a failing collective's message quotes
// every rank's value.
class ProgressBoard {
 public:
  ProgressBoard(std::shared_ptr<Store> store, int rank, int size);
  // Called by the backend when collective `seq` completed on this rank.
  void completed(uint64_t seq);
  uint64_t last_completed() const;
  // Publishes this rank's progress if it changed (cheap; called by the watchdog).
  void publish();
  // "rank 0: #12, rank 1: #11, rank 2: unknown (no answer)": reads the store with a short timeout.
  std::string describe_all();

 private:
  std::shared_ptr<Store> store_;
  int rank_, size_;
  std::atomic<uint64_t> last_{0};
  uint64_t published_ = ~uint64_t{0};
};

// The message every backend throws for a failed collective: "<backend> all_reduce #7 (f32 [1024],
// sum) on rank 1 of 2 failed: <why>. Last collective completed on each rank: ...".
std::string collective_failure(const std::string& backend, const char* what, uint64_t seq, const std::string& tensors,
                               int rank, int size, const std::string& why, ProgressBoard* board);

}  // namespace ember::dist
