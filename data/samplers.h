// Samplers: the order in which a DataLoader visits a dataset's indices in one epoch.
//
//   SequentialSampler   0, 1, ..., n-1
//   RandomSampler       a permutation of [0, n) that is a function of (seed, epoch): reshuffled
//                       each epoch through set_epoch, identical for the same seed and epoch
//   DistributedSampler  rank r of w takes every w-th index of the epoch's order (the same
//                       permutation on every rank), so ranks see disjoint shards of equal length:
//                       without drop_last the order is padded by repeating its first indices up to
//                       a multiple of w (every index is seen at least once); with drop_last it is
//                       cut down to a multiple of w (PyTorch's DistributedSampler).
// The DataLoader calls set_epoch before every epoch (Note [loader determinism]).
#pragma once

#include <cstdint>
#include <vector>

#include "core/arg.h"

namespace ember::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices of the current epoch, in visiting order.
  virtual std::vector<int64_t> indices() const = 0;
  // How many indices indices() returns.
  virtual int64_t size() const = 0;
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

// A permutation of [0, n) drawn from (seed, epoch) by Fisher-Yates.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch);

class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

class RandomSampler final : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

struct DistributedSamplerOptions {
  EMBER_FIELD(int64_t, world_size) = 1;
  EMBER_FIELD(int64_t, rank) = 0;
  EMBER_FIELD(bool, shuffle) = true;
  EMBER_FIELD(uint64_t, seed) = 0;
  EMBER_FIELD(bool, drop_last) = false;
};

class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t n, DistributedSamplerOptions options);
  std::vector<int64_t> indices() const override;
  // Indices per rank: ceil(n / world_size), or floor with drop_last.
  int64_t size() const override { return per_rank_; }

 private:
  int64_t n_;
  DistributedSamplerOptions o_;
  int64_t per_rank_;
};

}  // namespace ember::data
