#include "apps/mnist_train/splits.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/hash.h"
#include "io/input_file.h"
#include "kernels/functional.h"

namespace mnist {

using namespace ember;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kFashionClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// The one error for a --data that is none of the three forms.
[[noreturn]] void not_a_dataset(const std::string& path, const std::string& what) {
  EMBER_FAIL("--data ", path, ": ", what,
             "; expected one of: a directory of IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
             "t10k-... raw or .gz), an ImageFolder directory (root/<class>/<image>.png|.jpg|.bmp, or "
             "split by folder: root/train/<class>/... with root/valid/... and root/test/... if any), or a packed file "
             "written by ember_pack");
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// Whether `dir` holds MNIST-format IDX files (where data::find_mnist_files looks for them).
bool has_idx(const std::string& dir) {
  for (const char* sub : {"", "/raw", "/MNIST/raw", "/FashionMNIST/raw"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir + sub, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("train-images", 0) == 0 || name.rfind("t10k-images", 0) == 0) return true;
    }
  }
  return false;
}

bool has_subdirs(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) && !e.path().filename().string().starts_with('.')) return true;
  return false;
}

std::shared_ptr<data::InMemoryDataset> subset(const data::InMemoryDataset& ds, const std::vector<int64_t>& idx) {
  Tensor i = tensor_i64(idx, {static_cast<int64_t>(idx.size())});
  auto out = std::make_shared<data::InMemoryDataset>(index_select(ds.images(), 0, i), index_select(ds.labels(), 0, i),
                                                     ds.classes());
  out->set_source(ds.source());
  return out;
}

// Holds out `fraction` of each class (seeded): {kept, held out}, each in the set's order.
std::pair<std::vector<int64_t>, std::vector<int64_t>> stratified_split(const Tensor& labels, int64_t classes,
                                                                       double fraction, uint64_t seed) {
  std::vector<std::vector<int64_t>> by_class(static_cast<size_t>(classes));
  const auto* y = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) by_class[static_cast<size_t>(y[i])].push_back(i);
  std::mt19937_64 rng(seed ^ 0x7e57ULL);
  std::vector<int64_t> kept, held;
  for (std::vector<int64_t>& c : by_class) {
    std::shuffle(c.begin(), c.end(), rng);
    auto k = static_cast<size_t>(std::llround(static_cast<double>(c.size()) * fraction));
    if (k == 0 && c.size() >= 2) k = 1;  // every class with two images or more is tested
    held.insert(held.end(), c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k));
    kept.insert(kept.end(), c.begin() + static_cast<std::ptrdiff_t>(k), c.end());
  }
  std::sort(kept.begin(), kept.end());
  std::sort(held.begin(), held.end());
  return {kept, held};
}

void check_labels(const data::InMemoryDataset& ds, int64_t classes, const std::string& where, const std::string& name) {
  const auto* y = ds.labels().data<int64_t>();
  for (int64_t i = 0; i < ds.size(); ++i)
    EMBER_CHECK(y[i] >= 0 && y[i] < classes, where, ": label ", y[i], " of ", name, " image ", i, " is not a class 0-",
                classes - 1, classes == 10 ? " (MNIST-format sets have 10 classes)" : "");
}

// ImageFolder: decoded once, with --workers threads, into memory. Grey stays 1 channel, colour is
// 3 (an alpha channel is dropped); the first image that decodes decides, the others are converted.
std::shared_ptr<data::InMemoryDataset> load_folder(const std::string& root, const Options& o, int64_t& skipped) {
  data::ImageFolderOptions fo;
  fo.channels(0);
  data::ImageFolder probe(root, fo);
  int channels = 0;
  for (const auto& [path, label] : probe.samples()) {
    try {
      const int64_t c = data::load_image(path, 0).channels;
      channels = c <= 2 ? 1 : 3;
      break;
    } catch (const std::exception& e) {
      if (!o.skip_bad_images) throw;
    }
  }
  EMBER_CHECK(channels > 0, "all ", probe.size(), " images in ", root, " are bad");
  fo.channels(channels);
  if (o.resize_h > 0) fo.resize(o.resize_h, o.resize_w);
  data::ImageFolder folder(root, fo);
  data::FolderLoadOptions lo;
  lo.workers = std::max(1, o.workers);
  lo.skip_bad = o.skip_bad_images;
  lo.resize_hint = "pass --resize HxW";
  const bool tty = !o.quiet && ::isatty(1) == 1;
  if (tty)
    lo.progress = [&](int64_t done, int64_t total) {
      std::printf("\rdata: decoding %s: %lld of %lld images", root.c_str(), static_cast<long long>(done),
                  static_cast<long long>(total));
      std::fflush(stdout);
    };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<data::BadImage> bad;
  auto ds = data::load_image_folder(folder, lo, &bad);
  if (tty) std::printf("\n");
  skipped += static_cast<int64_t>(bad.size());
  if (!o.quiet)
    std::printf("data: %s: %lld images in %zu classes decoded with %d worker(s) in %.1f s%s\n", root.c_str(),
                static_cast<long long>(ds->size()), ds->classes().size(), lo.workers,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                bad.empty() ? "" : str(", ", bad.size(), " bad image(s) left out (--skip-bad-images)").c_str());
  for (size_t i = 0; i < std::min<size_t>(bad.size(), 5); ++i)
    std::fprintf(stderr, "mnist_train: warning: left out %s\n", bad[i].why.c_str());
  return ds;
}

}  // namespace

std::optional<TrainedOn> trained_on(const Metadata& metadata, const std::string& what) {
  auto meta = [&](const char* key) {
    auto it = metadata.find(std::string("run.") + key);
    return it == metadata.end() ? std::string() : it->second;
  };
  const std::string shape = meta("input_shape");
  if (shape.empty()) return std::nullopt;
  TrainedOn t;
  t.model = meta("model");
  char end = 0;
  EMBER_CHECK(
      std::sscanf(shape.c_str(), "%ldx%ldx%ld%c", &t.shape.channels, &t.shape.height, &t.shape.width, &end) == 3, what,
      ": the metadata 'run.input_shape' is '", shape, "', expected CxHxW; the checkpoint is damaged");
  // Bounded before anything is sized by them: a damaged or forged checkpoint must not make a model
  // (or inputs) of gigabytes. 1 or 3 channels is what the data forms give, 4096 the largest --resize.
  const bool sane = (t.shape.channels == 1 || t.shape.channels == 3) && t.shape.height >= 1 && t.shape.height <= 4096 &&
                    t.shape.width >= 1 && t.shape.width <= 4096;
  EMBER_CHECK(sane, what, ": the metadata 'run.input_shape' is '", shape,
              "', expected 1 or 3 channels of 1x1 to 4096x4096 pixels; the checkpoint is damaged");
  try {
    t.classes = nlohmann::json::parse(meta("classes")).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception&) {
    EMBER_FAIL(what, ": the metadata 'run.classes' is not a JSON list of names; the checkpoint is damaged");
  }
  t.shape.classes = static_cast<int64_t>(t.classes.size());
  EMBER_CHECK(t.shape.classes >= 2, what, ": the metadata 'run.classes' names ", t.shape.classes,
              " class(es), a classifier has at least 2; the checkpoint is damaged");
  t.mean = parse_doubles(meta("normalize_mean"));
  t.std = parse_doubles(meta("normalize_std"));
  EMBER_CHECK(t.mean.size() == static_cast<size_t>(t.shape.channels) && t.std.size() == t.mean.size(), what,
              ": the metadata 'run.normalize_mean' / 'run.normalize_std' do not hold one value per channel; the "
              "checkpoint is damaged");
  for (size_t c = 0; c < t.mean.size(); ++c)  // pixels on the [0, 1] scale: so are their mean and std
    EMBER_CHECK(t.mean[c] >= 0 && t.mean[c] <= 1 && t.std[c] > 0 && t.std[c] <= 1, what, ": channel ", c,
                "'s normalisation (mean ", t.mean[c], ", std ", t.std[c],
                ") is not that of pixels on the [0, 1] scale; the checkpoint is damaged");
  return t;
}

std::string shape_text(const InputShape& s) { return str(s.channels, "x", s.height, "x", s.width); }

std::string exact_text(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

std::string doubles_text(const std::vector<double>& v) {
  std::string out;
  for (double x : v) {
    if (!out.empty()) out += ',';
    out += exact_text(x);
  }
  return out;
}

std::vector<double> parse_doubles(const std::string& text) {
  std::vector<double> out;
  for (size_t b = 0; b < text.size();) {
    size_t e = text.find(',', b);
    if (e == std::string::npos) e = text.size();
    out.push_back(std::strtod(text.substr(b, e - b).c_str(), nullptr));
    b = e + 1;
  }
  return out;
}

namespace {

// What --data holds, loaded: the training set, and the validation and test sets when the data has its own (else
// null).
struct Loaded {
  std::shared_ptr<data::InMemoryDataset> train, val, test;
};

// A split folder's classes and image size must be the training split's.
void check_like_train(const std::string& path, const std::string& split, const data::InMemoryDataset& train,
                      const data::InMemoryDataset& other) {
  const std::string name = fs::path(split).filename().string();
  EMBER_CHECK(train.classes() == other.classes(), "--data ", path, ": the training split and ", name,
              "/ have different classes (", train.classes().size(), " and ", other.classes().size(),
              " class folders); they must be the same");
  const Tensor &a = train.images(), &b = other.images();
  EMBER_CHECK(a.size(1) == b.size(1) && a.size(2) == b.size(2) && a.size(3) == b.size(3), "--data ", path,
              ": the training images are ", a.size(1), "x", a.size(2), "x", a.size(3), " but the ", name, "/ images ",
              b.size(1), "x", b.size(2), "x", b.size(3), " (CxHxW); pass --resize HxW");
}

// An image tree split by folder (data::find_split_folders): each split decoded on its own.
Loaded load_split_folders(const std::string& path, const data::SplitFolders& f, const Options& o, Splits& s) {
  s.kind = "ImageFolder";
  Loaded l;
  l.train = load_folder(f.train, o, s.skipped_images);
  for (auto [dir, set] : {std::pair{f.val, &l.val}, std::pair{f.test, &l.test}}) {
    if (dir.empty()) continue;
    *set = load_folder(dir, o, s.skipped_images);
    check_like_train(path, dir, *l.train, **set);
  }
  return l;
}

Loaded load_source(const Options& o, Splits& s) {
  const std::string& path = o.data;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    not_a_dataset(path, errno == ENOENT ? std::string("not found (no such file or directory)")
                                        : std::string("cannot be read (") + std::strerror(errno) + ")");
  if (S_ISREG(st.st_mode)) {  // a packed file
    uint64_t size = 0;
    const int fd = io::open_regular_file(path, &size);
    char magic[8] = {};
    const ssize_t got = ::pread(fd, magic, sizeof magic, 0);
    ::close(fd);
    if (got != 8 || std::memcmp(magic, data::kPackedMagic, 8) != 0)
      not_a_dataset(path, "a file that is not a packed dataset (it does not begin with EMBPACK1)");
    s.kind = "packed";
    return {data::InMemoryDataset::load(path), nullptr, nullptr};
  }
  if (!S_ISDIR(st.st_mode)) not_a_dataset(path, std::string("is ") + io::file_kind_name(st.st_mode));
  if (has_idx(path)) {
    s.kind = "IDX";
    auto train = data::load_mnist(path, data::Split::train);
    auto test = data::load_mnist(path, data::Split::test);
    data::check_same_image_size(*train, *test);  // both files and both sizes, before anything trains
    return {train, nullptr, test};
  }
  if (const std::optional<data::SplitFolders> f = data::find_split_folders(path))
    return load_split_folders(path, *f, o, s);
  if (!has_subdirs(path)) not_a_dataset(path, "a directory with neither IDX files nor class folders");
  s.kind = "ImageFolder";
  return {load_folder(path, o, s.skipped_images), nullptr, nullptr};
}

// The class names: the folders', the packed file's, or MNIST's ten.
std::vector<std::string> class_names(const Splits& s, const std::string& path, const data::InMemoryDataset& train) {
  if (s.kind == "IDX") {
    std::string lower = path;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower.find("fashion") != std::string::npos) return kFashionClasses;
    return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  }
  std::vector<std::string> names = train.classes();
  if (names.empty()) {  // a packed file without names: classes 0 .. max label
    int64_t k = 1;
    const auto* y = train.labels().data<int64_t>();
    for (int64_t i = 0; i < train.size(); ++i) k = std::max(k, y[i] + 1);
    for (int64_t c = 0; c < std::max<int64_t>(k, 2); ++c) names.push_back(std::to_string(c));
  }
  return names;
}

// A checksum of the labels (i64, contiguous), training, validation (a split of the data's own) then test, in order.
std::string labels_checksum(const Loaded& l) {
  uint64_t h = kFnv1aBasis;
  for (const auto& ds : {l.train, l.val, l.test}) {
    if (!ds) continue;
    const Tensor y = ds->labels().contiguous();
    h = fnv1a(y.data_ptr(), y.nbytes(), h);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// Per-channel mean and std of u8 [N, C, H, W] pixels on the [0, 1] scale.
void measure_normalisation(const Tensor& img, Splits& s) {
  const int64_t c = img.size(1), plane = img.size(2) * img.size(3);
  s.mean.assign(static_cast<size_t>(c), 0.0);
  s.std.assign(static_cast<size_t>(c), 1.0);
  const auto* p = img.data<uint8_t>();
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    int64_t m = 0;
    for (int64_t i = 0; i < img.size(0); ++i)
      for (int64_t q = 0; q < plane; ++q, ++m) {
        const double v = p[(i * c + ch) * plane + q] / 255.0;
        sum += v;
        sq += v * v;
      }
    const double mean = m > 0 ? sum / static_cast<double>(m) : 0.0;
    s.mean[static_cast<size_t>(ch)] = mean;
    s.std[static_cast<size_t>(ch)] =
        m > 0 ? std::sqrt(std::max(sq / static_cast<double>(m) - mean * mean, 1e-12)) : 1.0;
  }
}

// Validation: the data's own split, else a seeded permutation of --val-split of the training set.
void split_validation(const Options& o, Loaded& l, Splits& s) {
  if (l.val) {
    s.train = l.train;
    s.val = l.val;
    return;
  }
  const int64_t n = l.train->size();
  const auto nv = static_cast<int64_t>(std::llround(static_cast<double>(n) * o.val_split));
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(o.seed ^ 0x5eedULL);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int64_t> val(perm.begin(), perm.begin() + nv), tr(perm.begin() + nv, perm.end());
  std::sort(val.begin(), val.end());
  std::sort(tr.begin(), tr.end());
  s.train = subset(*l.train, tr);
  s.val = nv > 0 ? subset(*l.train, val) : nullptr;
}

}  // namespace

std::string data_usage_error(const Options& o) {
  if (!o.val_split_given || !is_dir(o.data) || has_idx(o.data)) return "";
  std::optional<data::SplitFolders> f;
  try {
    f = data::find_split_folders(o.data);
  } catch (const std::exception&) {
    return "";  // not a usable tree: loading it says why
  }
  if (!f || f->val.empty()) return "";
  return str("--val-split ", o.val_split, ": --data ", o.data, " has a validation split of its own (", f->val,
             "); leave --val-split out");
}

Splits load_splits(const Options& o) {
  Splits s;
  Loaded l = load_source(o, s);
  // an option that only one form uses would otherwise be ignored without a word
  EMBER_CHECK(o.resize_h == 0 || s.kind == "ImageFolder", "--resize applies to an ImageFolder; --data ", o.data, " is ",
              s.kind == "IDX" ? "an IDX set" : "a packed file (ember_pack --resize sizes its images)", " of ",
              l.train->images().size(2), "x", l.train->images().size(3), " images");
  s.classes = class_names(s, o.data, *l.train);
  const auto k = static_cast<int64_t>(s.classes.size());
  // the models have K outputs and the confusion matrix K rows: say so here, not as an index error
  check_labels(*l.train, k, o.data, "training");
  if (l.val) check_labels(*l.val, k, o.data, "validation");
  if (l.test) check_labels(*l.test, k, o.data, "test");
  s.train_file_images = l.train->size();  // the identity: the sets as loaded, before any split
  s.test_file_images = l.test ? l.test->size() : 0;
  s.labels_checksum = labels_checksum(l);
  // like --resize: an option the data leaves nothing to do for is refused, not ignored
  EMBER_CHECK(!l.test || !o.test_split_given, "--test-split applies to data without a test split of its own; --data ",
              o.data, " has one (", l.test ? l.test->size() : 0, " images)");
  s.test_held_out = !l.test;
  if (!l.test) {  // an ImageFolder without a test split, or a packed file
    auto [kept, held] = stratified_split(l.train->labels(), k, o.test_split, o.seed);
    EMBER_CHECK(!kept.empty() && !held.empty(), "--data ", o.data, ": ", l.train->size(),
                " images are too few to hold out --test-split ", o.test_split, " and train on the rest");
    l.test = subset(*l.train, held);
    l.train = subset(*l.train, kept);
    s.test_file_images = l.test->size();
  }
  s.test = l.test;
  split_validation(o, l, s);
  const Tensor& img = s.train->images();  // u8 [N, C, H, W]
  s.shape = InputShape{img.size(1), img.size(2), img.size(3), k};
  measure_normalisation(img, s);  // 0.2860 / 0.3530 on Fashion-MNIST
  return s;
}

}  // namespace mnist
