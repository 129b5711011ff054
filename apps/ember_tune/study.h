// A study's file: append-only JSONL, one header record, then one record per finished trial, and a plan record where a
// resume changed the planned trial count.
//
//   {"type":"header","format":"ember_tune-study","version":2,"config":{...},"trials":20}
//   {"type":"trial","number":0,"state":"complete","params":{...},"u":[...],"value":88.1,...}
//   {"type":"plan","trials":30}
//
// Each record goes out in one write() followed by fsync(), so after a kill or a power cut the file holds every
// finished trial and at most one torn last line (a record without its newline). --resume reads the header (a file
// without one is refused: foreign), refuses a corrupt record anywhere but at the very end, drops a torn last line
// (that trial runs again; it never finished as far as the study is concerned) and continues with trial numbers after
// the highest recorded. Trials that were running at the kill have no record, so they run again, with the same number
// and therefore the same point (Note in apps/ember_tune/sampler.h). Every record is checked for sense as it is read
// (see StudyFile::open); version 1 files (no planned count) are read too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/ember_tune/sampler.h"
#include "apps/ember_tune/space.h"

namespace ember::tune {

// The most trials a study can plan (--trials); trial numbers stay below it.
constexpr int kMaxTrials = 100000;

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
  // Throws unless `path` is free for a new study: an existing non-empty file is refused (--resume continues one).
  static void check_new(const std::string& path);
  // A new study of `trials` planned trials: check_new(), then the header.
  static StudyFile create(const std::string& path, const StudyConfig& config, int trials);
  // An existing study, checked as described above; nothing is written until append() or plan(). A record that makes
  // no sense (a trial number beyond the plan, an unknown state, a complete trial without a finite value, a failed
  // one with a value or without a reason, a point outside the unit cube, a seed not the study's, a negative time, an
  // accuracy outside [0, 100], params that are not its point's) is an error naming the file and the line.
  static StudyFile open(const std::string& path);

  const StudyConfig& config() const { return config_; }
  const std::vector<TrialRecord>& trials() const { return trials_; }
  const std::string& path() const { return path_; }
  // The trials the study should hold: the header's count, or the last plan record's; 0 for a version 1 file, which
  // did not store it.
  int planned_trials() const { return planned_trials_; }
  // True when open() found a torn last line; the first append() cuts it off.
  bool had_torn_line() const { return tail_ == Tail::torn; }

  void append(const TrialRecord& t);  // write + fsync; throws ember::Error on failure
  void plan(int trials);              // a plan record: --resume --trials N changed the count

 private:
  void append_line(const std::string& line);  // after repairing the end open() found
  void write_line(const std::string& line);

  std::string path_;
  StudyConfig config_;
  int planned_trials_ = 0;
  std::vector<TrialRecord> trials_;
  // The end of the file as open() found it: clean, a torn record to cut off at valid_bytes_, or a whole last record
  // that only lacks its newline.
  enum class Tail { clean, torn, missing_newline } tail_ = Tail::clean;
  uint64_t valid_bytes_ = 0;
};

// Where a study file's lock is: beside it, as STUDY.lock, after resolving symbolic links so that two names of one
// study share one lock. A trial directory's is DIR/ember_tune.lock (inside it: any name of the directory finds it).
std::string study_lock_path(const std::string& study);
std::string trial_dir_lock_path(const std::string& dir);

}  // namespace ember::tune
