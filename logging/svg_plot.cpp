#include "logging/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ember::logging {

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

namespace {

// SVG coordinates: two decimals are a hundredth of a pixel
std::string px(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  std::string s = b;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// A tick value with the decimals its step needs (0.05 -> 2), plain between 1e-3 and 1e6, else
// "2e-5" / "3e7" style.
std::string tick_label(double v, double step) {
  char b[48];
  if (std::abs(v) < step * 1e-6) return "0";  // also -0 and rounding dust at zero
  const double mag = std::max(std::abs(v), step);
  if (mag >= 1e6 || step < 1e-3) {  // 2e-4, 1.5e7: the mantissa's digits that the step needs, no trailing zeros
    const int e = static_cast<int>(std::floor(std::log10(std::abs(v)) + 1e-9));
    const double m = v / std::pow(10.0, e);
    const int digits = std::max(0, static_cast<int>(std::ceil(-std::log10(step / std::pow(10.0, e)) - 1e-9)));
    std::snprintf(b, sizeof b, "%.*f", std::min(digits, 6), m);
    std::string mant = b;
    if (mant.find('.') != std::string::npos) {
      while (mant.back() == '0') mant.pop_back();
      if (mant.back() == '.') mant.pop_back();
    }
    return mant + "e" + std::to_string(e);
  }
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// m x 10^e on a log axis: plain (0.001, 20) when the whole axis is within 1e-3 .. 1e5, else every
// label as "2e-4" (one style per axis; 1 stays "1").
std::string power_label(int m, int e, bool plain) {
  char b[32];
  if (plain) std::snprintf(b, sizeof b, "%.*f", std::max(0, -e), m * std::pow(10.0, e));
  else if (e == 0) std::snprintf(b, sizeof b, "%d", m);
  else std::snprintf(b, sizeof b, "%de%d", m, e);
  return b;
}

const char* kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

}  // namespace

Ticks linear_ticks(double lo, double hi, int target) {
  Ticks t;
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {  // one value: a unit around it
    const double w = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= w;
    hi += w;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * p;
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw * 0.999) {
      step = m * p;
      break;
    }
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  t.lo = first * step;
  t.hi = last * step;
  for (double k = first; k <= last + 0.5; k += 1) {
    t.values.push_back(k * step);
    t.labels.push_back(tick_label(k * step, step));
  }
  return t;
}

Ticks log_ticks(double lo, double hi) {
  Ticks t;
  if (!(lo > 0) || !(hi > 0)) lo = 1, hi = 10;
  if (hi < lo) std::swap(lo, hi);
  int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9)), e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  if (e1 == e0) ++e1;
  const int span = e1 - e0, every = span > 8 ? 2 : 1;
  const bool plain = e0 >= -3 && e1 <= 5;
  t.lo = std::pow(10.0, e0);
  t.hi = std::pow(10.0, e1);
  for (int e = e0; e <= e1; ++e) {
    for (int m : {1, 2, 5}) {
      if (m != 1 && (span > 2 || e == e1)) continue;
      if (m == 1 && (e - e0) % every != 0) continue;
      t.values.push_back(m * std::pow(10.0, e));
      t.labels.push_back(power_label(m, e, plain));
    }
  }
  return t;
}

namespace {

// Whether a point can be drawn: finite, and positive on a log axis.
bool usable(const Chart& c, double x, double y) {
  return std::isfinite(x) && std::isfinite(y) && (!c.log_x || x > 0) && (!c.log_y || y > 0);
}

// The bounding box of the chart's usable points (a unit box, or a decade on a log axis, when there are none).
struct Range {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
};

Range data_range(const Chart& c) {
  Range d;
  for (const Series& s : c.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!usable(c, s.x[i], s.y[i])) continue;
      d.xmin = std::min(d.xmin, s.x[i]);
      d.xmax = std::max(d.xmax, s.x[i]);
      d.ymin = std::min(d.ymin, s.y[i]);
      d.ymax = std::max(d.ymax, s.y[i]);
    }
  if (!std::isfinite(d.xmin))
    d.xmin = c.log_x ? 1 : 0, d.xmax = c.log_x ? 10 : 1, d.ymin = c.log_y ? 1 : 0, d.ymax = c.log_y ? 10 : 1;
  return d;
}

// The x axis: one tick per category, else ticks over the data (whole numbers when every x is one).
Ticks x_ticks(const Chart& c, const Range& d) {
  Ticks xt;
  if (!c.x_categories.empty()) {
    xt.lo = -0.5;
    xt.hi = static_cast<double>(c.x_categories.size()) - 0.5;
    for (size_t k = 0; k < c.x_categories.size(); ++k) {
      xt.values.push_back(static_cast<double>(k));
      xt.labels.push_back(c.x_categories[k]);
    }
    return xt;
  }
  xt = c.log_x ? log_ticks(d.xmin, d.xmax) : linear_ticks(d.xmin, d.xmax, 6);
  // x values that are all whole numbers (epochs, trials) get whole-number ticks
  bool whole = !c.log_x;
  for (const Series& s : c.series)
    for (double v : s.x) whole = whole && (!std::isfinite(v) || v == std::floor(v));
  if (whole && xt.values.size() > 1 && xt.values[1] - xt.values[0] < 1)
    xt = linear_ticks(d.xmin, d.xmax, static_cast<int>(d.xmax - d.xmin));
  return xt;
}

// A chart's plot area in pixels (left, right, top, bottom) and its axes: X and Y map data to pixels.
struct Frame {
  double l, r, t, b;
  Ticks xt, yt;
  bool log_x, log_y;
  double fx(double v) const { return log_x ? std::log10(v) : v; }
  double fy(double v) const { return log_y ? std::log10(v) : v; }
  double X(double v) const { return l + (fx(v) - fx(xt.lo)) / (fx(xt.hi) - fx(xt.lo)) * (r - l); }
  double Y(double v) const { return b - (fy(v) - fy(yt.lo)) / (fy(yt.hi) - fy(yt.lo)) * (b - t); }
};

// The title, the grid lines and tick labels, the frame and the axis labels.
void draw_axes(std::ostringstream& os, const Chart& c, const Frame& f, int top) {
  const double l = f.l, r = f.r, t = f.t, b = f.b;
  os << "<text x=\"" << l << "\" y=\"" << top + 18 << "\" font-weight=\"bold\">" << xml_escape(c.title) << "</text>\n";
  for (size_t k = 0; k < f.yt.values.size(); ++k) {
    const std::string y = px(f.Y(f.yt.values[k]));
    os << "<line x1=\"" << l << "\" x2=\"" << px(r) << "\" y1=\"" << y << "\" y2=\"" << y << "\" stroke=\"#eee\"/>\n";
    os << "<text x=\"" << l - 6 << "\" y=\"" << px(f.Y(f.yt.values[k]) + 4) << "\" text-anchor=\"end\">"
       << xml_escape(f.yt.labels[k]) << "</text>\n";
  }
  for (size_t k = 0; k < f.xt.values.size(); ++k) {
    const std::string x = px(f.X(f.xt.values[k]));
    os << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << px(b) << "\" y2=\"" << px(b + 4)
       << "\" stroke=\"#888\"/>\n";
    os << "<text x=\"" << x << "\" y=\"" << px(b + 17) << "\" text-anchor=\"middle\">" << xml_escape(f.xt.labels[k])
       << "</text>\n";
  }
  os << "<rect x=\"" << l << "\" y=\"" << px(t) << "\" width=\"" << px(r - l) << "\" height=\"" << px(b - t)
     << "\" fill=\"none\" stroke=\"#888\"/>\n";
  os << "<text x=\"" << px((l + r) / 2) << "\" y=\"" << px(b + 36) << "\" text-anchor=\"middle\">"
     << xml_escape(c.x_label) << "</text>\n";
  os << "<text x=\"15\" y=\"" << px((t + b) / 2) << "\" transform=\"rotate(-90 15 " << px((t + b) / 2)
     << ")\" text-anchor=\"middle\">" << xml_escape(c.y_label) << "</text>\n";
}

// Each series as points, a line or steps, in its colour, with its name in the legend.
void draw_series(std::ostringstream& os, const Chart& c, const Frame& f, bool legend) {
  for (size_t si = 0; si < c.series.size(); ++si) {
    const Series& s = c.series[si];
    const char* color = kColors[si % 6];
    std::vector<std::pair<double, double>> pts;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (usable(c, s.x[i], s.y[i])) pts.emplace_back(f.X(s.x[i]), f.Y(s.y[i]));
    if (s.style == Series::Style::points) {
      for (const auto& [x, y] : pts)
        os << "<circle cx=\"" << px(x) << "\" cy=\"" << px(y) << "\" r=\"4\" fill=\"" << color
           << "\" fill-opacity=\"0.7\"/>\n";
    } else {
      os << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
      for (size_t i = 0; i < pts.size(); ++i) {
        if (s.style == Series::Style::steps && i > 0) os << px(pts[i].first) << "," << px(pts[i - 1].second) << " ";
        os << px(pts[i].first) << "," << px(pts[i].second) << " ";
      }
      os << "\"/>\n";
    }
    if (legend)
      os << "<text x=\"" << px(f.r + 10) << "\" y=\"" << px(f.t + 15 + 16 * static_cast<double>(si)) << "\" fill=\""
         << color << "\">" << xml_escape(s.name) << "</text>\n";
  }
}

}  // namespace

std::string render_svg(const std::vector<Chart>& charts, int width, int chart_height) {
  std::ostringstream os;
  int total_h = static_cast<int>(charts.size()) * chart_height;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << total_h
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t ci = 0; ci < charts.size(); ++ci) {
    const Chart& c = charts[ci];
    const int top = static_cast<int>(ci) * chart_height;
    const bool legend = c.series.size() > 1 || (!c.series.empty() && !c.series[0].name.empty());
    const Range d = data_range(c);
    // left, right, top and bottom of the plot area: room for the y tick labels, the legend, the title, the x labels
    const Frame f{.l = 70,
                  .r = static_cast<double>(width - (legend ? 160 : 25)),
                  .t = static_cast<double>(top + 30),
                  .b = static_cast<double>(top + chart_height - 45),
                  .xt = x_ticks(c, d),
                  .yt = c.log_y ? log_ticks(d.ymin, d.ymax) : linear_ticks(d.ymin, d.ymax),
                  .log_x = c.log_x,
                  .log_y = c.log_y};
    draw_axes(os, c, f, top);
    draw_series(os, c, f, legend);
  }
  os << "</svg>\n";
  return os.str();
}

void write_svg(const std::string& path, const std::vector<Chart>& charts) {
  io::write_file_atomic(path, render_svg(charts));
}

}  // namespace ember::logging
