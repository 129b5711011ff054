#include "ckpt/run_record.h"

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace ember {

RunRecord& RunRecord::add(RunSetting s) {
  settings_.push_back(std::move(s));
  return *this;
}

Metadata RunRecord::metadata() const {
  Metadata m;
  for (const RunSetting& s : settings_)
    if (s.recorded) m[s.key] = s.value;
  return m;
}

namespace {
std::string shown(const RunSetting& s, const std::string& v) {
  if (!s.numeric) return v;
  char b[40];
  std::snprintf(b, sizeof b, "%g", std::strtod(v.c_str(), nullptr));
  return b;
}
bool same(const RunSetting& s, const std::string& saved) {
  return s.value == saved ||
         (s.numeric && std::strtod(s.value.c_str(), nullptr) == std::strtod(saved.c_str(), nullptr));
}
}  // namespace

void RunRecord::check_resume(const Metadata& saved, const std::string& checkpoint) const {
  std::string diffs, derived, wanted;
  for (const RunSetting& s : settings_) {
    const auto it = saved.find(s.key);
    if (!s.compared || it == saved.end() || same(s, it->second)) continue;
    std::string& out = s.derived ? derived : diffs;
    out += std::string(out.empty() ? "" : "; ") + s.flag + " " + shown(s, s.value) + " differs from the checkpoint's " +
           shown(s, it->second) + " (" + s.why + ")";
    // a flag a user can pass (not "--data: ..." and not a derived count): how to resume
    if (!s.derived && s.flag.rfind("--", 0) == 0 && s.flag.find(':') == std::string::npos)
      wanted += std::string(wanted.empty() ? "" : " ") + s.flag + " " + shown(s, it->second);
  }
  if (diffs.empty()) diffs = derived;
  EMBER_CHECK(diffs.empty(), "--resume ", checkpoint, ": ", diffs, "; resume with ",
              wanted.empty() ? std::string("the checkpoint's data and settings") : wanted,
              ", or start a new run without --resume");
}

}  // namespace ember
