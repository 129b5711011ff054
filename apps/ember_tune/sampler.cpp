#include "apps/ember_tune/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "apps/ember_tune/gp.h"
#include "apps/ember_tune/rng.h"
#include "core/error.h"

namespace ember::tune {

namespace {

// Streams of the seed's random numbers, one per use (Rng(seed, stream)).
constexpr uint64_t kStreamLhs = 0x4c4853ull;        // the Latin hypercube
constexpr uint64_t kStreamTrial = 0x1000000000ull;  // + trial number: that trial's draws

std::vector<double> uniform_point(size_t dim, Rng& rng) {
  std::vector<double> u(dim);
  for (double& x : u) x = rng.uniform();
  return u;
}

Eigen::VectorXd feature_vector(const Space& s, const std::vector<double>& u) {
  const std::vector<double> f = s.features(u);
  return Eigen::Map<const Eigen::VectorXd>(f.data(), static_cast<Eigen::Index>(f.size()));
}

// Losses the models see: failed trials as the worst finished loss (a region that crashes is a region to leave), or 1
// when nothing finished.
std::vector<double> imputed_losses(const std::vector<Observation>& h) {
  double worst = -std::numeric_limits<double>::infinity();
  for (const Observation& o : h)
    if (!o.failed && std::isfinite(o.loss)) worst = std::max(worst, o.loss);
  if (!std::isfinite(worst)) worst = 1;
  std::vector<double> y;
  for (const Observation& o : h) y.push_back(!o.failed && std::isfinite(o.loss) ? o.loss : worst);
  return y;
}

// ---- GP-EI ----

// The surrogate: the GP on the finished trials and, when trials are running, on them too, "observed" at its posterior
// mean (the kriging believer); and the incumbent EI improves on.
struct EiModel {
  GaussianProcess gp;
  double best = std::numeric_limits<double>::infinity();
};

// Conditions the model also on the running trials at its own posterior mean.
void believe_pending(EiModel& model, const Space& space, const Eigen::MatrixXd& X, const Eigen::VectorXd& Y,
                     const std::vector<std::vector<double>>& pending) {
  const Eigen::Index n = X.rows();
  Eigen::MatrixXd Xp(n + static_cast<Eigen::Index>(pending.size()), X.cols());
  Eigen::VectorXd Yp(Xp.rows());
  Xp.topRows(n) = X;
  Yp.head(n) = Y;
  for (size_t j = 0; j < pending.size(); ++j) {
    const Eigen::VectorXd f = feature_vector(space, pending[j]);
    double m = 0, v = 0;
    model.gp.predict(f, m, v);
    Xp.row(n + static_cast<Eigen::Index>(j)) = f.transpose();
    Yp[n + static_cast<Eigen::Index>(j)] = m;
    model.best = std::min(model.best, m);  // else EI there stays best - m > 0 and the next point lands on it
  }
  const GpHyper h = model.gp.hyper();
  model.gp.condition(Xp, Yp, h);
}

EiModel fit_ei_model(const Space& space, const std::vector<Observation>& history, const std::vector<double>& y,
                     const std::vector<std::vector<double>>& pending, Rng& rng) {
  const Eigen::Index n = static_cast<Eigen::Index>(history.size());
  Eigen::MatrixXd X(n, static_cast<Eigen::Index>(space.feature_size()));
  Eigen::VectorXd Y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    X.row(i) = feature_vector(space, history[static_cast<size_t>(i)].u);
    Y[i] = y[static_cast<size_t>(i)];
  }
  EiModel model;
  model.gp.fit(X, Y, rng, 3);
  // The incumbent: the lowest posterior mean at an observed point (with noise, the lowest observation is an
  // optimist's pick).
  for (Eigen::Index i = 0; i < n; ++i) {
    double m = 0, v = 0;
    model.gp.predict(X.row(i).transpose(), m, v);
    model.best = std::min(model.best, m);
  }
  if (!pending.empty()) believe_pending(model, space, X, Y, pending);
  return model;
}

double expected_improvement_at(const EiModel& model, const Space& space, const std::vector<double>& u) {
  double m = 0, v = 0;
  model.gp.predict(feature_vector(space, u), m, v);
  return expected_improvement(m, v, model.best);
}

struct Cand {
  std::vector<double> u;
  double ei;
};

// Candidate starts of the local search: random points, and small moves around the best observed points (EI's maxima
// are often near them, in regions random points rarely hit).
std::vector<Cand> ei_candidates(const EiModel& model, const Space& space, const std::vector<Observation>& history,
                                const std::vector<double>& y, Rng& rng) {
  const size_t dim = space.size();
  std::vector<Cand> cands;
  for (int i = 0; i < 1000; ++i) {
    std::vector<double> u = uniform_point(dim, rng);
    cands.push_back({u, expected_improvement_at(model, space, u)});
  }
  std::vector<size_t> order(history.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return y[a] < y[b]; });
  for (size_t k = 0; k < std::min<size_t>(5, order.size()); ++k)
    for (int i = 0; i < 60; ++i) {
      std::vector<double> u = history[order[k]].u;
      for (size_t d = 0; d < dim; ++d)
        if (space.params[d].type != ParamType::categorical || rng.uniform() < 0.2)
          u[d] = std::clamp(
              u[d] + (space.params[d].type == ParamType::categorical ? rng.uniform() - u[d] : 0.05 * rng.normal()), 0.0,
              1.0);
      cands.push_back({u, expected_improvement_at(model, space, u)});
    }
  return cands;
}

// Climbs EI from c: compass search on the numeric coordinates (step halved when no move helps), every choice of each
// categorical tried in turn.
Cand compass_search(const EiModel& model, const Space& space, Cand c) {
  for (double step = 0.1; step > 1e-3;) {
    bool moved = false;
    for (size_t d = 0; d < space.size(); ++d) {
      const Param& p = space.params[d];
      std::vector<double> tries;
      if (p.type == ParamType::categorical) {
        for (int64_t k = 0; k < p.count(); ++k)
          tries.push_back((static_cast<double>(k) + 0.5) / static_cast<double>(p.count()));
      } else {
        tries = {std::clamp(c.u[d] - step, 0.0, 1.0), std::clamp(c.u[d] + step, 0.0, 1.0)};
      }
      for (double t : tries) {
        std::vector<double> u = c.u;
        u[d] = t;
        const double e = expected_improvement_at(model, space, u);
        if (e > c.ei * (1 + 1e-9) + 1e-300) {
          c = {u, e};
          moved = true;
        }
      }
    }
    if (!moved) step /= 2;
  }
  return c;
}

// The point of largest EI found by a multi-start local search from the five best candidates.
std::vector<double> suggest_gp(const Space& space, const std::vector<Observation>& history,
                               const std::vector<std::vector<double>>& pending, Rng& rng) {
  const std::vector<double> y = imputed_losses(history);
  const EiModel model = fit_ei_model(space, history, y, pending, rng);
  std::vector<Cand> cands = ei_candidates(model, space, history, y, rng);
  std::partial_sort(cands.begin(), cands.begin() + 5, cands.end(),
                    [](const Cand& a, const Cand& b) { return a.ei > b.ei; });
  Cand best_c = cands[0];
  for (int s = 0; s < 5; ++s) {
    const Cand c = compass_search(model, space, cands[static_cast<size_t>(s)]);
    if (c.ei > best_c.ei) best_c = c;
  }
  return best_c.u;
}

// ---- TPE ----

// A Parzen density in [0, 1]: truncated Gaussians at `centres` with bandwidths from the gaps between neighbours
// (clipped below by 1 / min(100, n + 1) so few points do not make spikes), plus a uniform prior component of weight 1
// / (n + 1).
struct Parzen {
  std::vector<double> mu, sd;
  explicit Parzen(std::vector<double> c) : mu(std::move(c)) {
    std::vector<double> s = mu;
    std::sort(s.begin(), s.end());
    const double min_bw = 1.0 / std::min(100.0, static_cast<double>(mu.size()) + 1);
    for (double m : mu) {
      auto it = std::lower_bound(s.begin(), s.end(), m);
      const double left = it == s.begin() ? m : m - *(it - 1);
      const double right = (it + 1) == s.end() ? 1 - m : *(it + 1) - m;
      sd.push_back(std::clamp(std::max(left, right), min_bw, 1.0));
    }
  }
  static double cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
  double pdf(double x) const {
    double p = 1.0;  // the prior: uniform density 1
    for (size_t i = 0; i < mu.size(); ++i) {
      const double z = (x - mu[i]) / sd[i];
      const double mass = cdf((1 - mu[i]) / sd[i]) - cdf(-mu[i] / sd[i]);
      p += std::exp(-0.5 * z * z) / (sd[i] * std::sqrt(2 * M_PI) * mass);
    }
    return p / static_cast<double>(mu.size() + 1);
  }
  double sample(Rng& rng) const {
    const uint64_t k = rng.below(mu.size() + 1);
    if (k == mu.size()) return rng.uniform();
    for (int tries = 0; tries < 100; ++tries) {
      const double x = mu[k] + sd[k] * rng.normal();
      if (x >= 0 && x <= 1) return x;
    }
    return std::clamp(mu[k], 0.0, 1.0);
  }
};

std::vector<double> suggest_tpe(const Space& space, const std::vector<Observation>& history, Rng& rng) {
  const std::vector<double> y = imputed_losses(history);
  std::vector<size_t> order(history.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return y[a] < y[b]; });
  const size_t n_good = std::clamp<size_t>(static_cast<size_t>(std::ceil(0.25 * static_cast<double>(y.size()))), 1, 25);
  const size_t dim = space.size();
  // Per parameter: l and g as functions of the latent coordinate (for a categorical, smoothed counts of its choices;
  // for numbers, a Parzen density over the feature coordinate, which is the latent one up to an integer's bucket
  // centre).
  std::vector<std::vector<double>> best_u(dim), rest_u(dim);
  for (size_t r = 0; r < order.size(); ++r) {
    const std::vector<double> f = space.features(history[order[r]].u);
    const std::vector<double> v = space.decode(history[order[r]].u);
    size_t col = 0;
    for (size_t d = 0; d < dim; ++d) {
      const Param& p = space.params[d];
      const double x = p.type == ParamType::categorical ? v[d] : f[col];
      (r < n_good ? best_u : rest_u)[d].push_back(x);
      col += p.type == ParamType::categorical ? p.choices.size() : 1;
    }
  }
  std::vector<double> best;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int c = 0; c < 24; ++c) {
    std::vector<double> u(dim);
    double score = 0;
    for (size_t d = 0; d < dim; ++d) {
      const Param& p = space.params[d];
      if (p.type == ParamType::categorical) {
        const size_t k = p.choices.size();
        std::vector<double> wl(k, 1.0), wg(k, 1.0);
        for (double x : best_u[d]) wl[static_cast<size_t>(x)] += 1;
        for (double x : rest_u[d]) wg[static_cast<size_t>(x)] += 1;
        const double sl = std::accumulate(wl.begin(), wl.end(), 0.0), sg = std::accumulate(wg.begin(), wg.end(), 0.0);
        double t = rng.uniform() * sl;
        size_t pick = 0;
        while (pick + 1 < k && t >= wl[pick]) t -= wl[pick++];
        u[d] = (static_cast<double>(pick) + 0.5) / static_cast<double>(k);
        score += std::log(wl[pick] / sl) - std::log(wg[pick] / sg);
      } else {
        const Parzen l(best_u[d]), g(rest_u[d]);
        u[d] = l.sample(rng);
        score += std::log(l.pdf(u[d])) - std::log(g.pdf(u[d]));
      }
    }
    if (score > best_score) {
      best_score = score;
      best = u;
    }
  }
  return best;
}

}  // namespace

SamplerKind parse_sampler(const std::string& name) {
  if (name == "random") return SamplerKind::random;
  if (name == "gp" || name == "gp-ei") return SamplerKind::gp;
  if (name == "tpe") return SamplerKind::tpe;
  EMBER_FAIL("unknown sampler '", name, "' (expected gp, tpe or random)");
}

const char* sampler_name(SamplerKind k) {
  switch (k) {
    case SamplerKind::random: return "random";
    case SamplerKind::gp: return "gp";
    case SamplerKind::tpe: return "tpe";
  }
  return "?";
}

int initial_points(const SamplerOptions& o, const Space& s) {
  return o.n_init > 0 ? o.n_init : std::max(5, 2 * static_cast<int>(s.size()) + 2);
}

std::vector<std::vector<double>> latin_hypercube(size_t dim, int n, uint64_t seed) {
  EMBER_CHECK(n >= 1, "a Latin hypercube needs at least one point, got ", n);
  Rng rng(seed, kStreamLhs);
  std::vector<std::vector<double>> pts(static_cast<size_t>(n), std::vector<double>(dim));
  std::vector<int> perm(static_cast<size_t>(n));
  for (size_t d = 0; d < dim; ++d) {
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);  // Fisher-Yates
    for (size_t i = 0; i < perm.size(); ++i) pts[i][d] = (perm[i] + rng.uniform()) / n;
  }
  return pts;
}

std::vector<double> latin_hypercube_point(size_t dim, int n, int row, uint64_t seed) {
  return latin_hypercube(dim, n, seed).at(static_cast<size_t>(row));
}

std::vector<double> suggest(const Space& space, const SamplerOptions& o, uint64_t number,
                            const std::vector<Observation>& history, const std::vector<std::vector<double>>& pending) {
  Rng rng(o.seed, kStreamTrial + number);
  if (o.kind == SamplerKind::random) return uniform_point(space.size(), rng);
  const int n_init = initial_points(o, space);
  if (number < static_cast<uint64_t>(n_init))
    return latin_hypercube_point(space.size(), n_init, static_cast<int>(number), o.seed);
  size_t usable = 0;
  for (const Observation& h : history) usable += !h.failed;
  if (usable < 2) return uniform_point(space.size(), rng);  // nothing to model yet
  if (o.kind == SamplerKind::tpe) return suggest_tpe(space, history, rng);
  return suggest_gp(space, history, pending, rng);
}

}  // namespace ember::tune
