#include "apps/ember_tune/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "logging/svg_plot.h"

namespace ember::tune {

namespace {

const TrialRecord* best_trial(const StudyFile& s) {
  const TrialRecord* best = nullptr;
  for (const TrialRecord& t : s.trials())
    if (t.state == "complete" && (!best || as_loss(s.config(), *t.value) < as_loss(s.config(), *best->value)))
      best = &t;
  return best;
}

std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+") ==
                        std::string::npos)
    return a;
  std::string q = "'";
  for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The objective's axis label with its unit.
std::string objective_label(const std::string& objective) {
  if (objective.rfind("time_to:", 0) == 0) return "wall time to " + objective.substr(8) + "% (s)";
  if (objective.find("accuracy") != std::string::npos) return objective + " (%)";
  if (objective.find("seconds") != std::string::npos || objective.find("time") != std::string::npos)
    return objective + " (s)";
  return objective;
}

}  // namespace

std::string trials_table(const StudyFile& study) {
  const StudyConfig& c = study.config();
  std::ostringstream os;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%6s  %-8s  %12s  %6s  %8s  ", "trial", "state", c.objective.c_str(), "epochs",
                "seconds");
  os << buf;
  for (const Param& p : c.space.params) os << p.name << "  ";
  os << "\n";
  std::vector<const TrialRecord*> rows;
  for (const TrialRecord& t : study.trials()) rows.push_back(&t);
  std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->number < b->number; });
  const TrialRecord* best = best_trial(study);
  for (const TrialRecord* t : rows) {
    std::snprintf(buf, sizeof buf, "%5llu%s  %-8s  %12s  %3d/%-2d  %8.1f  ", static_cast<unsigned long long>(t->number),
                  t == best ? "*" : " ", t->state.c_str(), t->value ? str(*t->value).c_str() : "-", t->epochs_run,
                  t->epochs_planned, t->duration_s);
    os << buf;
    const std::vector<double> v = c.space.decode(t->u);
    for (size_t i = 0; i < v.size(); ++i) os << c.space.value_text(i, v[i]) << "  ";
    if (!t->error.empty()) os << " (" << t->error << ")";
    os << "\n";
  }
  return os.str();
}

std::string best_command(const StudyFile& study, const std::string& mnist_train) {
  const TrialRecord* best = best_trial(study);
  if (!best) return "";
  std::string cmd = shell_quote(mnist_train);
  for (const std::string& a : trial_args(study.config(), best->u)) {
    cmd += ' ';  // not " " + ...: GCC 12's -Wrestrict misfires on that (GCC bug 105651)
    cmd += shell_quote(a);
  }
  return cmd;
}

std::string pruning_summary(const StudyFile& study) {
  int pruned = 0;
  long planned = 0, saved = 0;
  for (const TrialRecord& t : study.trials()) {
    planned += t.epochs_planned;
    if (t.state == "pruned") {
      ++pruned;
      saved += t.epochs_planned - t.epochs_run;
    }
  }
  if (pruned == 0) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "pruned %d of %zu trials: %ld of %ld planned epochs not run (%.0f %%)", pruned,
                study.trials().size(), saved, planned,
                planned ? 100.0 * static_cast<double>(saved) / static_cast<double>(planned) : 0.0);
  return buf;
}

void write_study_plots(const StudyFile& study, const std::string& prefix) {
  const StudyConfig& c = study.config();
  std::vector<const TrialRecord*> rows;
  for (const TrialRecord& t : study.trials()) rows.push_back(&t);
  std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->number < b->number; });
  // "best so far" holds until a trial beats it: steps, not diagonals between trials
  logging::Series by_trial{"", {}, {}, logging::Series::Style::steps},
      by_time{"", {}, {}, logging::Series::Style::steps};
  double best = std::numeric_limits<double>::quiet_NaN();
  for (const TrialRecord* t : rows) {
    if (t->state == "complete" &&
        (std::isnan(best) || as_loss(study.config(), *t->value) < as_loss(study.config(), best)))
      best = *t->value;
    by_trial.x.push_back(static_cast<double>(t->number + 1));
    by_trial.y.push_back(best);
  }
  std::vector<const TrialRecord*> by_end = rows;
  std::sort(by_end.begin(), by_end.end(), [](auto* a, auto* b) { return a->elapsed_s < b->elapsed_s; });
  best = std::numeric_limits<double>::quiet_NaN();
  for (const TrialRecord* t : by_end) {
    if (t->state == "complete" &&
        (std::isnan(best) || as_loss(study.config(), *t->value) < as_loss(study.config(), best)))
      best = *t->value;
    by_time.x.push_back(t->elapsed_s);
    by_time.y.push_back(best);
  }
  const std::string y_label = objective_label(c.objective);
  logging::write_svg(prefix + "-history.svg",
                     {{"best " + c.objective + " so far, by trial", "trial", y_label, {by_trial}},
                      {"best " + c.objective + " so far, by wall time", "study wall time (s)", y_label, {by_time}}});

  // one chart per parameter: the complete trials as points (a line through trials sorted by one
  // parameter would suggest a curve that is not there); log parameters on a log axis
  std::vector<logging::Chart> slices;
  for (size_t i = 0; i < c.space.size(); ++i) {
    const Param& p = c.space.params[i];
    logging::Chart ch{c.objective + " against " + p.name, p.name, y_label, {}};
    ch.log_x = p.type == ParamType::log_uniform;
    if (p.type == ParamType::categorical) ch.x_categories = p.choices;
    logging::Series trials{"", {}, {}, logging::Series::Style::points};
    for (const TrialRecord* t : rows) {
      if (t->state != "complete") continue;
      trials.x.push_back(c.space.decode(t->u)[i]);
      trials.y.push_back(*t->value);
    }
    ch.series.push_back(trials);
    slices.push_back(ch);
  }
  io::write_file_atomic(prefix + "-slices.svg", logging::render_svg(slices, 720, 260));
}

}  // namespace ember::tune
