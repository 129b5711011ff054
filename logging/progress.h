// A progress bar for terminals (redrawn in place, at most ~10 times a second) that falls back to
// plain lines (one every `plain_every` updates) when the output is not a TTY (CI logs, pipes).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ember::logging {

class Progress {
 public:
  Progress(std::string label, int64_t total, FILE* out = stdout, int64_t plain_every = 0);
  // done: units finished so far; samples: samples processed (for samples/s); extra: e.g. "loss 0.41".
  void update(int64_t done, int64_t samples, const std::string& extra);
  // Ends the bar (a newline on a TTY).
  void finish();
  bool tty() const { return tty_; }

 private:
  std::string label_;
  int64_t total_, plain_every_;
  FILE* out_;
  bool tty_;
  bool open_ = false;
  int64_t last_plain_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

bool is_tty(FILE* f);

}  // namespace ember::logging
