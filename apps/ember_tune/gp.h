// A Gaussian-process regression surrogate for the GP-EI sampler (Eigen for the linear algebra).
//
// Model: y = f(x) + noise, f ~ GP(0, k), with the Matérn 5/2 kernel and one length scale per input (ARD):
//   k(x, x') = s2 (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r),   r^2 = sum_d ((x_d - x'_d) / l_d)^2
// and Gaussian noise of variance n2 (at least a 1e-9 jitter, which keeps the Cholesky factor of a deterministic
// objective's nearly singular K well conditioned; not more, because it is in standardised units: a floor of 1e-6 is a
// noise sd of 0.05 on Branin, whose standard deviation is ~50, larger than the 0.004 that is 1% of its optimum, and
// GP-EI then stalls short of it). Outputs are standardised (zero mean, unit variance) before the fit, so the
// hyper-parameters' bounds mean the same for every objective. Inputs are the Space's features, already in [0, 1].
//
// Fit: the hyper-parameters theta = (log l_1..l_D, log s2, log n2) maximise the log marginal likelihood
//   log p(y | theta) = -1/2 y^T K^-1 y - sum log diag(L) - n/2 log 2pi,   K = L L^T,
// whose gradient is 1/2 tr((alpha alpha^T - K^-1) dK/dtheta_j), alpha = K^-1 y. With the Matérn 5/2 form, dk/dlog l_d
// = 5/3 s2 (1 + sqrt5 r) exp(-sqrt5 r) ((x_d - x'_d) / l_d)^2 (no 1/r: smooth at r = 0). Each theta is kept inside a
// box by a logistic map from an unconstrained variable, and BFGS with a backtracking line search climbs from a few
// starts (the previous fit's optimum, a default, random points); the best one wins. A weak log-normal prior on the
// length scales keeps a handful of points from fitting a length scale of 1e-3 or 1e3.
#pragma once

#include <Eigen/Dense>
#include <vector>

#include "apps/ember_tune/rng.h"

namespace ember::tune {

struct GpHyper {
  std::vector<double> log_length;  // one per input
  double log_signal = 0;           // log s2 (standardised outputs)
  double log_noise = -6;           // log n2
};

class GaussianProcess {
 public:
  // Fits the hyper-parameters (restarts random starts besides the default and `warm` when given) and conditions on
  // the data. X is n x D, y has n entries (n >= 1).
  void fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, Rng& rng, int restarts = 3,
           const GpHyper* warm = nullptr);
  // Conditions on the data with fixed hyper-parameters (no fit).
  void condition(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const GpHyper& h);

  // Posterior mean and variance of f (not of a noisy observation) at x, in the units of y.
  void predict(const Eigen::VectorXd& x, double& mean, double& var) const;

  const GpHyper& hyper() const { return h_; }
  // The log marginal likelihood of the standardised data under h, and its gradient in the order (log lengths..., log
  // signal, log noise). Exposed for the tests' finite-difference check.
  double log_marginal(const Eigen::MatrixXd& X, const Eigen::VectorXd& ys, const GpHyper& h,
                      Eigen::VectorXd* grad) const;

  // The kernel itself, for the tests.
  static double matern52(const Eigen::VectorXd& a, const Eigen::VectorXd& b, const GpHyper& h);

 private:
  void condition_standardised(const Eigen::MatrixXd& X, const Eigen::VectorXd& ys, GpHyper h);

  GpHyper h_;
  Eigen::MatrixXd X_;
  Eigen::VectorXd alpha_;
  Eigen::LLT<Eigen::MatrixXd> llt_;
  double y_mean_ = 0, y_std_ = 1;
};

// Expected improvement of a minimisation below `best` for a Gaussian N(mean, var):
//   EI = (best - mean) Phi(z) + sd phi(z),   z = (best - mean) / sd;   (best - mean)+ when sd = 0.
double expected_improvement(double mean, double var, double best);

}  // namespace ember::tune
