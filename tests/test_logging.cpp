// Observability: TensorBoard event files (TFRecord framing, masked CRC-32C), SVG charts, the
// Chrome-trace profiler and its top-ops table (CPU here; the GPU tracks in the GPU suite).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <unistd.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/profiler.h"
#include "ember.h"
#include "logging/progress.h"
#include "logging/svg_plot.h"
#include "logging/tensorboard.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ember_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}
}  // namespace

TEST_CASE("CRC-32C matches the standard check value", "[logging]") {
  const char* s = "123456789";
  CHECK(logging::crc32c(s, 9) == 0xE3069283u);
  CHECK(logging::crc32c("", 0) == 0u);
}

TEST_CASE("TensorBoard event files decode with valid CRCs", "[logging]") {
  fs::path dir = temp_dir("tb");
  std::string path;
  {
    logging::TensorBoardWriter w(dir.string());
    path = w.path();
    for (int step = 0; step < 5; ++step) {
      w.scalar("train/loss", 1.0 / (step + 1), step);
      w.scalar("train/accuracy", 0.1 * step, step);
    }
  }
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  std::vector<std::string> records = logging::read_tfrecords(path);
  REQUIRE(records.size() == 11);  // the file_version event + 10 scalars
  CHECK(records[0].find("brain.Event:2") != std::string::npos);
  std::vector<logging::ScalarEvent> all;
  for (const std::string& r : records)
    for (const auto& e : logging::decode_scalars(r)) all.push_back(e);
  REQUIRE(all.size() == 10);
  CHECK(all[0].tag == "train/loss");
  CHECK(all[0].value == 1.0f);
  CHECK(all[9].tag == "train/accuracy");
  CHECK(all[9].step == 4);
  CHECK(all[9].value == Approx(0.4f));
  // one flipped payload byte is caught by the data CRC
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(12 + records[0].size() + 4 + 12 + 3));
    char c = 0;
    f.read(&c, 1);
    f.seekp(-1, std::ios::cur);
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  CHECK_THROWS_WITH(logging::read_tfrecords(path), Catch::Contains("bad data CRC in record 1"));
  fs::remove_all(dir);
}

TEST_CASE("SVG charts are well formed", "[logging]") {
  logging::Chart c{
      "loss", "step", "loss", {{"train", {0, 1, 2, 3}, {2.3, 1.0, 0.5, NAN}}, {"val", {0, 3}, {2.2, 0.6}}}};
  std::string svg = logging::render_svg({c, {"accuracy <%>", "epoch", "%", {{"test", {1, 2}, {80, 88}}}}});
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("accuracy &lt;%&gt;") != std::string::npos);
  CHECK(svg.find("nan") == std::string::npos);
  size_t opens = 0, polylines = 0;
  for (size_t p = svg.find('<'); p != std::string::npos; p = svg.find('<', p + 1)) ++opens;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) ++polylines;
  CHECK(polylines == 3);
  CHECK(opens > 10);
}

TEST_CASE("SVG axes: ticks at 1-2-5 x 10^k with few digits, log axes labelled with their values", "[logging]") {
  auto check_125 = [](const logging::Ticks& t) {
    REQUIRE(t.values.size() >= 2);
    const double step = t.values[1] - t.values[0];
    const double p = std::pow(10.0, std::floor(std::log10(step) + 1e-9)), m = step / p;
    CHECK((std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 5) < 1e-9));
    for (double v : t.values) CHECK(std::abs(v / step - std::round(v / step)) < 1e-9);
    CHECK(t.lo == t.values.front());
    CHECK(t.hi == t.values.back());
  };
  // the range a loss curve gave before: ticks at -3.955 and 0.7051 then
  logging::Ticks t = logging::linear_ticks(-3.955, 0.7051);
  check_125(t);
  CHECK(t.labels == std::vector<std::string>{"-4", "-3", "-2", "-1", "0", "1"});
  t = logging::linear_ticks(0.7051, 0.9);
  check_125(t);
  CHECK(t.labels == std::vector<std::string>{"0.70", "0.75", "0.80", "0.85", "0.90"});
  t = logging::linear_ticks(0, 0.001);
  check_125(t);
  CHECK(t.labels == std::vector<std::string>{"0", "2e-4", "4e-4", "6e-4", "8e-4", "1e-3"});
  t = logging::linear_ticks(0, 37000);
  check_125(t);
  CHECK(t.labels.back() == "40000");
  // log axes: the values themselves, one style per axis
  t = logging::log_ticks(1.5e-4, 0.09);
  CHECK(t.labels == std::vector<std::string>{"1e-4", "1e-3", "1e-2", "1e-1"});
  t = logging::log_ticks(0.002, 0.09);
  CHECK(t.labels == std::vector<std::string>{"0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1"});
  // a chart: log x, steps and points
  logging::Chart c{"best",
                   "lr",
                   "accuracy (%)",
                   {{"best so far", {1e-4, 1e-3, 1e-2}, {50, 80, 85}, logging::Series::Style::steps},
                    {"trials", {1e-4, 1e-3, 1e-2}, {50, 80, 70}, logging::Series::Style::points}}};
  c.log_x = true;
  const std::string svg = logging::render_svg({c});
  CHECK(svg.find(">1e-3</text>") != std::string::npos);
  CHECK(svg.find("log10") == std::string::npos);
  size_t circles = 0;
  for (size_t p = svg.find("<circle"); p != std::string::npos; p = svg.find("<circle", p + 1)) ++circles;
  CHECK(circles == 3);
  // steps: 3 points drawn as 5 vertices (a horizontal then a vertical segment between them)
  const size_t at = svg.find("<polyline"), from = svg.find("points=\"", at) + 8, to = svg.find('"', from);
  const std::string pts = svg.substr(from, to - from);
  CHECK(std::count(pts.begin(), pts.end(), ',') == 5);
}

TEST_CASE("the profiler writes a Chrome trace with the ops that ran", "[logging][profiler]") {
  fs::path dir = temp_dir("prof");
  profiler::TraceProfiler prof;
  prof.start();
  Tensor x = randn({64, 32}).requires_grad_();
  Tensor w = randn({16, 32}).requires_grad_();
  Tensor loss = mean(relu(linear(x, w)));
  loss.backward();
  { profiler::Range longer("a range named past the table's 32 columns", "", kCPU); }
  prof.stop();
  Tensor after = relu(x);  // not recorded
  std::string path = (dir / "trace.json").string();
  size_t n = prof.write_chrome_trace(path);
  CHECK(n > 5);
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f);
  REQUIRE(j.contains("traceEvents"));
  std::set<std::string> names;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") {
      names.insert(e["name"].get<std::string>());
      CHECK(e["dur"].get<double>() >= 0);
    }
  bool has_linear = false, has_backward = false;
  for (const auto& nm : names) {
    has_linear = has_linear || nm.rfind("linear", 0) == 0;
    has_backward = has_backward || nm.find("[backward]") != std::string::npos;
  }
  CHECK(has_linear);
  CHECK(has_backward);
  std::string table = prof.top_ops_table();
  CHECK(table.find("linear") != std::string::npos);
  CHECK(table.find("relu") != std::string::npos);
  CHECK(table.find("a range named past the table's 32 columns") != std::string::npos);
  // the header and every op's row end in the same column, however long the names (the last line,
  // the total, has no percentage)
  std::vector<size_t> widths;
  for (size_t at = 0, nl; (nl = table.find('\n', at)) != std::string::npos; at = nl + 1) widths.push_back(nl - at);
  REQUIRE(widths.size() >= 3);
  for (size_t i = 1; i + 1 < widths.size(); ++i) CHECK(widths[i] == widths[0]);
  fs::remove_all(dir);
}

TEST_CASE("progress falls back to plain lines off a TTY", "[logging]") {
  fs::path dir = temp_dir("progress");
  std::string p = (dir / "out.txt").string();
  FILE* f = std::fopen(p.c_str(), "w");
  logging::Progress bar("epoch 1", 8, f, 4);
  CHECK_FALSE(bar.tty());
  for (int i = 1; i <= 8; ++i) bar.update(i, i * 64, "loss 0.5");
  bar.finish();
  std::fclose(f);
  std::ifstream in(p);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(all.find('\r') == std::string::npos);
  CHECK(all.find("epoch 1 4/8") != std::string::npos);
  CHECK(all.find("epoch 1 8/8") != std::string::npos);
  fs::remove_all(dir);
}
