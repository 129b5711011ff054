#include "logging/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ember::logging {

namespace {

std::string esc(const std::string& s) {
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

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

const char* kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

}  // namespace

std::string render_svg(const std::vector<Chart>& charts, int width, int chart_height) {
  std::ostringstream os;
  int total_h = static_cast<int>(charts.size()) * chart_height;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << total_h
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t ci = 0; ci < charts.size(); ++ci) {
    const Chart& c = charts[ci];
    const int top = static_cast<int>(ci) * chart_height;
    const double l = 60, r = width - 150, t = top + 30, b = top + chart_height - 40;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (const Series& s : c.series)
      for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
        xmin = std::min(xmin, s.x[i]);
        xmax = std::max(xmax, s.x[i]);
        ymin = std::min(ymin, s.y[i]);
        ymax = std::max(ymax, s.y[i]);
      }
    if (!std::isfinite(xmin)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) ymax = ymin + 1;
    double pad = 0.05 * (ymax - ymin);
    ymin -= pad;
    ymax += pad;
    auto X = [&](double v) { return l + (v - xmin) / (xmax - xmin) * (r - l); };
    auto Y = [&](double v) { return b - (v - ymin) / (ymax - ymin) * (b - t); };
    os << "<text x=\"" << l << "\" y=\"" << top + 18 << "\" font-weight=\"bold\">" << esc(c.title) << "</text>\n";
    os << "<rect x=\"" << l << "\" y=\"" << t << "\" width=\"" << r - l << "\" height=\"" << b - t
       << "\" fill=\"none\" stroke=\"#888\"/>\n";
    for (int k = 0; k <= 4; ++k) {
      double yv = ymin + (ymax - ymin) * k / 4, xv = xmin + (xmax - xmin) * k / 4;
      os << "<line x1=\"" << l << "\" x2=\"" << r << "\" y1=\"" << Y(yv) << "\" y2=\"" << Y(yv)
         << "\" stroke=\"#eee\"/>\n";
      os << "<text x=\"" << l - 5 << "\" y=\"" << Y(yv) + 4 << "\" text-anchor=\"end\">" << num(yv) << "</text>\n";
      os << "<text x=\"" << X(xv) << "\" y=\"" << b + 15 << "\" text-anchor=\"middle\">" << num(xv) << "</text>\n";
    }
    os << "<text x=\"" << (l + r) / 2 << "\" y=\"" << b + 32 << "\" text-anchor=\"middle\">" << esc(c.x_label)
       << "</text>\n";
    os << "<text x=\"15\" y=\"" << (t + b) / 2 << "\" transform=\"rotate(-90 15 " << (t + b) / 2
       << ")\" text-anchor=\"middle\">" << esc(c.y_label) << "</text>\n";
    for (size_t si = 0; si < c.series.size(); ++si) {
      const Series& s = c.series[si];
      const char* color = kColors[si % 6];
      os << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
      for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) os << num(X(s.x[i])) << "," << num(Y(s.y[i])) << " ";
      os << "\"/>\n";
      os << "<text x=\"" << r + 10 << "\" y=\"" << t + 15 + 16 * static_cast<double>(si) << "\" fill=\"" << color << "\">"
         << esc(s.name) << "</text>\n";
    }
  }
  os << "</svg>\n";
  return os.str();
}

void write_svg(const std::string& path, const std::vector<Chart>& charts) {
  io::write_file_atomic(path, render_svg(charts));
}

}  // namespace ember::logging
