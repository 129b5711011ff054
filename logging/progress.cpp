#include "logging/progress.h"

#include <unistd.h>

#include <algorithm>

namespace ember::logging {

bool is_tty(FILE* f) { return isatty(fileno(f)) != 0; }

Progress::Progress(std::string label, int64_t total, FILE* out, int64_t plain_every)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      plain_every_(plain_every > 0 ? plain_every : std::max<int64_t>(1, total / 4)),
      out_(out),
      tty_(is_tty(out)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

void Progress::update(int64_t done, int64_t samples, const std::string& extra) {
  auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double rate = elapsed > 0 ? static_cast<double>(samples) / elapsed : 0;
  double frac = std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
  double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
  if (tty_) {
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 30;
    int filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar += std::string(static_cast<size_t>(width - filled), '.');
    std::fprintf(out_, "\r%s [%s] %3.0f%% %8.0f samples/s  eta %5.1fs  %s\033[K", label_.c_str(), bar.c_str(),
                 100 * frac, rate, eta, extra.c_str());
    open_ = true;
  } else {
    if (done / plain_every_ == last_plain_ / plain_every_ && last_plain_ >= 0 && done < total_) return;
    last_plain_ = done;
    std::fprintf(out_, "%s %lld/%lld (%.0f%%) %.0f samples/s eta %.1fs %s\n", label_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), 100 * frac, rate, eta, extra.c_str());
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (tty_ && open_) std::fprintf(out_, "\r\033[K");
  open_ = false;
  std::fflush(out_);
}

}  // namespace ember::logging
