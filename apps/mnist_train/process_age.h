// How long this process has existed: the kernel's record of its start (/proc/self/stat, in clock
// ticks since boot) against CLOCK_BOOTTIME, so the loading of the program and its libraries counts
// too. The start-up a run reports (process start to its first training step) is measured with it.
#pragma once

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace mnist {

// Seconds since the process started (to the kernel's clock tick, usually 10 ms); -1 if unknown.
inline double process_age_s() {
  std::ifstream f("/proc/self/stat");
  std::string stat;
  if (!std::getline(f, stat)) return -1;
  // the command name (field 2) may hold spaces: the fields after it follow its closing ')'
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i < 22 && rest >> field; ++i) {
  }
  unsigned long long start_ticks = 0;
  timespec now{};
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (!(rest >> start_ticks) || hz <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec) -
         static_cast<double>(start_ticks) / static_cast<double>(hz);
}

}  // namespace mnist
