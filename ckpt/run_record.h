// What a training run records about itself in its checkpoints ("run." metadata, through
// TrainingCheckpoint::info) and the check a resume makes against it.
//
// A resumed run continues the saved optimizer state and schedule, so a setting that would change
// them cannot be honoured (Note [checkpoints mean what they say] in training_checkpoint.h): the
// program lists its settings, each with the flag that sets it and why a resume must keep it, and
// check_resume names every one whose saved value differs, with both values, and the flags that
// would resume (a user fixing one difference at a time would otherwise need a run per difference).
#pragma once

#include <string>
#include <vector>

#include "io/state_dict.h"

namespace ember {

struct RunSetting {
  std::string key;       // the metadata key, without "run." ("batch_size")
  std::string flag;      // the flag, or what the value is ("--batch-size", "--data: the labels' checksum")
  std::string why;       // why a resume must keep it
  std::string value;     // this run's value, as recorded (exact text)
  bool numeric = false;  // compared as numbers and shown with %g (the text keeps every digit)
  bool derived = false;  // follows from the others: named only when no other setting differs
  bool recorded = true;  // written into checkpoints (else only compared when the checkpoint has it)
  bool compared = true;  // false: a fact for other readers (--eval-only), not a condition of resuming
};

class RunRecord {
 public:
  RunRecord& add(RunSetting s);
  // The recorded settings as metadata (key -> value).
  Metadata metadata() const;
  // Throws naming every setting whose value in `saved` (a checkpoint's "run." metadata, without
  // the prefix) differs from this run's; `checkpoint` names the file in the message. Settings the
  // checkpoint does not have (an older version, or one not recorded for that run) are not compared.
  void check_resume(const Metadata& saved, const std::string& checkpoint) const;

 private:
  std::vector<RunSetting> settings_;
};

}  // namespace ember
