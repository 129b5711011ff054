// The samplers: where the next trial goes, given the finished ones.
//
//   random   u uniform in the unit cube (the baseline)
//   gp       a Latin-hypercube initial design, then the point that maximises the expected
//            improvement under a Gaussian-process surrogate (apps/ember_tune/gp.h)
//   tpe      the same initial design, then univariate TPE: Parzen densities of the best quarter
//            (l) and of the rest (g) per parameter; of 24 draws from l, the one with the largest l / g
//
// Every sampler minimises: a study that maximises hands them the negated objective. The point of trial n is a
// function of (seed, n, the finished trials, the running ones) only (Note [latent and feature coordinates] in
// apps/ember_tune/space.h for what a point is), which is what makes a seeded study reproducible and a resumed one
// pick what the uninterrupted one would have.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/ember_tune/space.h"

namespace ember::tune {

enum class SamplerKind { random, gp, tpe };
SamplerKind parse_sampler(const std::string& name);  // throws ember::Error for an unknown name
const char* sampler_name(SamplerKind k);

struct Observation {
  std::vector<double> u;  // latent point
  double loss = 0;        // the value to minimise; ignored when failed
  bool failed = false;    // crashed or diverged: the GP sees it as the worst loss so far
};

struct SamplerOptions {
  SamplerKind kind = SamplerKind::gp;
  uint64_t seed = 0;
  int n_init = 0;  // Latin-hypercube points before the model (0: 2 x parameters + 2, at least 5)
};

int initial_points(const SamplerOptions& o, const Space& s);

// The point for trial `number`. `pending` are the points of trials still running (the GP treats them as observed at
// its own posterior mean, the "kriging believer", so K parallel trials spread out instead of piling onto one maximum
// of EI).
std::vector<double> suggest(const Space& space, const SamplerOptions& o, uint64_t number,
                            const std::vector<Observation>& history, const std::vector<std::vector<double>>& pending);

// Row `row` of the n-point Latin hypercube of this seed: each coordinate has exactly one of the n points in each
// stratum [k/n, (k+1)/n).
std::vector<double> latin_hypercube_point(size_t dim, int n, int row, uint64_t seed);
std::vector<std::vector<double>> latin_hypercube(size_t dim, int n, uint64_t seed);

}  // namespace ember::tune
