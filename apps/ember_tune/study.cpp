#include "apps/ember_tune/study.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ember::tune {

namespace {

constexpr const char* kFormat = "ember_tune-study";
constexpr int kVersion = 1;

template <class T>
T get(const nlohmann::json& j, const char* key, const char* what) {
  EMBER_CHECK(j.is_object() && j.contains(key), what, " has no \"", key, "\"");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    EMBER_FAIL(what, ": \"", key, "\" has the wrong type (", j.at(key).dump(), ")");
  }
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
  t.intermediate = get<std::vector<double>>(j, "intermediate", what);
  t.epochs_run = get<int>(j, "epochs_run", what);
  t.epochs_planned = get<int>(j, "epochs_planned", what);
  t.seed = get<uint64_t>(j, "seed", what);
  t.duration_s = get<double>(j, "duration_s", what);
  t.elapsed_s = get<double>(j, "elapsed_s", what);
  if (j.contains("error")) t.error = get<std::string>(j, "error", what);
  t.params = j.value("params", nlohmann::json::object());
  return t;
}

StudyFile StudyFile::create(const std::string& path, const StudyConfig& config) {
  struct stat st {};
  EMBER_CHECK(!(::stat(path.c_str(), &st) == 0 && st.st_size > 0), "the study file '", path,
              "' already exists; continue it with --resume ", path, ", or name a new file");
  StudyFile f;
  f.path_ = path;
  f.config_ = config;
  f.write_line(
      nlohmann::json{{"type", "header"}, {"format", kFormat}, {"version", kVersion}, {"config", config.to_json()}}
          .dump());
  return f;
}

StudyFile StudyFile::open(const std::string& path) {
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
      EMBER_CHECK(j.value("version", 0) == kVersion, "the study file '", path, "' has format version ",
                  j.value("version", 0), "; this ember_tune reads version ", kVersion);
      try {
        f.config_ = StudyConfig::from_json(j.value("config", nlohmann::json()));
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
      EMBER_CHECK(j.value("type", "") == "trial", path, ":", line_no, ": a record of unknown type ",
                  j.value("type", "?"));
      TrialRecord t;
      try {
        t = TrialRecord::from_json(j);
      } catch (const Error& e) {
        EMBER_FAIL(path, ":", line_no, ": ", user_message(e.what()));
      }
      EMBER_CHECK(t.u.size() == f.config_.space.size(), path, ":", line_no, ": trial ", t.number, " has ", t.u.size(),
                  " coordinates, the study's space ", f.config_.space.size());
      for (const TrialRecord& o : f.trials_)
        EMBER_CHECK(o.number != t.number, path, ":", line_no, ": trial ", t.number, " is recorded twice");
      f.trials_.push_back(std::move(t));
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
  // Repair the end open() found first; only now, so a study refused for any reason is untouched.
  if (tail_ == Tail::torn) {
    EMBER_CHECK(::truncate(path_.c_str(), static_cast<off_t>(valid_bytes_)) == 0, "cannot cut the torn last line of '",
                path_, "': ", std::strerror(errno));
  } else if (tail_ == Tail::missing_newline) {
    tail_ = Tail::clean;
    write_line("");  // appends just the newline
  }
  tail_ = Tail::clean;
  write_line(t.to_json().dump());
  trials_.push_back(t);
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

}  // namespace ember::tune
