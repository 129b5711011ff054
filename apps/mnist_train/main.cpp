// mnist_train: trains and evaluates a classifier on an MNIST-format IDX set. See --help.
//
// Exit codes: 0 success, 1 runtime error (missing data, no GPU for --device cuda, a bad
// checkpoint, a diverged run, a side output that failed during the run ...), 2 usage error
// (unknown flag, bad value), 130/143 stopped by SIGINT/SIGTERM (Note [stopping on a signal] in
// trainer.h). Errors are one line on stderr.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <exception>
#include <utility>
#include <vector>

#include "apps/mnist_train/ablation.h"
#include "apps/mnist_train/options.h"
#include "apps/mnist_train/output_checks.h"
#include "apps/mnist_train/predict.h"
#include "apps/mnist_train/report.h"
#include "apps/mnist_train/splits.h"
#include "apps/mnist_train/stop_signals.h"
#include "apps/mnist_train/trainer.h"
#include "core/cuda/runtime.h"
#include "core/env.h"
#include "dist/process_group.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "kernels/openmp.h"

using namespace ember;

namespace {

// --device: the one asked for (it must exist), or the GPU when there is one.
Device pick_device(const std::optional<Device>& asked) {
  if (!asked) return cuda::device_count() > 0 ? kCUDA : kCPU;
  const Device d = *asked;
  if (d.is_cuda()) {
    EMBER_CHECK(cuda::device_count() > 0, "--device ", d.str(), ": ", cuda::unavailable_reason());
    EMBER_CHECK(d.index < cuda::device_count(), "--device ", d.str(), ": only ", cuda::device_count(),
                " CUDA device(s)");
  }
  return d;
}

std::string describe(Device d) {
  if (d.is_cpu()) return "cpu";
  return d.str() + " (" + cuda::properties(d.index).name + ")";
}

// --distributed: joins the process group (docs/dist.md; Note [launch conventions] in
// dist/launch_env.h). Every rank runs this program; rank 0 prints, logs and saves, the others train
// their shards silently. Returns whether this is rank 0; may move `device` to cuda:LOCAL_RANK.
bool join_job(mnist::Options& o, Device& device) {
  dist::LaunchEnv env = dist::launch_env();
  EMBER_CHECK(env.distributed,
              "--distributed: no launcher's variables are set (WORLD_SIZE, Slurm's or MPI's); "
              "start the processes with ember_run --nproc-per-node N -- mnist_train "
              "--distributed ..., or with srun or mpirun");
  EMBER_CHECK(!o.ablation, "--ablation runs on one process; drop --distributed");
  if (device.is_cuda()) {
    EMBER_CHECK(env.local_rank < cuda::device_count(), "--distributed: LOCAL_RANK ", env.local_rank, " but only ",
                cuda::device_count(), " CUDA device(s) on this machine");
    device = Device(DeviceType::cuda, env.local_rank);
  }
  dist::Options d;
  d.device = device;
  d.stop_requested = [] { return mnist::stop_signal(); };  // a SIGTERM ends the wait for the others
  dist::ProcessGroupPtr pg = dist::init_process_group(d);
  if (o.lr_scaling) o.lr *= pg->size();
  if (pg->rank() != 0) {
    o.quiet = true;
    o.silent = true;
    o.save.clear();
    o.log.clear();
    o.tensorboard.clear();
    o.plot.clear();
    o.profile.clear();
    return false;
  }
  std::printf("distributed: %d processes (%s), %lld samples per process and step, global batch %lld, lr %g%s\n",
              pg->size(), pg->backend().c_str(), static_cast<long long>(o.batch_size),
              static_cast<long long>(o.batch_size * pg->size()), o.lr, o.lr_scaling ? " (--lr x WORLD_SIZE)" : "");
  return true;
}

// The first lines: what --data held, the splits and the normalisation.
void print_data(const mnist::Options& o, const mnist::Splits& splits) {
  auto list = [](const std::vector<double>& v) {
    std::string out;
    for (double x : v) {
      char b[32];
      std::snprintf(b, sizeof b, "%.4f", x);
      if (!out.empty()) out += ", ";
      out += b;
    }
    return v.size() == 1 ? out : "(" + out + ")";
  };
  if (splits.kind != "IDX")
    std::printf("data: %s %s: %s images of %zu classes\n", splits.kind.c_str(), o.data.c_str(),
                mnist::shape_text(splits.shape).c_str(), splits.classes.size());
  std::printf("data: %lld train, %lld validation, %lld test images (normalised %swith mean %s, std %s)\n",
              static_cast<long long>(splits.train->size()), static_cast<long long>(splits.val ? splits.val->size() : 0),
              static_cast<long long>(splits.test->size()), splits.mean.size() > 1 ? "per channel " : "",
              list(splits.mean).c_str(), list(splits.std).c_str());
}

// --eval-only: the checkpoint's model on the test split.
int evaluate_only(const mnist::Options& o, mnist::Trainer& trainer, const mnist::Splits& splits, bool rank0) {
  trainer.load_model(o.eval_only);
  mnist::EvalResult e = trainer.evaluate(splits.test);
  if (!rank0) return 0;
  std::printf("test accuracy %.2f%% on %lld images (model from %s)\n", e.accuracy, static_cast<long long>(e.samples),
              o.eval_only.c_str());
  mnist::print_confusion(e, splits.classes);
  return 0;
}

// After training: the summary and the plot (rank 0), and the exit code.
int report(const mnist::Options& o, const mnist::RunResult& r, const mnist::Splits& splits, Device device, bool rank0) {
  if (!rank0) return !r.error.empty() ? 1 : r.interrupted_by != 0 ? 128 + r.interrupted_by : 0;
  mnist::print_summary(o, r, splits.classes, describe(device));
  if (!o.plot.empty()) {
    try {
      mnist::write_plot(o.plot, r);
    } catch (const std::exception& e) {
      mnist::output_failed("--plot", o.plot, e.what());
    }
  }
  std::fflush(stdout);
  if (!r.error.empty()) {
    std::fprintf(stderr, "mnist_train: error: %s\n", user_message(r.error).c_str());
    return 1;
  }
  if (r.interrupted_by != 0) return 128 + r.interrupted_by;
  return mnist::output_failures() > 0 ? 1 : 0;
}

// Everything after the command line: outputs checked, the device and the job, the data, then the
// ablation, an evaluation or the training run.
int run(mnist::Options o) {
  mnist::check_output_paths(o);
  Device device = pick_device(o.device);
  const bool rank0 = o.distributed ? join_job(o, device) : true;  // the other ranks write no outputs
  const auto locks = mnist::lock_outputs(o);
  if (!o.quiet) {
    std::string why = device.is_cpu() && !o.device ? " (" + cuda::unavailable_reason() + ")" : "";
    std::printf("mnist_train: %s on %s%s, data %s\n", name(o.model), describe(device).c_str(), why.c_str(),
                o.data.c_str());
  }
  mnist::Splits splits = mnist::load_splits(o);
  if (!o.quiet) print_data(o, splits);
  if (o.ablation) {
    int rc = mnist::run_ablation(o, device, splits);
    return mnist::stop_signal() != 0 ? 128 + mnist::stop_signal() : rc;
  }
  mnist::Trainer trainer(o, device, splits);
  if (!o.eval_only.empty()) return evaluate_only(o, trainer, splits, rank0);
  return report(o, trainer.run(), splits, device, rank0);
}

}  // namespace

int main(int argc, char** argv) {
  ember::restart_with_passive_openmp(argv);  // Note [OpenMP wait policy]
  // an error that escapes a destructor, a loader thread or a callback still ends with one line
  // and exit code 1 (Note [no abort] in core/error.h)
  ember::install_terminate_handler("mnist_train");
  mnist::ParseResult parsed = mnist::parse_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  const mnist::Options& o = *parsed.options;
  if (std::string same = mnist::output_conflict(o); !same.empty()) {
    std::fprintf(stderr, "mnist_train: error: %s (see --help)\n", same.c_str());
    return 2;
  }
  if (std::string misuse = mnist::data_usage_error(o); !misuse.empty()) {
    std::fprintf(stderr, "mnist_train: error: %s (see --help)\n", misuse.c_str());
    return 2;
  }
  if (o.check_options) {  // the GPU runner's dry run: the line parses, nothing is loaded or trained
    std::printf("mnist_train: options ok\n");
    return 0;
  }
  // Tests of the output policy (Note [side outputs]): the first output file to pass this many
  // bytes fails as a write error would.
  if (auto fault = env::integer("EMBER_TEST_WRITE_FAULT_AFTER", 0, INT64_MAX))
    io::set_write_fault_for_testing(io::WriteFault::kThrow, static_cast<uint64_t>(*fault));
  if (o.predict.empty()) mnist::install_stop_handlers();
  try {
    // --predict: the checkpoint says everything (no --data, no training)
    return o.predict.empty() ? run(o) : mnist::predict(o, pick_device(o.device));
  } catch (const dist::Interrupted& e) {  // stopped before training (Note [stopping on a signal])
    std::fflush(stdout);
    std::fprintf(stderr, "mnist_train: %s; nothing was trained\n", user_message(e.what()).c_str());
    return 128 + e.signal();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "mnist_train: error: %s\n", user_message(e.what()).c_str());
    return 1;
  } catch (...) {
    std::fflush(stdout);
    std::fprintf(stderr, "mnist_train: error: an exception that is not a std::exception\n");
    return 1;
  }
}
