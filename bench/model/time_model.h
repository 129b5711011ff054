// The time model of one op call on a GPU, fitted to the times measured there: the roofline's
// throughput terms (roofline.h) plus what dominates small problems, launches and the latency of a
// block's serial steps times the waves of blocks. kernel_model --measured prints it beside the
// measured times of the GPU runs' results files (bench/results/), and --fit refits its three
// free numbers to them; bench/model/time_model_h200.txt keeps the fit. It ranks kernel candidates
// without a GPU (which variants go into the next GPU run's bundle).
//
// Note [launch time model]: what the model assumes. Every number it prints is a prediction.
//   throughput  = the sum over the call's kernels of max(memory, compute, L1) of Note [kernel
//                 roofline model], each kernel taking the share of the call's terms that its part
//                 of the L1 traffic (shared wavefronts and global sectors) says. Two measured
//                 corrections: memory at the copy bandwidth a GPU run measured (hbm_fraction of the
//                 data sheet's) and math at the rate cuBLAS reached there (tensor_fraction for
//                 the tensor cores, simt_fraction for the fp32 pipes). And what a small grid leaves idle: compute and
//                 L1 are divided by the fraction of the SMs the kernel's grid occupies (a 6-block grid uses 6 SMs'
//                 math, not 132), and the issue efficiency is that of the warps actually resident
//                 (min(resident blocks, blocks / SMs) per SM), not of the theoretical occupancy.
//   latency     = sum over the call's kernels of launches x waves x (wave + steps x step), where
//                 waves = ceil(blocks per launch / (resident blocks per SM x SMs)) (resident blocks
//                 from the ptxas resource table; one when unknown) and steps = the __syncthreads (and
//                 cluster barriers) a block passes plus the phases its mbarriers complete (the
//                 simulator's counts per block). A tiled kernel's main-loop step is a global load's round trip plus a
//                 barrier (a warp-specialised one's: a stage's "full" and "empty" phases), and a
//                 block does its steps one after another, so a grid of one wave of 40-step blocks
//                 takes 40 steps whatever its FLOPs.
//   launch      = launches x launch: the launch on a busy stream and the kernel's ramp.
//   predicted   = launch + max(throughput, latency): the two overlap, as warps of other blocks
//                 hide one block's latency once there are enough of them.
// Fitted (by kernel_model --fit, least squares of log(predicted / measured) over the results files'
// ember rows): launch, wave, step. Measured, not fitted: hbm_fraction, tensor_fraction,
// simt_fraction. A row measured before its kernel changed is listed as stale in the parameter
// file and left out of the fit and the errors. Counters
// from a smaller shape (kernel_model's quick shapes) scale the blocks by the work ratio and keep
// the steps per block: waves x steps is then right for a tiled GEMM (whose blocks grow with M x N and
// steps with K) whenever there are many waves, which is when the work ratio is large.
#pragma once

#include <string>
#include <vector>

#include "bench/model/gpu_model.h"
#include "bench/model/roofline.h"

namespace ember::model {

struct TimeParams {
  double launch_s = 2.5e-6;         // per launch
  double wave_s = 1e-6;             // per wave of blocks: a block's prologue, first loads and epilogue
  double step_s = 0.1e-6;           // per __syncthreads a block passes
  double hbm_fraction = 1;          // copy bandwidth measured / the data sheet's
  double tensor_fraction = 1;       // tensor-core GEMM peak measured (cuBLAS) / the data sheet's
  double simt_fraction = 1;         // fp32 SIMT GEMM rate measured (cuBLAS) / the data sheet's peak
  std::vector<std::string> header;  // the file's comment lines: where the numbers come from
  // Measured rows whose kernel has changed since they were measured: printed, but neither fitted
  // nor counted in the errors. "<op> <variant> <case>" each.
  std::vector<std::string> stale;
};
// Reads a parameter file (the format is in time_model.cpp, and bench/model/time_model_h200.txt is
// one). Throws naming file:line on a malformed line, an unknown or missing key, or a value that is
// not a positive number.
TimeParams load_time_params(const std::string& path);
// Writes `p` in that format, its header lines first; through a temporary file renamed into place,
// so a failed write leaves the old file.
void save_time_params(const std::string& path, const TimeParams& p);

// One kernel of a call.
struct KernelLatency {
  int launches = 1;
  double blocks_per_launch = 1;  // on the shape that ran
  double steps_per_block = 0;    // __syncthreads and mbarrier phases per block
  int threads_per_block = 32;
  int resident_blocks_per_sm = 0;  // 0: unknown (taken as 1)
  double share = 1;  // of the call's throughput terms: its part of the L1 traffic (wavefronts and sectors)
};
// The call's kernels, with `resident[i]` blocks per SM for kernels[i].
std::vector<KernelLatency> kernel_latencies(const std::vector<KernelStats>& kernels, const std::vector<int>& resident);

struct TimeInput {
  Prediction roofline;  // predict() of the call (its memory, compute and L1 terms)
  MathUnit unit = MathUnit::fp32_simt;
  std::vector<KernelLatency> kernels;
  double work_scale = 1;  // the predicted shape's work / the shape that ran (1: the same shape)
};

struct TimeBreakdown {
  double launch_s = 0, latency_s = 0, throughput_s = 0, predicted_s = 0;
  double waves = 0;        // of the kernel with the most
  const char* bound = "";  // "launch", "latency", "memory", "compute", "L1"
};
TimeBreakdown predict_time(const GpuSpec& gpu, const TimeParams& p, const TimeInput& in);

// A measured call the fit and the error report use.
struct TimedCall {
  std::string label;  // "linear [64,784] -> 128 relu f32 simt"
  TimeInput in;
  double measured_s = 0;
  bool small = false;  // a small-shape case (the accuracy target is about these)
};

struct FitReport {
  size_t calls = 0, small = 0;
  size_t within = 0, small_within = 0;  // |predicted / measured - 1| <= tolerance
  double median_abs_error = 0;          // of |predicted / measured - 1|, all calls
  double loo_median_abs_error = 0;      // the same, each call predicted by a fit without it
  size_t loo_small_within = 0;
};
// |predicted / measured - 1| of each call under `p`.
std::vector<double> relative_errors(const GpuSpec& gpu, const TimeParams& p, const std::vector<TimedCall>& calls);
// Fits launch_s, wave_s and step_s (the others are kept from `start`) by least squares of
// log(predicted / measured), by Nelder-Mead over their logarithms. Needs at least three calls.
TimeParams fit_time_params(const GpuSpec& gpu, const TimeParams& start, const std::vector<TimedCall>& calls);
// The errors of `p`, and of leave-one-out refits when `loo` (one fit per call).
FitReport fit_report(const GpuSpec& gpu, const TimeParams& p, const std::vector<TimedCall>& calls, double tolerance,
                     bool loo);

}  // namespace ember::model
