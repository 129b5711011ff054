// Samplers and the data Rng: permutations, per-epoch reshuffling, distributed shards.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/rng.h"
#include "data/samplers.h"

using namespace ember::data;

namespace {
bool is_permutation_of_n(std::vector<int64_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[static_cast<size_t>(i)] != i) return false;
  return true;
}
}  // namespace

TEST_CASE("rng: reproducible streams, unbiased ranges", "[data][sampler]") {
  Rng a(1, 0), b(1, 0), c(1, 1), d(2, 0);
  std::vector<uint32_t> va, vb, vc, vd;
  for (int i = 0; i < 16; ++i) {
    va.push_back(a.next_u32());
    vb.push_back(b.next_u32());
    vc.push_back(c.next_u32());
    vd.push_back(d.next_u32());
  }
  CHECK(va == vb);
  CHECK(va != vc);
  CHECK(va != vd);
  Rng r(9);
  std::vector<int> hist(7, 0);
  double mean = 0;
  for (int i = 0; i < 70000; ++i) {
    int64_t k = r.randint(7);
    REQUIRE((k >= 0 && k < 7));
    ++hist[static_cast<size_t>(k)];
    double u = r.uniform();
    REQUIRE((u >= 0 && u < 1));
    mean += u;
  }
  for (int h : hist) CHECK(std::abs(h - 10000) < 500);  // ~5 sigma
  CHECK(mean / 70000 == Approx(0.5).margin(0.01));
  CHECK(r.randint(3, 3) == 3);
  CHECK_THROWS(r.randint(0));
  CHECK(mix_seed(1, 2, 3) != mix_seed(1, 3, 2));
}

TEST_CASE("samplers: sequential and random", "[data][sampler]") {
  SequentialSampler s(5);
  CHECK(s.indices() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(s.size() == 5);
  CHECK(SequentialSampler(0).indices().empty());

  RandomSampler r(1000, 42);
  auto e0 = r.indices();
  CHECK(is_permutation_of_n(e0, 1000));
  CHECK(r.indices() == e0);  // same epoch, same order
  r.set_epoch(1);
  auto e1 = r.indices();
  CHECK(is_permutation_of_n(e1, 1000));
  CHECK(e1 != e0);
  r.set_epoch(0);
  CHECK(r.indices() == e0);
  CHECK(RandomSampler(1000, 43).indices() != e0);
  CHECK(random_permutation(1000, 42, 0) == e0);
  // not the identity, and every position moves about as often as chance says
  int fixed = 0;
  for (int64_t i = 0; i < 1000; ++i) fixed += e0[static_cast<size_t>(i)] == i;
  CHECK(fixed < 10);
  CHECK(RandomSampler(1, 0).indices() == std::vector<int64_t>{0});
  CHECK(RandomSampler(0, 0).indices().empty());
}

TEST_CASE("samplers: distributed shards cover the set exactly once plus padding", "[data][sampler]") {
  for (int64_t n : {0, 1, 7, 10, 12, 101}) {
    for (int64_t world : {1, 2, 3, 4, 8}) {
      for (bool shuffle : {false, true}) {
        for (bool drop : {false, true}) {
          INFO("n " << n << " world " << world << " shuffle " << shuffle << " drop_last " << drop);
          std::vector<int64_t> all;
          std::vector<std::vector<int64_t>> shards;
          for (int64_t rank = 0; rank < world; ++rank) {
            DistributedSampler d(
                n, DistributedSamplerOptions().world_size(world).rank(rank).shuffle(shuffle).seed(5).drop_last(drop));
            d.set_epoch(3);
            auto mine = d.indices();
            CHECK(static_cast<int64_t>(mine.size()) == d.size());  // equal-length shards
            CHECK(d.size() == (drop ? n / world : (n + world - 1) / world));
            all.insert(all.end(), mine.begin(), mine.end());
            shards.push_back(mine);
          }
          std::vector<int> count(static_cast<size_t>(n), 0);
          for (int64_t i : all) {
            REQUIRE((i >= 0 && i < n));
            ++count[static_cast<size_t>(i)];
          }
          if (drop) {
            // at most once each; exactly n - n % world distinct samples
            for (int c : count) CHECK(c <= 1);
            CHECK(static_cast<int64_t>(all.size()) == n / world * world);
          } else {
            // every sample at least once; the padding repeats at most world - 1 of them
            for (int c : count) CHECK(c >= 1);
            CHECK(static_cast<int64_t>(all.size()) - n == (n == 0 ? 0 : (world - n % world) % world));
          }
          // rank r's i-th index is position i * world + r of one common order (the same
          // permutation on every rank): interleaving the shards rebuilds it
          std::vector<int64_t> order;
          for (size_t i = 0; !shards.empty() && i < shards[0].size(); ++i)
            for (auto& sh : shards) order.push_back(sh[i]);
          std::vector<int64_t> want = shuffle ? random_permutation(n, 5, 3) : [&] {
            std::vector<int64_t> v(static_cast<size_t>(n));
            std::iota(v.begin(), v.end(), int64_t{0});
            return v;
          }();
          for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == want[i % want.size()]);
        }
      }
    }
  }
  CHECK_THROWS_WITH(DistributedSampler(10, DistributedSamplerOptions().world_size(2).rank(2)),
                    Catch::Contains("rank 2 is outside [0, world_size = 2)"));
  CHECK_THROWS_WITH(DistributedSampler(10, DistributedSamplerOptions().world_size(0)), Catch::Contains("world_size"));
}
