#include "core/storage.h"

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace ember {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    EMBER_CHECK(p != nullptr, "out of host memory: could not allocate ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* p) override { std::free(p); }
  Device device() const override { return kCPU; }
};

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator a;
  return &a;
}

Allocator* allocator_for(Device d, bool pinned) {
  if (d.is_cuda()) return cuda_allocator(d.index);
  return pinned ? pinned_allocator() : cpu_allocator();
}

Storage::Storage(size_t nbytes, Allocator* alloc)
    : data_(alloc->allocate(nbytes)), nbytes_(nbytes), device_(alloc->device()), alloc_(alloc) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (alloc_ != nullptr) {
    if (data_ != nullptr) alloc_->deallocate(data_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace ember
