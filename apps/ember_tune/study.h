// A study's file: append-only JSONL, one header record, then one record per finished trial.
//
//   {"type":"header","format":"ember_tune-study","version":1,"config":{...}}
//   {"type":"trial","number":0,"state":"complete","params":{...},"u":[...],"value":88.1,...}
//
// Each record goes out in one write() followed by fsync(), so after a kill or a power cut the file holds every
// finished trial and at most one torn last line (a record without its newline). --resume reads the header (a file
// without one is refused: foreign), refuses a corrupt record anywhere but at the very end, drops a torn last line
// (that trial runs again; it never finished as far as the study is concerned) and continues with trial numbers after
// the highest recorded. Trials that were running at the kill have no record, so they run again, with the same number
// and therefore the same point (Note in apps/ember_tune/sampler.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/ember_tune/sampler.h"
#include "apps/ember_tune/space.h"

namespace ember::tune {

// What a study is: everything a resumed study must agree on.
struct StudyConfig {
  Space space;
  std::string objective = "val_accuracy";  // a metric mnist_train reports, or time_to:ACC
  bool maximize = true;
  SamplerOptions sampler;
  std::string pruner = "none";          // none, median, asha
  std::vector<std::string> train_args;  // passed to every trial before the parameters

  nlohmann::json to_json() const;
  static StudyConfig from_json(const nlohmann::json& j);  // throws ember::Error naming the problem
};

struct TrialRecord {
  uint64_t number = 0;
  std::string state;  // complete, pruned, failed
  std::vector<double> u;
  std::optional<double> value;       // the objective (complete), the last epoch's (pruned)
  std::vector<double> intermediate;  // the per-epoch metric the pruner saw
  int epochs_run = 0, epochs_planned = 0;
  uint64_t seed = 0;
  double duration_s = 0;  // of this trial
  double elapsed_s = 0;   // study wall time when it finished (summed over resumed sessions)
  std::string error;      // why it failed
  nlohmann::json params;  // decoded, for people reading the file

  nlohmann::json to_json() const;
  static TrialRecord from_json(const nlohmann::json& j);
};

class StudyFile {
 public:
  // A new study: refuses an existing non-empty file (--resume continues one), writes the header.
  static StudyFile create(const std::string& path, const StudyConfig& config);
  // An existing study, checked as described above; nothing is written until append().
  static StudyFile open(const std::string& path);

  const StudyConfig& config() const { return config_; }
  const std::vector<TrialRecord>& trials() const { return trials_; }
  const std::string& path() const { return path_; }
  // True when open() found a torn last line; the first append() cuts it off.
  bool had_torn_line() const { return tail_ == Tail::torn; }

  void append(const TrialRecord& t);  // write + fsync; throws ember::Error on failure

 private:
  void write_line(const std::string& line);

  std::string path_;
  StudyConfig config_;
  std::vector<TrialRecord> trials_;
  // The end of the file as open() found it: clean, a torn record to cut off at valid_bytes_, or a whole last record
  // that only lacks its newline.
  enum class Tail { clean, torn, missing_newline } tail_ = Tail::clean;
  uint64_t valid_bytes_ = 0;
};

}  // namespace ember::tune
