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

// Parameter names and choices come from the user: text in the SVG is escaped.
std::string xml(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

// A scatter chart, hand-written SVG: logging/svg_plot.h draws lines, and a line through trials sorted by one
// parameter suggests a curve that is not there.
std::string scatter_svg(const std::vector<std::string>& titles, const std::vector<std::string>& x_labels,
                        const std::vector<std::vector<double>>& xs, const std::vector<std::vector<double>>& ys,
                        const std::vector<std::vector<std::string>>& ticks, const std::string& y_label) {
  const int w = 720, h = 260, ml = 70, mr = 20, mt = 30, mb = 45;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h * titles.size()
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t c = 0; c < titles.size(); ++c) {
    const int y0 = static_cast<int>(c) * h;
    double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
    for (size_t i = 0; i < xs[c].size(); ++i) {
      if (!std::isfinite(xs[c][i]) || !std::isfinite(ys[c][i])) continue;
      xlo = std::min(xlo, xs[c][i]);
      xhi = std::max(xhi, xs[c][i]);
      ylo = std::min(ylo, ys[c][i]);
      yhi = std::max(yhi, ys[c][i]);
    }
    if (!std::isfinite(xlo)) xlo = 0, xhi = 1, ylo = 0, yhi = 1;
    if (!ticks[c].empty()) xlo = -0.5, xhi = static_cast<double>(ticks[c].size()) - 0.5;
    if (xhi - xlo < 1e-12) xlo -= 0.5, xhi += 0.5;
    if (yhi - ylo < 1e-12) ylo -= 0.5, yhi += 0.5;
    const double pw = w - ml - mr, ph = h - mt - mb;
    auto px = [&](double x) { return ml + (x - xlo) / (xhi - xlo) * pw; };
    auto py = [&](double y) { return y0 + mt + (1 - (y - ylo) / (yhi - ylo)) * ph; };
    os << "<text x=\"" << w / 2 << "\" y=\"" << y0 + 18 << "\" text-anchor=\"middle\" font-weight=\"bold\">"
       << xml(titles[c]) << "</text>\n<rect x=\"" << ml << "\" y=\"" << y0 + mt << "\" width=\"" << pw << "\" height=\""
       << ph << "\" fill=\"none\" stroke=\"#888\"/>\n";
    char buf[64];
    for (int k = 0; k <= 4; ++k) {
      const double yv = ylo + (yhi - ylo) * k / 4;
      std::snprintf(buf, sizeof buf, "%.4g", yv);
      os << "<text x=\"" << ml - 5 << "\" y=\"" << py(yv) + 4 << "\" text-anchor=\"end\">" << buf << "</text>\n";
    }
    if (!ticks[c].empty()) {
      for (size_t k = 0; k < ticks[c].size(); ++k)
        os << "<text x=\"" << px(static_cast<double>(k)) << "\" y=\"" << y0 + mt + ph + 16
           << "\" text-anchor=\"middle\">" << xml(ticks[c][k]) << "</text>\n";
    } else {
      for (int k = 0; k <= 4; ++k) {
        const double xv = xlo + (xhi - xlo) * k / 4;
        std::snprintf(buf, sizeof buf, "%.4g", xv);
        os << "<text x=\"" << px(xv) << "\" y=\"" << y0 + mt + ph + 16 << "\" text-anchor=\"middle\">" << buf
           << "</text>\n";
      }
    }
    os << "<text x=\"" << ml + pw / 2 << "\" y=\"" << y0 + h - 8 << "\" text-anchor=\"middle\">" << xml(x_labels[c])
       << "</text>\n<text x=\"14\" y=\"" << y0 + mt + ph / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
       << y0 + mt + ph / 2 << ")\">" << xml(y_label) << "</text>\n";
    for (size_t i = 0; i < xs[c].size(); ++i)
      if (std::isfinite(xs[c][i]) && std::isfinite(ys[c][i]))
        os << "<circle cx=\"" << px(xs[c][i]) << "\" cy=\"" << py(ys[c][i])
           << "\" r=\"4\" fill=\"#1f77b4\" fill-opacity=\"0.7\"/>\n";
  }
  os << "</svg>\n";
  return os.str();
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
  for (const std::string& a : trial_args(study.config(), best->u)) cmd += " " + shell_quote(a);
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
  logging::Series by_trial{"best so far", {}, {}}, by_time{"best so far", {}, {}};
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
  logging::write_svg(prefix + "-history.svg",
                     {{"best " + c.objective + " against trials", "trial", c.objective, {by_trial}},
                      {"best " + c.objective + " against wall time", "study wall time (s)", c.objective, {by_time}}});

  std::vector<std::string> titles, labels;
  std::vector<std::vector<double>> xs, ys;
  std::vector<std::vector<std::string>> ticks;
  for (size_t i = 0; i < c.space.size(); ++i) {
    const Param& p = c.space.params[i];
    titles.push_back(c.objective + " against " + p.name);
    labels.push_back(p.type == ParamType::log_uniform ? "log10 " + p.name : p.name);
    ticks.push_back(p.type == ParamType::categorical ? p.choices : std::vector<std::string>{});
    std::vector<double> x, y;
    for (const TrialRecord* t : rows) {
      if (t->state != "complete") continue;
      const double v = c.space.decode(t->u)[i];
      x.push_back(p.type == ParamType::log_uniform ? std::log10(v) : v);
      y.push_back(*t->value);
    }
    xs.push_back(x);
    ys.push_back(y);
  }
  io::write_file_atomic(prefix + "-slices.svg", scatter_svg(titles, labels, xs, ys, ticks, c.objective));
}

}  // namespace ember::tune
