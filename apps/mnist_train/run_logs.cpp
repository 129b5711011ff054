#include "apps/mnist_train/run_logs.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/mnist_train/outputs.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "logging/progress.h"
#include "logging/tensorboard.h"

namespace mnist {

using namespace ember;

namespace {
std::string fmt_pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", v);
  return b;
}
}  // namespace

RunLogs::RunLogs(const Options& o, bool has_val) : o_(o), has_val_(has_val) {
  if (!o_.log.empty()) {
    // Opened and locked now, before any training: a second run appending to the same log fails
    // here (naming the first one's PID), not after its first interval. A run that writes no
    // record still leaves no file (AppendFile::close).
    jsonl_ = std::make_unique<io::AppendFile>(o_.log, false, /*exclusive=*/true);
    jsonl_->open();
  }
  if (!o_.tensorboard.empty()) {
    try {
      tb_ = std::make_unique<logging::TensorBoardWriter>(o_.tensorboard);
    } catch (const std::exception& e) {
      output_failed("--tensorboard", o_.tensorboard, e.what());
    }
  }
}

RunLogs::~RunLogs() = default;

void RunLogs::begin_epoch(int epoch, int64_t micro_per_epoch) {
  if (!o_.quiet && !o_.silent)
    progress_ = std::make_unique<logging::Progress>(str("epoch ", epoch + 1, "/", o_.epochs), micro_per_epoch);
}

void RunLogs::end_epoch() {
  if (progress_) progress_->finish();
}

void RunLogs::step(const Step& s) {
  if (progress_) {
    char extra[64];
    std::snprintf(extra, sizeof extra, "loss %.4f acc %.2f%%", s.loss, s.accuracy);
    progress_->update(s.step_in_epoch, s.step_in_epoch * o_.batch_size, extra);
  }
  json_record(nlohmann::json({{"type", "step"},
                              {"epoch", s.epoch},
                              {"step", s.step},
                              {"loss", s.loss},
                              {"accuracy", s.accuracy},
                              {"lr", s.lr},
                              {"samples_per_s", s.samples_per_s}})
                  .dump());
  scalar("train/loss", s.loss, s.step);
  scalar("train/accuracy", s.accuracy, s.step);
  scalar("train/lr", s.lr, s.step);
  scalar("train/samples_per_s", s.samples_per_s, s.step);
}

void RunLogs::epoch(const EpochResult& er) {
  if (!o_.silent)
    std::printf(
        "epoch %d/%d  train loss %.4f  train acc %.2f%%  val acc %s  test acc %.2f%%  %.1f s  "
        "%.0f samples/s  lr %.3g\n",
        er.epoch, o_.epochs, er.train_loss, er.train_acc, has_val_ ? fmt_pct(er.val_acc).c_str() : "-", er.test_acc,
        er.seconds, er.samples_per_s, er.lr);
  std::fflush(stdout);
  // Without a validation split there is no validation accuracy: null, not a 0 that reads as a measured one.
  json_record(nlohmann::json({{"type", "epoch"},
                              {"epoch", er.epoch},
                              {"train_loss", er.train_loss},
                              {"train_accuracy", er.train_acc},
                              {"val_accuracy", has_val_ ? nlohmann::json(er.val_acc) : nlohmann::json()},
                              {"test_accuracy", er.test_acc},
                              {"seconds", er.seconds},
                              {"samples_per_s", er.samples_per_s},
                              {"lr", er.lr}})
                  .dump());
  scalar("epoch/train_loss", er.train_loss, er.epoch);
  if (has_val_) scalar("epoch/val_accuracy", er.val_acc, er.epoch);
  scalar("epoch/test_accuracy", er.test_acc, er.epoch);
  scalar("epoch/samples_per_s", er.samples_per_s, er.epoch);
}

void RunLogs::summary(const RunResult& r) {
  const char* status = !r.error.empty() ? "diverged" : r.interrupted_by != 0 ? "interrupted" : "completed";
  json_record(nlohmann::json({{"type", "summary"},
                              {"status", status},
                              {"epochs", r.epochs.size()},
                              {"steps", r.steps},
                              {"test_accuracy", r.final_test.accuracy},
                              {"best_test_accuracy", r.best_test_acc},
                              {"train_seconds", r.train_seconds},
                              {"total_seconds", r.total_seconds},
                              {"samples_per_s", r.samples_per_s},
                              {"startup_seconds", r.startup_seconds},
                              {"warmup_seconds", r.warmup_seconds},
                              {"timed_seconds", r.timed_seconds},
                              {"timed_samples_per_s", r.timed_samples_per_s}})
                  .dump());
  if (jsonl_) {
    try {
      jsonl_->close();
    } catch (const std::exception& e) {
      output_failed("--log", o_.log, e.what());
    }
    jsonl_.reset();
  }
}

void RunLogs::json_record(const std::string& line) {
  if (!jsonl_) return;
  try {
    jsonl_->append(line + "\n");
  } catch (const std::exception& e) {
    output_failed("--log", o_.log, e.what());
    jsonl_.reset();
  }
}

void RunLogs::scalar(const std::string& tag, double value, int64_t step) {
  if (!tb_) return;
  try {
    tb_->scalar(tag, value, step);
  } catch (const std::exception& e) {
    output_failed("--tensorboard", o_.tensorboard, e.what());
    tb_.reset();
  }
}

}  // namespace mnist
