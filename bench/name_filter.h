// The --op / --variant filters of bench_ops and kernel_model: a comma-separated list of names, and
// whether a name passes it (an empty list passes everything).
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace ember::bench {

inline std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

inline bool wanted(const std::vector<std::string>& filter, const std::string& name) {
  return filter.empty() || std::find(filter.begin(), filter.end(), name) != filter.end();
}

}  // namespace ember::bench
