#include "data/samplers.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "data/rng.h"

namespace ember::data {

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  EMBER_CHECK(n >= 0, "random_permutation: n must be non-negative, got ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  Rng rng(mix_seed(seed, static_cast<uint64_t>(epoch), 0x5a4d'9e1eull), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(rng.randint(i + 1))]);
  return p;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  EMBER_CHECK(n >= 0, "SequentialSampler: the dataset size must be non-negative, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> p(static_cast<size_t>(n_));
  std::iota(p.begin(), p.end(), int64_t{0});
  return p;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  EMBER_CHECK(n >= 0, "RandomSampler: the dataset size must be non-negative, got ", n);
}

std::vector<int64_t> RandomSampler::indices() const { return random_permutation(n_, seed_, epoch_); }

DistributedSampler::DistributedSampler(int64_t n, DistributedSamplerOptions options) : n_(n), o_(options) {
  EMBER_CHECK(n >= 0, "DistributedSampler: the dataset size must be non-negative, got ", n);
  EMBER_CHECK(o_.world_size_ >= 1, "DistributedSampler: world_size must be at least 1, got ", o_.world_size_);
  EMBER_CHECK(o_.rank_ >= 0 && o_.rank_ < o_.world_size_, "DistributedSampler: rank ", o_.rank_,
              " is outside [0, world_size = ", o_.world_size_, ")");
  per_rank_ = o_.drop_last_ ? n_ / o_.world_size_ : (n_ + o_.world_size_ - 1) / o_.world_size_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (o_.shuffle_) {
    order = random_permutation(n_, o_.seed_, epoch_);
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = per_rank_ * o_.world_size_;
  if (total > n_) {
    // pad by repeating the order from its start (n may be smaller than the padding needed)
    const int64_t pad = total - n_;
    for (int64_t i = 0; i < pad; ++i) order.push_back(order[static_cast<size_t>(i % n_)]);
  } else {
    order.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = o_.rank_; i < total; i += o_.world_size_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace ember::data
