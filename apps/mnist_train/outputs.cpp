// Side outputs' failures (Note [side outputs] in outputs.h) and the stop signals (Note [stopping
// on a signal] in stop_signals.h): the process-wide state both keep.
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include "apps/mnist_train/outputs.h"
#include "apps/mnist_train/stop_signals.h"
#include "core/error.h"

namespace mnist {

namespace {
int g_output_failures = 0;
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) ::_exit(128 + sig);  // the second one: at once
  g_stop_signal = sig;
  static const char msg[] =
      "mnist_train: stopping after the current step (outputs are written for the completed epochs; "
      "press Ctrl-C again to exit at once)\n";
  (void)!::write(2, msg, sizeof msg - 1);
}
}  // namespace

void output_failed(const std::string& flag, const std::string& path, const std::string& what) {
  ++g_output_failures;
  const std::string line = ember::user_message(what);  // one line, no source locations
  std::fflush(stdout);
  std::fprintf(stderr,
               "mnist_train: error: %s %s: %s (training goes on without this output; the exit code will be 1)\n",
               flag.c_str(), path.c_str(), line.c_str());
}

int output_failures() { return g_output_failures; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }

}  // namespace mnist
