#include "data/image_folder.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "data/image_decode.h"
#include "io/safetensors.h"

namespace ember::data {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Runs `work` on `threads` threads while `watch` runs on this one. The threads are stopped (`stop`)
// and joined on every way out, `watch` throwing included (a joinable std::thread destroyed is
// std::terminate), and what escapes `work` is rethrown here (Note [no abort] in core/error.h).
void run_workers(int64_t threads, std::atomic<bool>& stop, const std::function<void()>& work,
                 const std::function<void()>& watch) {
  std::mutex mu;
  std::exception_ptr escaped;
  std::vector<std::thread> pool;
  struct Joiner {
    std::vector<std::thread>& pool;
    std::atomic<bool>& stop;
    ~Joiner() {
      stop = true;
      for (std::thread& t : pool)
        if (t.joinable()) t.join();
    }
  } joiner{pool, stop};
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      try {
        work();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!escaped) escaped = std::current_exception();
        stop = true;
      }
    });
  watch();
  for (std::thread& t : pool) t.join();
  if (escaped) std::rethrow_exception(escaped);
}

// .ipynb_checkpoints, .DS_Store, macOS's ._name: tool droppings, never classes or images.
bool hidden(const fs::path& p) { return p.filename().string().starts_with('.'); }

// The folders of `dir` that are not hidden, sorted by name.
std::vector<fs::path> visible_folders(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (!hidden(e.path()) && e.is_directory()) out.push_back(e.path());
  EMBER_CHECK(!ec, "ImageFolder: cannot list '", dir, "': ", ec.message());
  std::sort(out.begin(), out.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  return out;
}

enum class Role { none, train, val, test };
Role split_role(const std::string& name) {
  const std::string n = lower(name);
  if (n == "train" || n == "training") return Role::train;
  if (n == "val" || n == "valid" || n == "validation" || n == "dev") return Role::val;
  if (n == "test" || n == "testing") return Role::test;
  return Role::none;
}
const char* const kSplitNames = "train, training; val, valid, validation, dev; test, testing";

// `s` with every byte outside printable ASCII as \xNN: a name that is not UTF-8 cannot be printed as it is.
std::string escaped(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F) out += ch;
    else out += str("\\x", "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]);
  }
  return out;
}

// Class names go into checkpoints (UTF-8 JSON metadata): a name that is not UTF-8 is refused here, before any image
// is decoded, rather than when the first checkpoint is written.
void check_class_name(const fs::path& dir) {
  const std::string name = dir.filename().string();
  const int64_t bad = io::first_invalid_utf8({reinterpret_cast<const uint8_t*>(name.data()), name.size()});
  EMBER_CHECK(bad < 0, "ImageFolder: the class folder '", escaped(dir.string()),
              "' has a name that is not UTF-8 (byte ", bad, " is ", escaped(name.substr(static_cast<size_t>(bad), 1)),
              "); class names are stored as UTF-8: rename the folder");
}

// The image files of the class folder `dir`, sorted. Images in a sub-folder are an error naming both levels.
std::vector<std::string> class_images(const std::string& root, const fs::path& dir,
                                      const std::vector<std::string>& exts) {
  std::vector<std::string> files, nested;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (hidden(it->path())) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() &&
        std::find(exts.begin(), exts.end(), lower(it->path().extension().string())) != exts.end())
      (it.depth() == 0 ? files : nested).push_back(it->path().string());
  }
  EMBER_CHECK(!ec, "ImageFolder: cannot list '", dir.string(), "': ", ec.message());
  if (!nested.empty()) {  // the first in path order, so that the message does not depend on the listing's order
    const fs::path image = *std::min_element(nested.begin(), nested.end());
    const std::string name = dir.filename().string();
    EMBER_FAIL("ImageFolder: the class folder '", dir.string(), "' has a sub-folder '",
               image.lexically_relative(dir).begin()->string(), "' with images (", image.string(), "): expected ", root,
               "/<class>/<image>, each image directly in its class folder",
               split_role(name) != Role::none
                   ? str("; '", name, "' looks like a split: read '", dir.string(), "' itself")
                   : std::string("; are the classes one level deeper?"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::optional<SplitFolders> find_split_folders(const std::string& root) {
  const std::vector<fs::path> folders = visible_folders(root);
  const auto holds_folders = [](const fs::path& p) { return !visible_folders(p.string()).empty(); };
  const auto split = std::find_if(folders.begin(), folders.end(), [&](const fs::path& p) {
    return split_role(p.filename().string()) != Role::none && holds_folders(p);
  });
  if (split == folders.end()) return std::nullopt;
  SplitFolders s;
  const std::string why =
      str(root, ": its folders are splits ('", split->filename().string(), "' holds class folders)");
  for (const fs::path& f : folders) {
    const std::string name = f.filename().string();
    const Role role = split_role(name);
    std::string* slot = role == Role::train  ? &s.train
                        : role == Role::val  ? &s.val
                        : role == Role::test ? &s.test
                                             : nullptr;
    EMBER_CHECK(slot != nullptr, why, ", but '", escaped(name), "' is none of the split names (", kSplitNames,
                "); move it out, or hide it as '.", escaped(name), "'");
    EMBER_CHECK(slot->empty(), why, ", and '", fs::path(*slot).filename().string(), "' and '", name,
                "' are the same split; keep one");
    *slot = f.string();
  }
  EMBER_CHECK(!s.train.empty(), why, ", but none is a training split (train/ or training/)");
  return s;
}

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options)
    : root_(std::move(root)), options_(std::move(options)) {
  const int c = options_.channels_;
  EMBER_CHECK(c == 0 || c == 1 || c == 3 || c == 4, "ImageFolder: channels must be 0 (as stored), 1, 3 or 4; got ", c);
  EMBER_CHECK((options_.height_ == 0) == (options_.width_ == 0) && options_.height_ >= 0 && options_.width_ >= 0,
              "ImageFolder: resize needs both a height and a width (got ", options_.height_, " x ", options_.width_,
              ")");
  EMBER_CHECK(options_.max_pixels_ >= 1 && options_.max_pixels_ <= kMaxImagePixelsLimit,
              "ImageFolder: max_pixels must be in [1, ", kMaxImagePixelsLimit, "]; got ", options_.max_pixels_);
  std::vector<std::string> exts;
  for (const std::string& e : options_.extensions_) exts.push_back(lower(e));

  std::error_code ec;
  EMBER_CHECK(fs::is_directory(root_, ec), "ImageFolder: '", root_, "' is not a directory",
              ec ? ": " + ec.message() : std::string());
  const std::vector<fs::path> class_dirs = visible_folders(root_);
  EMBER_CHECK(!class_dirs.empty(), "ImageFolder: '", root_,
              "' has no class subdirectories (expected root/<class>/<image>)");
  for (const fs::path& dir : class_dirs) check_class_name(dir);

  for (const fs::path& dir : class_dirs) {
    const auto label = static_cast<int64_t>(classes_.size());
    classes_.push_back(dir.filename().string());
    std::vector<std::string> files = class_images(root_, dir, exts);
    EMBER_CHECK(!files.empty(), "ImageFolder: class '", classes_.back(), "' (", dir.string(),
                ") has no image files with the extensions ", [&] {
                  std::string s;
                  for (const std::string& e : exts) s += (s.empty() ? "" : ", ") + e;
                  return s;
                }());
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

namespace {

std::string reason(const std::exception& e) { return user_message(e.what()); }

// The sample shape: the folder's (resized, fixed channels), else that of the first good image, which is decoded here
// into first_image (its index: `first`); the bad ones before it go to `bad`, or fail the load without skip_bad.
Shape sample_shape_of(const ImageFolder& folder, const FolderLoadOptions& o, std::vector<BadImage>& bad, int64_t& first,
                      Image& first_image) {
  first = 0;
  if (auto s = folder.sample_shape()) return *s;
  const int64_t n = folder.size();
  Shape shape;
  for (; first < n && shape.empty(); ++first) {
    try {
      first_image = folder.get(first).image;
      shape = first_image.shape();
    } catch (const std::exception& e) {
      if (!o.skip_bad) EMBER_FAIL(reason(e), " (", o.skip_hint, ")");
      bad.push_back({first, reason(e)});
    }
  }
  EMBER_CHECK(!shape.empty(), "all ", n, " images in ", folder.root(), " are bad");
  --first;
  return shape;
}

// Calls o.progress (when set) every half second until the workers are done or stopped.
void report_progress(const FolderLoadOptions& o, const std::atomic<int64_t>& done, int64_t n,
                     const std::atomic<bool>& stop) {
  if (!o.progress) return;
  auto last = std::chrono::steady_clock::now();
  o.progress(std::min(done.load(), n), n);
  while (done.load() < n && !stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::chrono::steady_clock::now() - last < std::chrono::milliseconds(500)) continue;
    last = std::chrono::steady_clock::now();
    o.progress(std::min(done.load(), n), n);
  }
}

// Closes the gaps the skipped images left in `images` (n x shape), keeping the folder's order; returns the labels of
// the images kept.
Tensor keep_good(Tensor& images, const std::vector<uint8_t>& good, const ImageFolder& folder, const Shape& shape) {
  const int64_t n = folder.size(), sample = shape[0] * shape[1] * shape[2];
  auto* px = static_cast<uint8_t*>(images.data_ptr());
  Tensor labels = empty({n}, TensorOptions(DType::i64));
  int64_t* lp = labels.data<int64_t>();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!good[static_cast<size_t>(i)]) continue;
    if (kept != i) std::memmove(px + kept * sample, px + i * sample, static_cast<size_t>(sample));
    lp[kept++] = folder.samples()[static_cast<size_t>(i)].second;
  }
  EMBER_CHECK(kept > 0, "all ", n, " images in ", folder.root(), " are bad");
  if (kept < n) {
    images = make_view(images, {kept, shape[0], shape[1], shape[2]}, {sample, shape[1] * shape[2], shape[2], 1}, 0);
    labels = make_view(labels, {kept}, {1}, 0);
  }
  return labels;
}

}  // namespace

std::shared_ptr<InMemoryDataset> load_image_folder(const ImageFolder& folder, const FolderLoadOptions& o,
                                                   std::vector<BadImage>* bad_out) {
  const int64_t n = folder.size();
  std::vector<BadImage> bad;
  const std::string skip_hint = " (" + o.skip_hint + ")";
  int64_t first = 0;
  Image first_image;
  const Shape shape = sample_shape_of(folder, o, bad, first, first_image);
  const int64_t sample = shape[0] * shape[1] * shape[2];
  Tensor images = empty({n, shape[0], shape[1], shape[2]}, TensorOptions(DType::u8));
  auto* px = static_cast<uint8_t*>(images.data_ptr());
  std::vector<uint8_t> good(static_cast<size_t>(n), 0);
  if (!first_image.pixels.empty()) {
    std::memcpy(px + first * sample, first_image.pixels.data(), static_cast<size_t>(sample));
    good[static_cast<size_t>(first)] = 1;
    first_image = Image();
  }

  const std::string& reference = folder.samples()[static_cast<size_t>(first)].first;
  std::atomic<int64_t> next{first + (good[static_cast<size_t>(first)] ? 1 : 0)}, done{next.load()};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<BadImage> fatal;  // stops the load
  auto decode_all = [&] {
    for (int64_t i; !stop.load() && (i = next.fetch_add(1)) < n; ++done) {
      try {
        Image img = folder.get(i).image;
        if (img.shape() != shape) {
          std::lock_guard<std::mutex> lock(mu);
          fatal.push_back({i, str("images differ in size: '", reference, "' is ", shape[1], "x", shape[2], " but '",
                                  folder.samples()[static_cast<size_t>(i)].first, "' is ", img.height, "x", img.width,
                                  " (HxW); ", o.resize_hint)});
          stop = true;
          continue;
        }
        std::memcpy(px + i * sample, img.pixels.data(), static_cast<size_t>(sample));
        good[static_cast<size_t>(i)] = 1;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (o.skip_bad) {
          bad.push_back({i, reason(e)});
        } else {
          fatal.push_back({i, reason(e) + skip_hint});
          stop = true;
        }
      }
    }
  };
  const int64_t threads = std::min<int64_t>(std::max(1, o.workers), n - next.load());
  // this thread reports while the workers decode
  run_workers(threads, stop, decode_all, [&] { report_progress(o, done, n, stop); });
  if (!fatal.empty())
    EMBER_FAIL(std::min_element(fatal.begin(), fatal.end(), [](const BadImage& a, const BadImage& b) {
                 return a.index < b.index;
               })->why);
  if (o.progress) o.progress(n, n);
  std::sort(bad.begin(), bad.end(), [](const BadImage& a, const BadImage& b) { return a.index < b.index; });
  Tensor labels = keep_good(images, good, folder, shape);
  if (bad_out != nullptr) *bad_out = std::move(bad);
  auto ds = std::make_shared<InMemoryDataset>(images, labels, folder.classes());
  ds->set_source(folder.root());
  return ds;
}

}  // namespace ember::data
