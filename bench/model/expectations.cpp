#include "bench/model/expectations.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ember::model {
namespace {

const char* const kCounters[] = {"global_load_efficiency",
                                 "global_store_efficiency",
                                 "global_efficiency",
                                 "shared_conflict_factor",
                                 "occupancy",
                                 "spills",
                                 "registers"};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

const char* cmp_str(Expectation::Cmp c) {
  switch (c) {
    case Expectation::Cmp::ge: return ">=";
    case Expectation::Cmp::le: return "<=";
    case Expectation::Cmp::eq: return "==";
  }
  return "?";
}

bool holds(double v, Expectation::Cmp c, double want) {
  // counters are ratios of integers printed to 4 digits: compare with a little slack so that a
  // value written as it was printed still matches
  double eps = 1e-6 * std::max(1.0, std::fabs(want));
  switch (c) {
    case Expectation::Cmp::ge: return v >= want - eps;
    case Expectation::Cmp::le: return v <= want + eps;
    case Expectation::Cmp::eq: return std::fabs(v - want) <= eps;
  }
  return false;
}

}  // namespace

std::vector<Expectation> parse_expectations(const std::string& text, const std::string& file) {
  std::vector<Expectation> out;
  std::istringstream in(text);
  std::string raw;
  int lineno = 0;
  while (std::getline(in, raw)) {
    ++lineno;
    auto fail = [&](const std::string& what) {
      throw std::runtime_error(file + ":" + std::to_string(lineno) + ": " + what);
    };
    size_t first = raw.find_first_not_of(" \t\r");
    if (first == std::string::npos || raw[first] == '#') continue;
    Expectation e;
    e.file = file;
    e.line = lineno;
    std::string body = raw;
    size_t hash = raw.find('#');
    if (hash == std::string::npos) fail("no reason: end the line with '# why this bar'");
    body = raw.substr(0, hash);
    e.why = raw.substr(hash + 1);
    size_t w = e.why.find_first_not_of(" \t");
    e.why = w == std::string::npos ? "" : e.why.substr(w);
    while (!e.why.empty() && (e.why.back() == '\r' || e.why.back() == ' ')) e.why.pop_back();
    if (e.why.empty()) fail("empty reason after '#'");
    std::istringstream fields(body);
    std::string cmp, value, extra;
    if (!(fields >> e.glob >> e.counter >> cmp >> value))
      fail("expected '<kernel glob> <counter> >=|<=|== <value> # why', got '" + body + "'");
    if (fields >> extra) fail("unexpected '" + extra + "' after the value");
    if (size_t at = e.glob.find('@'); at != std::string::npos) {
      e.call_glob = e.glob.substr(at + 1);
      e.glob = e.glob.substr(0, at);
      if (e.glob.empty() || e.call_glob.empty()) fail("empty kernel or call glob around '@'");
    }
    bool known = false;
    for (const char* c : kCounters) known = known || e.counter == c;
    if (!known) {
      std::string list;
      for (const char* c : kCounters) list += std::string(list.empty() ? "" : ", ") + c;
      fail("unknown counter '" + e.counter + "' (known: " + list + ")");
    }
    if (cmp == ">=") e.cmp = Expectation::Cmp::ge;
    else if (cmp == "<=") e.cmp = Expectation::Cmp::le;
    else if (cmp == "==") e.cmp = Expectation::Cmp::eq;
    else fail("unknown comparison '" + cmp + "' (>=, <= or ==)");
    char* end = nullptr;
    e.value = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !std::isfinite(e.value))
      fail("the value '" + value + "' is not a number");
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<Expectation> load_expectations(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open the expectations file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_expectations(ss.str(), path);
}

bool glob_match(const std::string& p, const std::string& s) {
  // iterative '*' matching with backtracking to the last star: linear enough for kernel names
  size_t pi = 0, si = 0, star = std::string::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

bool needs_resources(const std::string& counter) {
  return counter == "occupancy" || counter == "spills" || counter == "registers";
}

bool counter_value(const GateSubject& s, const std::string& counter, double* value, std::string* why) {
  const KernelStats& k = s.stats;
  if (counter == "global_load_efficiency") *value = k.global_load_efficiency();
  else if (counter == "global_store_efficiency") *value = k.global_store_efficiency();
  else if (counter == "global_efficiency") *value = k.global_efficiency();
  else if (counter == "shared_conflict_factor") *value = k.shared_conflict_factor();
  else if (counter == "occupancy") {
    if (s.occupancy < 0) {
      *why = "unknown: the kernel is not in the resource table";
      return false;
    }
    *value = s.occupancy;
  } else if (counter == "spills" || counter == "registers") {
    if (s.resources == nullptr) {
      *why = "unknown: the kernel is not in the resource table";
      return false;
    }
    *value = counter == "spills" ? static_cast<double>(s.resources->spill_stores + s.resources->spill_loads)
                                 : static_cast<double>(s.resources->registers);
  } else {
    *why = "unknown counter";
    return false;
  }
  return true;
}

std::vector<std::string> check_expectations(const std::vector<Expectation>& lines,
                                            const std::vector<GateSubject>& subjects) {
  std::vector<std::string> problems;
  for (const Expectation& e : lines) {
    bool matched = false;
    for (const GateSubject& s : subjects) {
      if (!glob_match(e.glob, s.stats.kernel) || !glob_match(e.call_glob, s.context)) continue;
      matched = true;
      double v = 0;
      std::string why;
      std::string head = "kernel " + s.stats.kernel + " [" + s.context + "]: counter " + e.counter;
      if (!counter_value(s, e.counter, &v, &why)) {
        problems.push_back(head + " " + why + ", expected " + cmp_str(e.cmp) + " " + fmt(e.value) + " (" + e.where() +
                           ")");
        continue;
      }
      if (!holds(v, e.cmp, e.value))
        problems.push_back(head + " = " + fmt(v) + ", expected " + cmp_str(e.cmp) + " " + fmt(e.value) + " (" +
                           e.where() + ")");
    }
    if (!matched)
      problems.push_back(e.where() + ": no kernel that ran matches '" + e.glob +
                         (e.call_glob == "*" ? "" : "@" + e.call_glob) +
                         "' (a renamed or removed kernel? update the line)");
  }
  return problems;
}

}  // namespace ember::model
