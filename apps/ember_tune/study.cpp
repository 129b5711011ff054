#include "apps/ember_tune/study.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "core/error.h"

namespace ember::tune {

namespace {

constexpr const char* kFormat = "ember_tune-study";
constexpr int kVersion = 2;  // 2: the planned trial count (header "trials", plan records); 1 is still read

template <class T>
T get(const nlohmann::json& j, const char* key, const char* what) {
  EMBER_CHECK(j.is_object() && j.contains(key), what, " has no \"", key, "\"");
  // nlohmann would turn -1 into 2^64 - 1 and 1.5 into 1.
  if constexpr (std::is_integral_v<T>)
    EMBER_CHECK(j.at(key).is_number_integer() && (std::is_signed_v<T> || j.at(key).is_number_unsigned()), what, ": \"",
                key, "\" has the wrong type (", j.at(key).dump(), ")");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    EMBER_FAIL(what, ": \"", key, "\" has the wrong type (", j.at(key).dump(), ")");
  }
}

int planned_count(const nlohmann::json& j, const char* what) {
  EMBER_CHECK(j.contains("trials") && j["trials"].is_number_integer(), what, " has no integer \"trials\"");
  const int64_t n = j["trials"].get<int64_t>();
  EMBER_CHECK(n >= 1 && n <= kMaxTrials, what, " plans ", n, " trials (expected 1 to ", kMaxTrials, ")");
  return static_cast<int>(n);
}

// What every trial record must be for the study to be what it says. `planned` is the count in force when the record
// was written (0: not stored, a version 1 file): the runner never numbers a trial at or beyond it, so a larger number
// is a record from elsewhere, and resuming would otherwise queue every number below it as a gap to fill.
void check_trial(const TrialRecord& t, const StudyConfig& c, int planned) {
  const uint64_t bound = static_cast<uint64_t>(planned > 0 ? planned : kMaxTrials);
  EMBER_CHECK(t.number<bound, "trial ", t.number, ": the number is not below the ", bound, " trials ", planned> 0
                  ? "planned when it was recorded"
                  : "a study can have");
  EMBER_CHECK(t.u.size() == c.space.size(), "trial ", t.number, " has ", t.u.size(), " coordinates, the study's space ",
              c.space.size());
  for (double x : t.u)
    EMBER_CHECK(std::isfinite(x) && x >= 0 && x <= 1, "trial ", t.number, ": its point ", nlohmann::json(t.u).dump(),
                " is outside the unit cube");
  if (t.state == "complete") EMBER_CHECK(t.value, "trial ", t.number, " is complete but has no value");
  if (t.state == "failed") {
    EMBER_CHECK(!t.value, "trial ", t.number, " failed but has a value (", *t.value, ")");
    EMBER_CHECK(!t.error.empty(), "trial ", t.number, " failed but says no reason");
  }
  if (t.value) {
    const double v = *t.value;
    // Every metric mnist_train reports is non-negative (losses, seconds, throughput, accuracies in percent).
    const bool accuracy = c.objective.find("accuracy") != std::string::npos;
    EMBER_CHECK(std::isfinite(v) && v >= 0 && (!accuracy || v <= 100), "trial ", t.number, ": the value ", v,
                " makes no sense for ", c.objective);
  }
  EMBER_CHECK(t.epochs_run >= 0 && t.epochs_planned >= 1, "trial ", t.number, ": epochs run ", t.epochs_run,
              ", planned ", t.epochs_planned);
  EMBER_CHECK(t.seed == c.sampler.seed, "trial ", t.number, " ran with seed ", t.seed, ", the study's is ",
              c.sampler.seed);
  EMBER_CHECK(std::isfinite(t.duration_s) && t.duration_s >= 0 && std::isfinite(t.elapsed_s) && t.elapsed_s >= 0,
              "trial ", t.number, ": a negative or non-finite time (duration ", t.duration_s, " s, elapsed ",
              t.elapsed_s, " s)");
  // The params are there for people reading the file; they must say what the point says.
  if (t.params.is_object())
    EMBER_CHECK(t.params == c.space.values_json(t.u), "trial ", t.number, ": its params ", t.params.dump(),
                " are not its point's ", c.space.values_json(t.u).dump());
}

}  // namespace

nlohmann::json StudyConfig::to_json() const {
  return {{"space", space.to_json()},
          {"objective", objective},
          {"direction", maximize ? "max" : "min"},
          {"sampler", sampler_name(sampler.kind)},
          {"seed", sampler.seed},
          {"n_init", sampler.n_init},
          {"pruner", pruner},
          {"train_args", train_args}};
}

StudyConfig StudyConfig::from_json(const nlohmann::json& j) {
  StudyConfig c;
  c.space = Space::from_json(get<nlohmann::json>(j, "space", "the study's config"));
  c.objective = get<std::string>(j, "objective", "the study's config");
  const std::string dir = get<std::string>(j, "direction", "the study's config");
  EMBER_CHECK(dir == "max" || dir == "min", "the study's direction is '", dir, "' (expected max or min)");
  c.maximize = dir == "max";
  c.sampler.kind = parse_sampler(get<std::string>(j, "sampler", "the study's config"));
  c.sampler.seed = get<uint64_t>(j, "seed", "the study's config");
  c.sampler.n_init = get<int>(j, "n_init", "the study's config");
  c.pruner = get<std::string>(j, "pruner", "the study's config");
  c.train_args = get<std::vector<std::string>>(j, "train_args", "the study's config");
  return c;
}

nlohmann::json TrialRecord::to_json() const {
  nlohmann::json j{{"type", "trial"},
                   {"number", number},
                   {"state", state},
                   {"params", params},
                   {"u", u},
                   {"intermediate", intermediate},
                   {"epochs_run", epochs_run},
                   {"epochs_planned", epochs_planned},
                   {"seed", seed},
                   {"duration_s", duration_s},
                   {"elapsed_s", elapsed_s}};
  j["value"] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  if (!error.empty()) j["error"] = error;
  return j;
}

TrialRecord TrialRecord::from_json(const nlohmann::json& j) {
  TrialRecord t;
  const char* what = "a trial record";
  t.number = get<uint64_t>(j, "number", what);
  t.state = get<std::string>(j, "state", what);
  EMBER_CHECK(t.state == "complete" || t.state == "pruned" || t.state == "failed", "trial ", t.number,
              " has the unknown state '", t.state, "'");
  t.u = get<std::vector<double>>(j, "u", what);
  if (j.contains("value") && !j["value"].is_null()) t.value = get<double>(j, "value", what);
  EMBER_CHECK(t.state != "complete" || t.value, "trial ", t.number, " is complete but has no value");
  // A NaN epoch value (a diverging trial the pruner stopped) is written as null: read back as NaN.
  const auto inter = get<nlohmann::json>(j, "intermediate", what);
  EMBER_CHECK(inter.is_array(), what, ": \"intermediate\" is not an array");
  for (const auto& v : inter) {
    EMBER_CHECK(v.is_number() || v.is_null(), what, ": \"intermediate\" holds ", v.dump());
    t.intermediate.push_back(v.is_null() ? NAN : v.get<double>());
  }
  t.epochs_run = get<int>(j, "epochs_run", what);
  t.epochs_planned = get<int>(j, "epochs_planned", what);
  t.seed = get<uint64_t>(j, "seed", what);
  t.duration_s = get<double>(j, "duration_s", what);
  t.elapsed_s = get<double>(j, "elapsed_s", what);
  if (j.contains("error")) t.error = get<std::string>(j, "error", what);
  t.params = j.value("params", nlohmann::json::object());
  return t;
}

namespace {
// A study is one file: a directory in its place is named as one (reading it would say "empty", a
// new study "already exists").
void check_not_directory(const std::string& path) {
  std::error_code ec;
  EMBER_CHECK(!std::filesystem::is_directory(path, ec), "the study file '", path,
              "' is a directory; a study is one file (e.g. ", path, "/study.jsonl)");
}
}  // namespace

void StudyFile::check_new(const std::string& path) {
  check_not_directory(path);
  struct stat st {};
  EMBER_CHECK(!(::stat(path.c_str(), &st) == 0 && st.st_size > 0), "the study file '", path,
              "' already exists; continue it with --resume ", path, ", or name a new file");
}

StudyFile StudyFile::create(const std::string& path, const StudyConfig& config, int trials) {
  check_new(path);
  EMBER_CHECK(trials >= 1 && trials <= kMaxTrials, "a study plans 1 to ", kMaxTrials, " trials, not ", trials);
  StudyFile f;
  f.path_ = path;
  f.config_ = config;
  f.planned_trials_ = trials;
  f.write_line(nlohmann::json{
      {"type", "header"}, {"format", kFormat}, {"version", kVersion}, {"config", config.to_json()}, {"trials", trials}}
                   .dump());
  return f;
}

StudyFile StudyFile::open(const std::string& path) {
  check_not_directory(path);
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "cannot read the study file '", path, "': ", std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  StudyFile f;
  f.path_ = path;
  EMBER_CHECK(!text.empty(), "the study file '", path, "' is empty (not an ember_tune study)");
  size_t pos = 0, line_no = 0;
  bool have_header = false;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const bool torn = nl == std::string::npos;  // the last record's write was cut short
    const std::string line = text.substr(pos, torn ? std::string::npos : nl - pos);
    ++line_no;
    nlohmann::json j;
    bool parsed = true;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      parsed = false;
    }
    if (!have_header) {
      EMBER_CHECK(parsed && j.is_object() && j.value("type", "") == "header" && j.value("format", "") == kFormat, "'",
                  path, "' is not an ember_tune study (its first line is not an ember_tune-study header)");
      EMBER_CHECK(!torn, "the study file '", path, "' has only a torn header line; start the study again");
      const int version = j.contains("version") && j["version"].is_number_integer() ? j["version"].get<int>() : 0;
      EMBER_CHECK(version == 1 || version == kVersion, "the study file '", path, "' has format version ",
                  j.value("version", nlohmann::json(nullptr)).dump(), "; this ember_tune reads versions 1 and ",
                  kVersion);
      try {
        f.config_ = StudyConfig::from_json(j.value("config", nlohmann::json()));
        if (version >= 2) f.planned_trials_ = planned_count(j, "the header");
      } catch (const Error& e) {
        EMBER_FAIL("the study file '", path, "' has a bad header: ", user_message(e.what()));
      }
      have_header = true;
    } else if (torn && !parsed) {
      f.tail_ = Tail::torn;  // dropped: valid_bytes_ stops before it
      break;
    } else {
      EMBER_CHECK(parsed && j.is_object(), path, ":", line_no,
                  ": a corrupt record (not JSON); the file was not changed");
      const std::string type = j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?";
      EMBER_CHECK(type == "trial" || type == "plan", path, ":", line_no, ": a record of unknown type ", type);
      try {
        if (type == "plan") {
          f.planned_trials_ = planned_count(j, "a plan record");
        } else {
          TrialRecord t = TrialRecord::from_json(j);
          check_trial(t, f.config_, f.planned_trials_);
          for (const TrialRecord& o : f.trials_)
            EMBER_CHECK(o.number != t.number, "trial ", t.number, " is recorded twice");
          f.trials_.push_back(std::move(t));
        }
      } catch (const Error& e) {
        EMBER_FAIL(path, ":", line_no, ": ", user_message(e.what()));
      }
      if (torn) {  // a whole record that only lacks its newline: keep it, add the newline
        f.valid_bytes_ = text.size();
        f.tail_ = Tail::missing_newline;
        break;
      }
    }
    pos = torn ? text.size() : nl + 1;
    f.valid_bytes_ = pos;
  }
  return f;
}

void StudyFile::append(const TrialRecord& t) {
  append_line(t.to_json().dump());
  trials_.push_back(t);
}

void StudyFile::plan(int trials) {
  EMBER_CHECK(trials >= 1 && trials <= kMaxTrials, "a study plans 1 to ", kMaxTrials, " trials, not ", trials);
  append_line(nlohmann::json{{"type", "plan"}, {"trials", trials}}.dump());
  planned_trials_ = trials;
}

void StudyFile::append_line(const std::string& line) {
  // Repair the end open() found first; only now, so a study refused for any reason is untouched.
  if (tail_ == Tail::torn) {
    EMBER_CHECK(::truncate(path_.c_str(), static_cast<off_t>(valid_bytes_)) == 0, "cannot cut the torn last line of '",
                path_, "': ", std::strerror(errno));
  } else if (tail_ == Tail::missing_newline) {
    tail_ = Tail::clean;
    write_line("");  // appends just the newline
  }
  tail_ = Tail::clean;
  write_line(line);
}

void StudyFile::write_line(const std::string& line) {
  const std::string rec = line + "\n";
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  EMBER_CHECK(fd >= 0, "cannot open the study file '", path_, "' for appending: ", std::strerror(errno));
  size_t done = 0;
  while (done < rec.size()) {
    const ssize_t n = ::write(fd, rec.data() + done, rec.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      EMBER_FAIL("writing the study file '", path_, "' failed: ", std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  EMBER_CHECK(rc == 0, "fsync of the study file '", path_, "' failed: ", std::strerror(e));
  valid_bytes_ += rec.size();
}

std::string study_lock_path(const std::string& study) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(study, ec), ec);
  return (ec ? study : p.string()) + ".lock";
}

std::string trial_dir_lock_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "ember_tune.lock").string();
}

}  // namespace ember::tune
