// Charts as standalone SVG: training curves (loss and accuracy per step or epoch), ember_tune's
// study history and parameter slices. Axes carry ticks at 1, 2 or 5 x 10^k with as few digits as
// the step needs; a log axis is labelled with the values themselves (1e-4, 0.001, 0.01), not their
// logarithms.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ember::logging {

struct Series {
  // line: straight segments; steps: each value holds until the next x ("best so far");
  // points: markers only (trials of a study, where a line would suggest a curve that is not there)
  enum class Style { line, steps, points };
  Series(std::string name = {}, std::vector<double> x = {}, std::vector<double> y = {}, Style style = Style::line)
      : name(std::move(name)), x(std::move(x)), y(std::move(y)), style(style) {}
  std::string name;
  std::vector<double> x, y;
  Style style;
};

struct Chart {
  Chart(std::string title = {}, std::string x_label = {}, std::string y_label = {}, std::vector<Series> series = {})
      : title(std::move(title)), x_label(std::move(x_label)), y_label(std::move(y_label)), series(std::move(series)) {}
  std::string title, x_label, y_label;  // axis labels name the unit: "accuracy (%)", "wall time (s)"
  std::vector<Series> series;
  bool log_x = false, log_y = false;      // log10 axes (values <= 0 are not drawn)
  std::vector<std::string> x_categories;  // x = 0, 1, ... are these categories (ticks name them)
};

// Ticks of one axis: where (in data units) and what they say, and the axis range they span.
struct Ticks {
  std::vector<double> values;
  std::vector<std::string> labels;
  double lo = 0, hi = 1;
};
// About `target` intervals of 1, 2 or 5 x 10^k covering [lo, hi]; the range snaps outward to them.
Ticks linear_ticks(double lo, double hi, int target = 5);
// lo, hi > 0: the powers of ten covering [lo, hi] (with 2 and 5 between when they span at most two
// decades, every other power when they span more than eight).
Ticks log_ticks(double lo, double hi);

// Text for SVG/XML: <, >, & and " as entities (charts of other layouts, e.g. bench_ops --plot).
std::string xml_escape(const std::string& s);

// One SVG document with the charts stacked vertically. NaN/inf points are skipped.
std::string render_svg(const std::vector<Chart>& charts, int width = 720, int chart_height = 300);
// Writes it atomically (io::AtomicFile: temp file + rename; a device is written through).
void write_svg(const std::string& path, const std::vector<Chart>& charts);

}  // namespace ember::logging
