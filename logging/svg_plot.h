// Line charts as standalone SVG (training curves: loss and accuracy per step or epoch).
#pragma once

#include <string>
#include <vector>

namespace ember::logging {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
};

// One SVG document with the charts stacked vertically. NaN/inf points are skipped.
std::string render_svg(const std::vector<Chart>& charts, int width = 720, int chart_height = 300);
// Writes it atomically (io::AtomicFile: temp file + rename; a device is written through).
void write_svg(const std::string& path, const std::vector<Chart>& charts);

}  // namespace ember::logging
