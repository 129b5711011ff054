#include "optim/schedule_ahead.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace ember::optim {

void stage_schedule_rows(Optimizer& opt, LRScheduler* sched, int64_t rows) {
  for (int64_t j = 0; j < rows; ++j) {
    if (j > 0 && sched != nullptr) sched->step();
    opt.stage_hyper_row(j);
  }
  opt.upload_hyper_rows();
}

ScheduleAhead::ScheduleAhead(LRScheduler& sched, int64_t rows) : sched_(sched), rows_(rows) {
  EMBER_CHECK(rows >= 1, "ScheduleAhead: rows must be >= 1, got ", rows);
  sched_.optimizer().make_hyper_rows(rows);
}

// stage_schedule_rows, then the scheduler and the options as they were.
void ScheduleAhead::stage(int64_t rows) {
  Optimizer& opt = sched_.optimizer();
  const StateDict saved = sched_.state_dict();
  std::vector<std::map<std::string, double>> options;
  for (const ParamGroup& g : opt.param_groups()) options.push_back(g.options().to_map());
  auto restore = [&] {
    for (size_t g = 0; g < options.size(); ++g) opt.param_groups()[g].options().from_map(options[g]);
    sched_.load_state_dict(saved);
  };
  try {
    stage_schedule_rows(opt, &sched_, rows);
  } catch (...) {
    restore();  // a scheduler that refused a step leaves nothing moved
    throw;
  }
  restore();
  staged_ = rows;
  next_ = 0;
  ++stagings_;
}

void ScheduleAhead::before_step(int64_t steps_left) {
  EMBER_CHECK(steps_left >= 1, "ScheduleAhead::before_step: steps_left must be >= 1 (this step), got ", steps_left);
  Optimizer& opt = sched_.optimizer();
  if (!active_) return;
  if (next_ < staged_ && opt.use_hyper_row_if_current(next_)) {
    ++next_;
    ++rows_read_;
    return;
  }
  // A step right after a staging that misses its row: something other than the scheduler's steps
  // moves the options every step (or the scheduler's state does not round-trip). Staging would
  // only add work: the steps upload their own values from here on.
  if (next_ == 1 && staged_ > 1) {
    active_ = false;
    return;
  }
  stage(std::min(rows_, steps_left));
  if (!opt.use_hyper_row_if_current(0)) {
    active_ = false;
    return;
  }
  next_ = 1;
  ++rows_read_;
}

void ScheduleAhead::finish() { sched_.optimizer().use_hyper_row(-1); }

}  // namespace ember::optim
