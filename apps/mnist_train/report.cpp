#include "apps/mnist_train/report.h"

#include <sys/resource.h>

#include <cstdio>

#include "apps/mnist_train/process_age.h"
#include "logging/svg_plot.h"

namespace mnist {

void print_confusion(const EvalResult& e, const std::vector<std::string>& classes) {
  const size_t k = e.confusion.size();
  std::printf("\nper-class test accuracy:\n");
  for (size_t t = 0; t < k; ++t) {
    int64_t total = 0;
    for (size_t p = 0; p < k; ++p) total += e.confusion[t][p];
    double acc = total > 0 ? 100.0 * static_cast<double>(e.confusion[t][t]) / static_cast<double>(total) : 0.0;
    std::printf("  %zu %-12s %6.2f%%  (%lld samples)\n", t, t < classes.size() ? classes[t].c_str() : "", acc,
                static_cast<long long>(total));
  }
  std::printf("\nconfusion matrix (rows: true class, columns: predicted):\n     ");
  for (size_t p = 0; p < k; ++p) std::printf("%6zu", p);
  std::printf("\n");
  for (size_t t = 0; t < k; ++t) {
    std::printf("  %zu  ", t);
    for (size_t p = 0; p < k; ++p) std::printf("%6lld", static_cast<long long>(e.confusion[t][p]));
    std::printf("\n");
  }
}

void print_summary(const Options& o, const RunResult& r, const std::vector<std::string>& classes,
                   const std::string& device) {
  std::printf("\nsummary: model %s on %s, %zu epochs, %lld optimizer steps, batch %lld\n", name(o.model),
              device.c_str(), r.epochs.size(), static_cast<long long>(r.steps), static_cast<long long>(o.batch_size));
  std::printf("  total time            %.2f s (loading and evaluation included)\n", r.total_seconds);
  std::printf("  training time         %.2f s, %.0f samples/s\n", r.train_seconds, r.samples_per_s);
  if (r.startup_seconds >= 0)
    std::printf("  start-up              %.2f s (process start to the first step; the process ran %.2f s)\n",
                r.startup_seconds, process_age_s());
  if (r.timed_seconds >= 0)  // Note [the timing rule] in run_result.h
    std::printf(
        "  timed                 %.2f s, %.0f samples/s (training and evaluation after a warm-up of %.2f s, "
        "%lld %s)\n",
        r.timed_seconds, r.timed_samples_per_s, r.warmup_seconds, static_cast<long long>(r.warmup_steps),
        r.warmup_steps == 1 ? "step" : "steps");
  std::printf("  test accuracy         %.2f%% (best %.2f%%, reached after %.2f s)\n", r.final_test.accuracy,
              r.best_test_acc, r.time_to_best);
  std::printf("  data wait             %.1f%% of the training time (host waiting for the loader)\n",
              100.0 * r.data_wait_fraction);
  if (r.gpu_idle_fraction >= 0)
    std::printf("  GPU idle between steps %.1f%% (CUDA events around each step)\n", 100.0 * r.gpu_idle_fraction);
  if (o.graph) {
    std::printf("  CUDA graph            %s", r.graph_used ? "captured and replayed" : "not used");
    if (r.multi_launches > 0)
      std::printf("; %lld steps in %lld %s", static_cast<long long>(r.multi_steps),
                  static_cast<long long>(r.multi_launches), r.multi_launches == 1 ? "launch" : "launches");
    if (r.eval_replays > 0) std::printf("; %lld evaluation passes replayed", static_cast<long long>(r.eval_replays));
    std::printf("\n");
  }
  if (o.amp == AmpMode::fp16)
    std::printf("  loss scaler           %lld steps skipped (inf/NaN gradients)\n",
                static_cast<long long>(r.skipped_steps));
  // the kernel's high-water mark of this process's resident memory (ru_maxrss is in KiB on Linux):
  // it catches the short peaks of loading and evaluation that sampling /proc misses
  if (rusage ru{}; ::getrusage(RUSAGE_SELF, &ru) == 0)
    std::printf("  peak host memory      %.1f MiB resident\n", static_cast<double>(ru.ru_maxrss) / 1024.0);
  if (!r.kernels.empty()) std::printf("  kernels               %s\n", r.kernels.c_str());
  if (!r.kernel_choices.empty()) std::printf("  kernel choices        %s\n", r.kernel_choices.c_str());
  for (const std::string& n : r.notes) std::printf("  note: %s\n", n.c_str());
  print_confusion(r.final_test, classes);
}

void write_plot(const std::string& path, const RunResult& r) {
  using ember::logging::Chart;
  using ember::logging::Series;
  Chart loss{"training loss",
             "optimizer step",
             "cross-entropy loss (nats)",
             {{"train (per log interval)", r.curve_steps, r.curve_loss}}};
  Series train_acc{"train", {}, {}}, val_acc{"validation", {}, {}}, test_acc{"test", {}, {}};
  for (const EpochResult& e : r.epochs) {
    train_acc.x.push_back(e.epoch);
    train_acc.y.push_back(e.train_acc);
    val_acc.x.push_back(e.epoch);
    val_acc.y.push_back(e.val_acc);
    test_acc.x.push_back(e.epoch);
    test_acc.y.push_back(e.test_acc);
  }
  // without a validation split there is no validation curve (not a line at 0)
  Chart acc{"accuracy", "epoch", "accuracy (%)",
            r.has_val ? std::vector<Series>{train_acc, val_acc, test_acc} : std::vector<Series>{train_acc, test_acc}};
  ember::logging::write_svg(path, {loss, acc});
}

}  // namespace mnist
