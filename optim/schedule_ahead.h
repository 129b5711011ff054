// The schedule's next steps uploaded together: eager steps on the GPU without a copy each.
//
//   optim::OneCycleLR sched(opt, c);
//   optim::ScheduleAhead ahead(sched, 64);
//   for (int64_t i = 0; i < total; ++i) {
//     ...;
//     ahead.before_step(total - i);  // the steps left, this one included
//     opt.step();
//     sched.step();
//   }
//   ahead.finish();   // before anything else steps the optimizer
//
// Note [hyperparameter rows ahead]: a schedule that moves lr (and, for OneCycleLR and CyclicLR,
// momentum or beta1) every step makes every eager step upload the optimizer's hyperparameters
// first: one host-to-device copy per group and device, in a step that is otherwise a handful of
// kernels. ScheduleAhead stages the values of the next `rows` steps in the optimizer's row table
// (Note [hyperparameter rows] in optim/optimizer.h) in one upload: it steps the scheduler ahead
// on the host, keeps each step's values as a row, and puts the scheduler's state and the groups'
// options back as they were (state_dict / load_state_dict, to_map / from_map), so the scheduler,
// the logs and a checkpoint see exactly what they saw before. Each step then reads its row only
// if that row equals the values the step would have uploaded
// (Optimizer::use_hyper_row_if_current): anything that moves the options another way (a
// different schedule, an lr set by hand, a resumed run) costs one restaging, never a wrong value.
// When the row right after a staging misses too (the options move some other way every step),
// the steps go back to their own uploads for good (active() is false).
//
// The scheduler must be stepped once after every optimizer step, as before_step() assumes (row j
// holds the values after j scheduler steps), and its state_dict must hold its whole state, as
// every ember scheduler's does (a resumed run continues the schedule exactly). Not for steps
// captured in a CUDA graph: those take their rows from the graph's own staging
// (apps/mnist_train/multi_step.h).
#pragma once

#include <cstdint>

#include "optim/lr_scheduler.h"

namespace ember::optim {

// Rows 0..rows-1 of the optimizer's table (Note [hyperparameter rows] in optim/optimizer.h): the
// options as they are, then after each of the scheduler's next rows - 1 steps (sched may be null:
// every row the same), staged and uploaded in one copy. The scheduler is left rows - 1 steps on:
// mnist_train's K-step graphs, whose replay stands for those steps; ScheduleAhead puts it back.
void stage_schedule_rows(Optimizer& opt, LRScheduler* sched, int64_t rows);

class ScheduleAhead {
 public:
  ScheduleAhead(LRScheduler& sched, int64_t rows);
  // Before each optimizer step: the step reads its row, restaged when used up or out of date.
  // steps_left (>= 1, this step included) bounds the rows staged: OneCycleLR refuses to step past
  // its total_steps, as PyTorch's does.
  void before_step(int64_t steps_left);
  // The optimizer's steps read the single hyperparameter tensor again (row -1).
  void finish();
  // False once the staged values stopped matching the schedule (the steps upload their own).
  bool active() const { return active_; }
  // Steps that read a staged row, and uploads of rows, since construction.
  int64_t rows_read() const { return rows_read_; }
  int64_t stagings() const { return stagings_; }

 private:
  void stage(int64_t rows);

  LRScheduler& sched_;
  int64_t rows_;
  int64_t staged_ = 0;  // rows staged by the last stage()
  int64_t next_ = 0;    // the row the next step reads
  bool active_ = true;
  int64_t rows_read_ = 0, stagings_ = 0;
};

}  // namespace ember::optim
