#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
#include "data/image_decode.h"

namespace ember::data {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options) : root_(std::move(root)), options_(std::move(options)) {
  const int c = options_.channels_;
  EMBER_CHECK(c == 0 || c == 1 || c == 3 || c == 4, "ImageFolder: channels must be 0 (as stored), 1, 3 or 4; got ", c);
  EMBER_CHECK((options_.height_ == 0) == (options_.width_ == 0) && options_.height_ >= 0 && options_.width_ >= 0,
              "ImageFolder: resize needs both a height and a width (got ", options_.height_, " x ", options_.width_, ")");
  EMBER_CHECK(options_.max_pixels_ >= 1 && options_.max_pixels_ <= kMaxImagePixelsLimit, "ImageFolder: max_pixels must be in [1, ",
              kMaxImagePixelsLimit, "]; got ", options_.max_pixels_);
  std::vector<std::string> exts;
  for (const std::string& e : options_.extensions_) exts.push_back(lower(e));

  std::error_code ec;
  EMBER_CHECK(fs::is_directory(root_, ec), "ImageFolder: '", root_, "' is not a directory",
              ec ? ": " + ec.message() : std::string());
  std::vector<fs::path> class_dirs;
  for (const fs::directory_entry& e : fs::directory_iterator(root_, ec))
    if (e.is_directory()) class_dirs.push_back(e.path());
  EMBER_CHECK(!ec, "ImageFolder: cannot list '", root_, "': ", ec.message());
  std::sort(class_dirs.begin(), class_dirs.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  EMBER_CHECK(!class_dirs.empty(), "ImageFolder: '", root_, "' has no class subdirectories (expected root/<class>/<image>)");

  for (const fs::path& dir : class_dirs) {
    const auto label = static_cast<int64_t>(classes_.size());
    classes_.push_back(dir.filename().string());
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      std::string ext = lower(it->path().extension().string());
      if (std::find(exts.begin(), exts.end(), ext) != exts.end()) files.push_back(it->path().string());
    }
    EMBER_CHECK(!ec, "ImageFolder: cannot list '", dir.string(), "': ", ec.message());
    EMBER_CHECK(!files.empty(), "ImageFolder: class '", classes_.back(), "' (", dir.string(),
                ") has no image files with the extensions ", [&] {
                  std::string s;
                  for (const std::string& e : exts) s += (s.empty() ? "" : ", ") + e;
                  return s;
                }());
    std::sort(files.begin(), files.end());
    for (std::string& f : files) samples_.emplace_back(std::move(f), label);
  }
}

std::optional<Shape> ImageFolder::sample_shape() const {
  if (options_.height_ == 0 || options_.channels_ == 0) return std::nullopt;
  return Shape{options_.channels_, options_.height_, options_.width_};
}

Sample ImageFolder::get(int64_t i) const {
  check_index(i, "ImageFolder");
  const auto& [path, label] = samples_[static_cast<size_t>(i)];
  Sample s;
  s.image = load_image(path, options_.channels_, options_.max_pixels_);
  if (options_.height_ > 0) s.image = resize_image(s.image, options_.height_, options_.width_);
  s.label = label;
  return s;
}

}  // namespace ember::data
