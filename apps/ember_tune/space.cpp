#include "apps/ember_tune/space.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ember::tune {

namespace {

const char* type_name(ParamType t) {
  switch (t) {
    case ParamType::uniform: return "float";
    case ParamType::log_uniform: return "log";
    case ParamType::integer: return "int";
    case ParamType::categorical: return "cat";
  }
  return "?";
}

ParamType parse_type(const std::string& name, const std::string& t) {
  if (t == "float" || t == "uniform") return ParamType::uniform;
  if (t == "log" || t == "log_uniform" || t == "loguniform") return ParamType::log_uniform;
  if (t == "int" || t == "integer") return ParamType::integer;
  if (t == "cat" || t == "categorical") return ParamType::categorical;
  EMBER_FAIL("parameter '", name, "': unknown type '", t, "' (expected float, log, int or cat)");
}

double parse_number(const std::string& name, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  EMBER_CHECK(used == text.size() && !text.empty() && std::isfinite(v), "parameter '", name, "': '", text,
              "' is not a finite number");
  return v;
}

// Every rule a parameter must meet, for both ways of giving one.
void validate(const Param& p) {
  EMBER_CHECK(!p.name.empty(), "a parameter has an empty name");
  EMBER_CHECK(p.name.find_first_of(" =\t") == std::string::npos && p.name[0] != '-', "parameter '", p.name,
              "': the name is mnist_train's flag without the dashes, e.g. lr or weight-decay");
  if (p.type == ParamType::categorical) {
    EMBER_CHECK(!p.choices.empty(), "parameter '", p.name, "': a categorical needs at least one choice");
    for (size_t i = 0; i < p.choices.size(); ++i) {
      EMBER_CHECK(!p.choices[i].empty(), "parameter '", p.name, "': choice ", i + 1, " is empty");
      for (size_t j = 0; j < i; ++j)
        EMBER_CHECK(p.choices[i] != p.choices[j], "parameter '", p.name, "': choice '", p.choices[i],
                    "' is listed twice");
    }
    return;
  }
  EMBER_CHECK(std::isfinite(p.lo) && std::isfinite(p.hi), "parameter '", p.name, "': the bounds must be finite");
  EMBER_CHECK(p.type == ParamType::integer ? p.lo <= p.hi : p.lo < p.hi, "parameter '", p.name, "': empty range [",
              p.lo, ", ", p.hi, "] (the low bound must be below the high bound)");
  if (p.type == ParamType::log_uniform)
    EMBER_CHECK(p.lo > 0, "parameter '", p.name, "': a log range needs positive bounds, got [", p.lo, ", ", p.hi, "]");
  if (p.type == ParamType::integer)
    EMBER_CHECK(p.lo == std::floor(p.lo) && p.hi == std::floor(p.hi), "parameter '", p.name,
                "': an int range needs integer bounds, got [", p.lo, ", ", p.hi, "]");
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

}  // namespace

int64_t Param::count() const {
  if (type == ParamType::categorical) return static_cast<int64_t>(choices.size());
  if (type == ParamType::integer) return static_cast<int64_t>(hi - lo) + 1;
  return 0;
}

size_t Space::feature_size() const {
  size_t n = 0;
  for (const Param& p : params) n += p.type == ParamType::categorical ? p.choices.size() : 1;
  return n;
}

std::vector<double> Space::decode(const std::vector<double>& u) const {
  EMBER_CHECK(u.size() == params.size(), "a point has ", u.size(), " coordinates, the space ", params.size());
  std::vector<double> v(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    const Param& p = params[i];
    const double t = std::clamp(u[i], 0.0, 1.0);
    switch (p.type) {
      case ParamType::uniform: v[i] = p.lo + t * (p.hi - p.lo); break;
      case ParamType::log_uniform:
        v[i] = std::exp(std::log(p.lo) + t * (std::log(p.hi) - std::log(p.lo)));
        if (t == 0) v[i] = p.lo;  // exp(log(x)) can be an ulp off: the bounds exactly as given
        if (t == 1) v[i] = p.hi;
        v[i] = std::clamp(v[i], p.lo, p.hi);
        break;
      case ParamType::integer:
        v[i] = p.lo + static_cast<double>(std::min<int64_t>(static_cast<int64_t>(t * p.count()), p.count() - 1));
        break;
      case ParamType::categorical:
        v[i] = static_cast<double>(std::min<int64_t>(static_cast<int64_t>(t * p.count()), p.count() - 1));
        break;
    }
  }
  return v;
}

std::vector<double> Space::features(const std::vector<double>& u) const {
  const std::vector<double> v = decode(u);
  std::vector<double> f;
  f.reserve(feature_size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    switch (p.type) {
      case ParamType::uniform: f.push_back((v[i] - p.lo) / (p.hi - p.lo)); break;
      case ParamType::log_uniform:
        f.push_back((std::log(v[i]) - std::log(p.lo)) / (std::log(p.hi) - std::log(p.lo)));
        break;
      case ParamType::integer: f.push_back((v[i] - p.lo + 0.5) / static_cast<double>(p.count())); break;
      case ParamType::categorical:
        for (int64_t c = 0; c < p.count(); ++c) f.push_back(c == static_cast<int64_t>(v[i]) ? 1.0 : 0.0);
        break;
    }
  }
  return f;
}

std::string Space::value_text(size_t i, double value) const {
  const Param& p = params.at(i);
  if (p.type == ParamType::categorical) return p.choices.at(static_cast<size_t>(value));
  char buf[64];
  if (p.type == ParamType::integer) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(value));
  else std::snprintf(buf, sizeof buf, "%.6g", value);
  return buf;
}

nlohmann::json Space::values_json(const std::vector<double>& u) const {
  const std::vector<double> v = decode(u);
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    if (p.type == ParamType::categorical) j[p.name] = p.choices[static_cast<size_t>(v[i])];
    else if (p.type == ParamType::integer) j[p.name] = static_cast<int64_t>(v[i]);
    else j[p.name] = v[i];
  }
  return j;
}

nlohmann::json Space::to_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const Param& p : params) {
    nlohmann::json j{{"name", p.name}, {"type", type_name(p.type)}};
    if (p.type == ParamType::categorical) j["choices"] = p.choices;
    else {
      j["low"] = p.lo;
      j["high"] = p.hi;
    }
    list.push_back(j);
  }
  return nlohmann::json{{"params", list}};
}

Space Space::from_json(const nlohmann::json& j) {
  EMBER_CHECK(j.is_object() && j.contains("params") && j["params"].is_array(),
              "a search space is a JSON object with a \"params\" array");
  Space s;
  for (const auto& e : j["params"]) {
    EMBER_CHECK(
        e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("type") && e["type"].is_string(),
        "each entry of \"params\" needs a string \"name\" and a string \"type\", got ", e.dump());
    Param p;
    p.name = e["name"].get<std::string>();
    p.type = parse_type(p.name, e["type"].get<std::string>());
    if (p.type == ParamType::categorical) {
      EMBER_CHECK(e.contains("choices") && e["choices"].is_array(), "parameter '", p.name,
                  "': a categorical needs a \"choices\" array");
      for (const auto& c : e["choices"]) {
        EMBER_CHECK(c.is_string() || c.is_number(), "parameter '", p.name, "': choice ", c.dump(),
                    " is neither a string nor a number");
        p.choices.push_back(c.is_string() ? c.get<std::string>() : c.dump());
      }
    } else {
      for (const char* k : {"low", "high"})
        EMBER_CHECK(e.contains(k) && e[k].is_number(), "parameter '", p.name, "': \"", k, "\" must be a number");
      p.lo = e["low"].get<double>();
      p.hi = e["high"].get<double>();
    }
    validate(p);
    for (const Param& q : s.params) EMBER_CHECK(q.name != p.name, "parameter '", p.name, "' is given twice");
    s.params.push_back(p);
  }
  EMBER_CHECK(!s.params.empty(), "the search space has no parameters");
  return s;
}

Param parse_param(const std::string& spec) {
  const size_t eq = spec.find('=');
  EMBER_CHECK(eq != std::string::npos && eq > 0, "--param '", spec,
              "': expected NAME=TYPE:..., e.g. lr=log:1e-4:1e-1, epochs=int:1:5 or optimizer=cat:sgd,adam");
  Param p;
  p.name = spec.substr(0, eq);
  const std::string rest = spec.substr(eq + 1);
  const size_t colon = rest.find(':');
  p.type = parse_type(p.name, rest.substr(0, colon));
  EMBER_CHECK(colon != std::string::npos, "parameter '", p.name, "': no range after the type");
  const std::string range = rest.substr(colon + 1);
  if (p.type == ParamType::categorical) {
    p.choices = split(range, ',');
  } else {
    const std::vector<std::string> b = split(range, ':');
    EMBER_CHECK(b.size() == 2, "parameter '", p.name, "': expected LOW:HIGH after the type, got '", range, "'");
    p.lo = parse_number(p.name, b[0]);
    p.hi = parse_number(p.name, b[1]);
  }
  validate(p);
  return p;
}

Space load_space_file(const std::string& path) {
  std::ifstream in(path);
  EMBER_CHECK(in.good(), "cannot read the search space file '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL("the search space file '", path, "' is not JSON: ", e.what());
  }
  try {
    return Space::from_json(j);
  } catch (const Error& e) {
    EMBER_FAIL(path, ": ", user_message(e.what()));
  }
}

}  // namespace ember::tune
