#include "apps/mnist_train/output_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <utility>

#include "core/error.h"
#include "io/atomic_file.h"

namespace mnist {

using namespace ember;
namespace fs = std::filesystem;

namespace {

// Output files are checked before anything trains: a typo in --save must not cost the run. A
// symlink is checked at its target; a device or FIFO is written through (io/atomic_file.h).
void check_output_path(const char* flag, const std::string& given) {
  // --log is appended to in place; the others are replaced through a temporary file beside them
  if (!given.empty()) io::check_output_file(flag, given, std::string(flag) != "--log");
}

// --tensorboard names a directory, created if needed: the nearest existing ancestor must be one.
void check_output_dir(const char* flag, const std::string& path) {
  if (path.empty()) return;
  try {
    io::check_output_name(path, false);
  } catch (const Error& e) {
    EMBER_FAIL(flag, ": ", e.what());
  }
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path), ec);
  while (!p.empty() && !fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  EMBER_CHECK(fs::is_directory(p, ec), flag, " ", path, ": ", p.string(), " is not a directory");
  EMBER_CHECK(::access(p.c_str(), W_OK) == 0, flag, " ", path, ": the directory ", p.string(), " is not writable");
}

// The outputs a run writes, flag and path (empty paths included).
std::vector<std::pair<const char*, std::string>> outputs_of(const Options& o) {
  return {{"--save", o.save},
          {"--log", o.log},
          {"--plot", o.plot},
          {"--profile", o.profile},
          {"--tensorboard", o.tensorboard}};
}

struct Named {
  std::string canonical;  // absolute, links followed, "tb/" as "tb"
  struct stat st {};
  bool exists = false;
};

Named named(const std::string& path) {
  Named n;
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(io::resolve_output_path(path), ec), ec);
  n.canonical = c.has_filename() ? c.string() : c.parent_path().string();
  n.exists = ::stat(n.canonical.c_str(), &n.st) == 0;
  return n;
}

bool same_file(const Named& a, const Named& b) {
  return a.canonical == b.canonical ||
         (a.exists && b.exists && a.st.st_dev == b.st.st_dev && a.st.st_ino == b.st.st_ino);
}

// The input `flag path` that the output `out` would overwrite or add to, as a message; else empty.
std::string names_input(const char* out_flag, const std::string& out_path, const Named& out, const char* in_flag,
                        const std::string& in_path) {
  if (in_path.empty()) return {};
  const Named in = named(in_path);
  const bool inside = in.exists && S_ISDIR(in.st.st_mode) && out.canonical.rfind(in.canonical + "/", 0) == 0;
  if (!same_file(out, in) && !inside) return {};
  return std::string(out_flag) + " " + out_path + (inside ? " is inside " : " names ") + in_flag + " " + in_path +
         "; an output never overwrites or adds to an input";
}

}  // namespace

std::string output_conflict(const Options& o) {
  std::vector<std::pair<const char*, std::string>> outs;
  std::vector<Named> names;
  for (const auto& [flag, path] : outputs_of(o)) {
    if (path.empty()) continue;
    Named n = named(path);
    if (n.exists && S_ISCHR(n.st.st_mode)) continue;
    outs.emplace_back(flag, path);
    names.push_back(std::move(n));
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& [flag, path] = outs[i];
    for (size_t j = i + 1; j < outs.size(); ++j)
      if (same_file(names[i], names[j]))
        return std::string(flag) + " " + path + " and " + outs[j].first + " " + outs[j].second +
               " name the same file (" + names[i].canonical + "); each output needs a file of its own";
    std::vector<std::pair<const char*, std::string>> inputs = {{"--data", o.predict.empty() ? o.data : ""},
                                                               {"--eval-only", o.eval_only}};
    if (std::string(flag) != "--save") inputs.emplace_back("--resume", o.resume);  // a resume saves over its own
    for (const std::string& image : o.predict) inputs.emplace_back("--predict", image);
    for (const auto& [in_flag, in_path] : inputs)
      if (std::string m = names_input(flag, path, names[i], in_flag, in_path); !m.empty()) return m;
  }
  return {};
}

void check_output_paths(const Options& o) {
  check_output_path("--save", o.save);
  check_output_path("--plot", o.plot);
  check_output_path("--profile", o.profile);
  check_output_path("--log", o.log);
  check_output_dir("--tensorboard", o.tensorboard);
}

std::vector<std::unique_ptr<io::FileLock>> lock_outputs(const Options& o) {
  std::vector<std::unique_ptr<io::FileLock>> locks;
  for (const auto& [flag, path] : outputs_of(o)) {
    if (path.empty() || io::target_kind(io::resolve_output_path(path)) == io::TargetKind::kWriteThrough) continue;
    // the lock file goes beside the directory: make it now (the writer would at its first record)
    if (std::string(flag) == "--tensorboard") fs::create_directories(path);
    locks.push_back(
        std::make_unique<io::FileLock>(io::output_lock_path(path), std::string(flag) + " " + path, "mnist_train"));
  }
  return locks;
}

}  // namespace mnist
