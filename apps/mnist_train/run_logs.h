// The run's records: the progress bar, the epoch lines on stdout, the JSONL file (--log) and
// TensorBoard (--tensorboard). step() writes one log interval, epoch() one finished epoch,
// summary() the last record. A file output that fails is reported once and written no more
// (Note [side outputs] in outputs.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "apps/mnist_train/options.h"
#include "apps/mnist_train/run_result.h"

namespace ember::io {
class AppendFile;
}
namespace ember::logging {
class TensorBoardWriter;
class Progress;
}  // namespace ember::logging

namespace mnist {

class RunLogs {
 public:
  struct Step {     // one log interval
    int epoch = 0;  // 1-based
    int64_t step = 0, step_in_epoch = 0;
    double loss = 0, accuracy = 0, lr = 0, samples_per_s = 0;
  };

  RunLogs(const Options& o, bool has_val);
  ~RunLogs();

  void begin_epoch(int epoch, int64_t micro_per_epoch);
  void end_epoch();
  void step(const Step& s);
  void epoch(const EpochResult& er);
  // The last JSONL record; closes the file (a failure to flush it is reported like any other).
  void summary(const RunResult& r);

 private:
  void json_record(const std::string& line);
  void scalar(const std::string& tag, double value, int64_t step);

  const Options& o_;
  const bool has_val_;  // the epoch line prints "-" for the validation accuracy without a split
  std::unique_ptr<ember::io::AppendFile> jsonl_;
  std::unique_ptr<ember::logging::TensorBoardWriter> tb_;
  std::unique_ptr<ember::logging::Progress> progress_;
};

}  // namespace mnist
