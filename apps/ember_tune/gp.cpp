#include "apps/ember_tune/gp.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace ember::tune {

namespace {

constexpr double kSqrt5 = 2.23606797749979;
// The hyper-parameters' boxes, in log space, for inputs in [0, 1] and standardised outputs.
constexpr double kLogLengthLo = -4.6, kLogLengthHi = 2.3;  // length 0.01 .. 10
constexpr double kLogSignalLo = -3.0, kLogSignalHi = 3.0;  // s2 0.05 .. 20
constexpr double kLogNoiseLo = -20.7, kLogNoiseHi = 0.0;   // n2 1e-9 .. 1
constexpr double kPriorLogLength = -0.7,
                 kPriorSd = 1.5;  // length ~ 0.5 within a factor 4.5

double sigmoid(double z) { return 1 / (1 + std::exp(-z)); }
double logit(double p) { return std::log(p / (1 - p)); }

struct Box {
  double lo, hi;
};

std::vector<Box> boxes(size_t d) {
  std::vector<Box> b(d, Box{kLogLengthLo, kLogLengthHi});
  b.push_back({kLogSignalLo, kLogSignalHi});
  b.push_back({kLogNoiseLo, kLogNoiseHi});
  return b;
}

GpHyper from_theta(const Eigen::VectorXd& t, size_t d) {
  GpHyper h;
  h.log_length.assign(t.data(), t.data() + d);
  h.log_signal = t[static_cast<Eigen::Index>(d)];
  h.log_noise = t[static_cast<Eigen::Index>(d) + 1];
  return h;
}

Eigen::VectorXd to_theta(const GpHyper& h) {
  const size_t d = h.log_length.size();
  Eigen::VectorXd t(static_cast<Eigen::Index>(d) + 2);
  for (size_t i = 0; i < d; ++i) t[static_cast<Eigen::Index>(i)] = h.log_length[i];
  t[static_cast<Eigen::Index>(d)] = h.log_signal;
  t[static_cast<Eigen::Index>(d) + 1] = h.log_noise;
  return t;
}

}  // namespace

double GaussianProcess::matern52(const Eigen::VectorXd& a, const Eigen::VectorXd& b, const GpHyper& h) {
  double r2 = 0;
  for (Eigen::Index k = 0; k < a.size(); ++k) {
    const double q = (a[k] - b[k]) / std::exp(h.log_length[static_cast<size_t>(k)]);
    r2 += q * q;
  }
  const double r = std::sqrt(r2);
  return std::exp(h.log_signal) * (1 + kSqrt5 * r + 5 * r2 / 3) * std::exp(-kSqrt5 * r);
}

double GaussianProcess::log_marginal(const Eigen::MatrixXd& X, const Eigen::VectorXd& ys, const GpHyper& h,
                                     Eigen::VectorXd* grad) const {
  const Eigen::Index n = X.rows(), d = X.cols();
  const double s2 = std::exp(h.log_signal), n2 = std::exp(h.log_noise);
  Eigen::VectorXd inv_l(d);
  for (Eigen::Index k = 0; k < d; ++k) inv_l[k] = std::exp(-h.log_length[static_cast<size_t>(k)]);
  Eigen::MatrixXd K(n, n), E(n, n);  // E: the common factor 5/3 s2 (1 + sqrt5 r) exp(-sqrt5 r)
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j <= i; ++j) {
      const double r2 = (X.row(i) - X.row(j)).cwiseProduct(inv_l.transpose()).squaredNorm();
      const double r = std::sqrt(r2), e = std::exp(-kSqrt5 * r);
      K(i, j) = K(j, i) = s2 * (1 + kSqrt5 * r + 5 * r2 / 3) * e;
      E(i, j) = E(j, i) = 5.0 / 3.0 * s2 * (1 + kSqrt5 * r) * e;
    }
  Eigen::MatrixXd Kn = K;
  Kn.diagonal().array() += n2;
  Eigen::LLT<Eigen::MatrixXd> llt(Kn);
  if (llt.info() != Eigen::Success) return -std::numeric_limits<double>::infinity();
  const Eigen::VectorXd alpha = llt.solve(ys);
  const Eigen::MatrixXd L = llt.matrixL();
  double lml =
      -0.5 * ys.dot(alpha) - L.diagonal().array().log().sum() - 0.5 * static_cast<double>(n) * std::log(2 * M_PI);
  for (Eigen::Index k = 0; k < d; ++k) {
    const double z = (h.log_length[static_cast<size_t>(k)] - kPriorLogLength) / kPriorSd;
    lml -= 0.5 * z * z;
  }
  if (grad) {
    const Eigen::MatrixXd W = alpha * alpha.transpose() - llt.solve(Eigen::MatrixXd::Identity(n, n));
    grad->resize(d + 2);
    for (Eigen::Index k = 0; k < d; ++k) {
      double g = 0;
      for (Eigen::Index i = 0; i < n; ++i)
        for (Eigen::Index j = 0; j < n; ++j) {
          const double q = (X(i, k) - X(j, k)) * inv_l[k];
          g += W(i, j) * E(i, j) * q * q;
        }
      (*grad)[k] = 0.5 * g - (h.log_length[static_cast<size_t>(k)] - kPriorLogLength) / (kPriorSd * kPriorSd);
    }
    (*grad)[d] = 0.5 * W.cwiseProduct(K).sum();
    (*grad)[d + 1] = 0.5 * n2 * W.trace();
  }
  return lml;
}

namespace {

// theta = lo + (hi - lo) sigmoid(z) per coordinate, and (when dt is given) its derivative in z.
Eigen::VectorXd theta_of(const Eigen::VectorXd& z, const std::vector<Box>& box, Eigen::VectorXd* dt = nullptr) {
  const Eigen::Index m = z.size();
  Eigen::VectorXd t(m);
  if (dt) dt->resize(m);
  for (Eigen::Index i = 0; i < m; ++i) {
    const Box& b = box[static_cast<size_t>(i)];
    const double s = sigmoid(z[i]);
    t[i] = b.lo + (b.hi - b.lo) * s;
    if (dt) (*dt)[i] = (b.hi - b.lo) * s * (1 - s);
  }
  return t;
}

// The inverse of theta_of, kept a little inside the box.
Eigen::VectorXd z_of(const Eigen::VectorXd& t, const std::vector<Box>& box) {
  Eigen::VectorXd z(t.size());
  for (Eigen::Index i = 0; i < t.size(); ++i) {
    const Box& b = box[static_cast<size_t>(i)];
    z[i] = logit(std::clamp((t[i] - b.lo) / (b.hi - b.lo), 1e-6, 1 - 1e-6));
  }
  return z;
}

// Where the fit climbs from, in z: a default, the previous fit's optimum when it has as many inputs, and `restarts`
// random points.
std::vector<Eigen::VectorXd> start_points(const std::vector<Box>& box, size_t d, const GpHyper* warm, int restarts,
                                          Rng& rng) {
  std::vector<Eigen::VectorXd> starts;
  GpHyper def;
  def.log_length.assign(d, kPriorLogLength);
  def.log_signal = 0;
  def.log_noise = -9;
  starts.push_back(z_of(to_theta(def), box));
  if (warm && warm->log_length.size() == d) starts.push_back(z_of(to_theta(*warm), box));
  for (int r = 0; r < restarts; ++r) {
    Eigen::VectorXd z(static_cast<Eigen::Index>(box.size()));
    for (Eigen::Index i = 0; i < z.size(); ++i) z[i] = 3 * (2 * rng.uniform() - 1);
    starts.push_back(z);
  }
  return starts;
}

// Minimises f(z, gradient) from z (left at the minimum found) by BFGS on the inverse Hessian with an Armijo
// backtracking line search; returns the minimum, infinity when f is not finite at the start.
template <class F>
double minimise_bfgs(const F& objective, Eigen::VectorXd& z) {
  const Eigen::Index m = z.size();
  Eigen::VectorXd g;
  double f = objective(z, g);
  if (!std::isfinite(f)) return std::numeric_limits<double>::infinity();
  Eigen::MatrixXd H = Eigen::MatrixXd::Identity(m, m);
  for (int it = 0; it < 60; ++it) {
    Eigen::VectorXd p = -H * g;
    if (p.dot(g) >= 0) {  // not a descent direction: restart from steepest descent
      H.setIdentity();
      p = -g;
    }
    if (p.norm() > 3) p *= 3 / p.norm();  // z beyond +-6 is the box's flat edge anyway
    double step = 1, fn = 0;
    Eigen::VectorXd zn, gn;
    bool ok = false;
    for (int ls = 0; ls < 20; ++ls, step *= 0.5) {
      zn = z + step * p;
      fn = objective(zn, gn);
      if (fn <= f + 1e-4 * step * p.dot(g)) {
        ok = true;
        break;
      }
    }
    if (!ok) break;
    const Eigen::VectorXd s = zn - z, yv = gn - g;
    const double sy = s.dot(yv);
    if (sy > 1e-12) {
      const double rho = 1 / sy;
      const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(m, m);
      H = (I - rho * s * yv.transpose()) * H * (I - rho * yv * s.transpose()) + rho * s * s.transpose();
    }
    const double drop = f - fn;
    z = zn;
    g = gn;
    f = fn;
    if (g.lpNorm<Eigen::Infinity>() < 1e-5 || drop < 1e-9) break;
  }
  return f;
}

}  // namespace

void GaussianProcess::fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, Rng& rng, int restarts,
                          const GpHyper* warm) {
  EMBER_CHECK(X.rows() >= 1 && X.rows() == y.size(), "GP fit: ", X.rows(), " inputs and ", y.size(), " outputs");
  const size_t d = static_cast<size_t>(X.cols());
  y_mean_ = y.mean();
  y_std_ = std::sqrt((y.array() - y_mean_).square().mean());
  if (!(y_std_ > 1e-12)) y_std_ = 1;
  const Eigen::VectorXd ys = (y.array() - y_mean_) / y_std_;
  const std::vector<Box> box = boxes(d);

  // The objective in the unconstrained variables z, negated for minimisation.
  auto objective = [&](const Eigen::VectorXd& z, Eigen::VectorXd& g) {
    Eigen::VectorXd dt, gt;
    const double v = log_marginal(X, ys, from_theta(theta_of(z, box, &dt), d), &gt);
    if (!std::isfinite(v)) {
      g = Eigen::VectorXd::Zero(z.size());
      return std::numeric_limits<double>::infinity();
    }
    g = -gt.cwiseProduct(dt);
    return -v;
  };
  const std::vector<Eigen::VectorXd> starts = start_points(box, d, warm, restarts, rng);
  double best_f = std::numeric_limits<double>::infinity();
  Eigen::VectorXd best_z = starts[0];
  for (Eigen::VectorXd z : starts) {
    const double f = minimise_bfgs(objective, z);
    if (f < best_f) {
      best_f = f;
      best_z = z;
    }
  }
  GpHyper h = from_theta(theta_of(best_z, box), d);
  // If every start failed (K not positive definite anywhere tried), more noise makes it so.
  if (!std::isfinite(best_f)) h.log_noise = -2;
  condition_standardised(X, ys, h);
}

void GaussianProcess::condition(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const GpHyper& h) {
  y_mean_ = y.mean();
  y_std_ = std::sqrt((y.array() - y_mean_).square().mean());
  if (!(y_std_ > 1e-12)) y_std_ = 1;
  condition_standardised(X, (y.array() - y_mean_) / y_std_, h);
}

void GaussianProcess::condition_standardised(const Eigen::MatrixXd& X, const Eigen::VectorXd& ys, GpHyper h) {
  const Eigen::Index n = X.rows();
  X_ = X;
  for (int attempt = 0;; ++attempt) {
    Eigen::MatrixXd K(n, n);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j <= i; ++j) K(i, j) = K(j, i) = matern52(X.row(i), X.row(j), h);
    K.diagonal().array() += std::exp(h.log_noise);
    llt_.compute(K);
    if (llt_.info() == Eigen::Success || attempt == 8) break;
    h.log_noise += 2;  // duplicate points with a tiny jitter: add noise until K factors
  }
  EMBER_CHECK(llt_.info() == Eigen::Success, "GP: the kernel matrix is not positive definite even with noise ",
              std::exp(h.log_noise));
  h_ = h;
  alpha_ = llt_.solve(ys);
}

void GaussianProcess::predict(const Eigen::VectorXd& x, double& mean, double& var) const {
  const Eigen::Index n = X_.rows();
  Eigen::VectorXd k(n);
  for (Eigen::Index i = 0; i < n; ++i) k[i] = matern52(X_.row(i), x, h_);
  const double m = k.dot(alpha_);
  const Eigen::VectorXd v = llt_.matrixL().solve(k);
  const double s = std::max(std::exp(h_.log_signal) - v.squaredNorm(), 0.0);
  mean = y_mean_ + y_std_ * m;
  var = s * y_std_ * y_std_;
}

double expected_improvement(double mean, double var, double best) {
  const double diff = best - mean;
  if (!(var > 1e-300)) return std::max(diff, 0.0);
  const double sd = std::sqrt(var), z = diff / sd;
  const double Phi = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double phi = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
  return diff * Phi + sd * phi;
}

}  // namespace ember::tune
