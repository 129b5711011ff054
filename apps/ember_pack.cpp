// ember_pack: converts an image dataset into one packed file (data/packed.h) that
// InMemoryDataset::load reads in a single read, so decoding and resizing happen once instead of
// every epoch.
//
//   ember_pack <input dir> <output file> [--split train|val|test] [--resize HxW] [--channels 1|3|4]
//              [--format auto|idx|folder] [--workers N] [--max-pixels N] [--skip-bad-images]
//
// The input is a directory of MNIST-format IDX files (train-images-idx3-ubyte[.gz] and friends;
// --split picks train or t10k) or an ImageFolder (root/<class>/<image>, PNG/JPEG/BMP; split by
// folder, root/train/<class>/... with val/ or test/, --split picks one); "auto" (the default) uses
// IDX files when it finds them. ImageFolder images are decoded by --workers threads (default: all
// cores) and must all have one size unless --resize is given. Every image is checked before it is
// decoded (data/image_decode.h): a corrupt, truncated or oversized one fails the pack, or with
// --skip-bad-images is left out and reported. The output is written atomically:
// a failed pack leaves no file behind (and an existing one untouched).
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/data.h"
#include "io/atomic_file.h"
#include "io/input_file.h"

using namespace ember;
using namespace ember::data;

namespace {

// Exit codes: 0 success (and --help), 1 runtime error (a missing input, unreadable or bad images, a
// failed write), 2 usage error. Errors are one line on stderr.
const char kUsage[] =
    "usage: ember_pack <input dir> <output file> [--split train|val|test] [--resize HxW]\n"
    "                  [--channels 1|3|4] [--format auto|idx|folder] [--workers N]\n"
    "                  [--max-pixels N] [--skip-bad-images]\n"
    "  input: a directory of MNIST-format IDX files, or an ImageFolder (root/<class>/<image>)\n"
    "  --split          which split to pack: an IDX set's train or test, a folder's train,\n"
    "                   val or test (root/<split>/<class>/<image>; default train)\n"
    "  --resize         resize every ImageFolder image to H x W (needed when their sizes differ)\n"
    "  --channels       ImageFolder images as 1 (grey), 3 (RGB, the default) or 4 (RGBA) channels\n"
    "  --workers        decoding threads, >= 1 (default: all cores)\n"
    "  --max-pixels     refuse an image whose header claims more pixels (default 268435456)\n"
    "  --skip-bad-images  leave out (and report) images that cannot be decoded instead of failing\n";

// How many skipped images are listed by name at the end (the count is always given).
constexpr size_t kListedBadImages = 5;

[[noreturn]] void usage(const std::string& msg) {
  if (!msg.empty()) std::fprintf(stderr, "ember_pack: error: %s (see --help)\n", msg.c_str());
  else std::fprintf(stderr, "%s", kUsage);
  std::exit(2);
}

// The whole of `s` as a decimal integer in [lo, hi] (no sign games, no trailing text, no overflow).
bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t& out) {
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || (s[0] == '-' && s.size() > 1))) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != 0 || v < lo || v > hi) return false;
  out = v;
  return true;
}

struct Options {
  std::string input, output, format = "auto", split_name = "train";
  Split split = Split::train;
  bool split_given = false, channels_given = false, skip_bad = false;
  int64_t rh = 0, rw = 0, channels = 3, max_pixels = kDefaultMaxImagePixels;
  int64_t workers = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
};

Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() < 2 || a[0] != '-') {
      positional.push_back(a);
      continue;
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + a);
      return argv[++i];
    };
    auto bad = [&](const std::string& v, const char* want) { usage(a + " " + (v.empty() ? "''" : v) + ": " + want); };
    if (a == "--split") {
      o.split_name = value();
      if (o.split_name != "train" && o.split_name != "val" && o.split_name != "test")
        bad(o.split_name, "must be train, val or test");
      o.split = o.split_name == "test" ? Split::test : Split::train;
      o.split_given = true;
    } else if (a == "--resize") {
      const std::string v = value();
      const size_t x = v.find('x');
      const int64_t side = kMaxImageSide;
      if (x == std::string::npos || !parse_int(v.substr(0, x), 1, side, o.rh) ||
          !parse_int(v.substr(x + 1), 1, side, o.rw))
        bad(v, "wants HxW with H and W in [1, 32768], e.g. 32x32");
    } else if (a == "--channels") {
      const std::string v = value();
      if (!parse_int(v, 1, 4, o.channels) || o.channels == 2) bad(v, "must be 1, 3 or 4");
      o.channels_given = true;
    } else if (a == "--format") {
      o.format = value();
      if (o.format != "auto" && o.format != "idx" && o.format != "folder") bad(o.format, "must be auto, idx or folder");
    } else if (a == "--workers") {
      const std::string v = value();
      if (!parse_int(v, 1, 1024, o.workers)) bad(v, "must be a whole number in [1, 1024]");
    } else if (a == "--max-pixels") {
      const std::string v = value();
      if (!parse_int(v, 1, kMaxImagePixelsLimit, o.max_pixels))
        bad(v, ("must be a whole number in [1, " + std::to_string(kMaxImagePixelsLimit) + "]").c_str());
    } else if (a == "--skip-bad-images") {
      o.skip_bad = true;
    } else {
      usage("unknown option " + a);
    }
  }
  if (positional.size() < 2)
    usage(positional.empty() ? "missing <input dir> and <output file>" : "missing <output file>");
  if (positional.size() > 2) usage("unexpected argument '" + positional[2] + "' (one input dir and one output file)");
  o.input = positional[0];
  o.output = positional[1];
  return o;
}

// False, saying why on stderr, unless the input is a directory.
bool input_is_directory(const Options& o) {
  struct stat st {};
  if (::stat(o.input.c_str(), &st) != 0) {
    std::fprintf(stderr, "ember_pack: error: the input directory %s does not exist\n", o.input.c_str());
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "ember_pack: error: the input %s is not a directory\n", o.input.c_str());
    return false;
  }
  return true;
}

// A pack inside its input tree would be read as part of the input the next time (an ImageFolder's file, or one of its
// classes' when it lands in a class folder), so it is a usage error, after links are resolved.
void refuse_output_in_input(const Options& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path in = fs::canonical(o.input, ec);
  fs::path out;
  try {
    out = fs::weakly_canonical(fs::absolute(io::resolve_output_path(o.output), ec), ec);
  } catch (const Error&) {
    return;  // a link loop: the output check says so
  }
  if (ec || in.empty()) return;
  if (std::mismatch(in.begin(), in.end(), out.begin(), out.end()).first == in.end())
    usage("the output " + o.output + " is inside the input directory " + o.input + " (" + out.string() + " is under " +
          in.string() + "); write the pack elsewhere");
}

// False, saying why on stderr, unless the output can be written. Checked before anything is decoded, so that a typo
// costs nothing (io::check_output_file, as mnist_train does). The pack replaces a regular file atomically; a device or
// FIFO (/dev/null) would take it and keep nothing, so it is refused.
bool output_is_writable(const Options& o) {
  try {
    if (io::check_output_file("the output", o.output, true) == io::TargetKind::kWriteThrough) {
      struct stat st {};
      ::stat(o.output.c_str(), &st);
      EMBER_FAIL("the output ", o.output, " is ", io::file_kind_name(st.st_mode),
                 ", not a regular file; ember_pack writes a packed file to keep");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember_pack: error: %s\n", ember::user_message(e.what()).c_str());
    return false;
  }
  return true;
}

// Whether the input is read as an ImageFolder (--format, or "auto" without IDX files of the split). Options that only
// the other kind of input uses are a usage error: they would otherwise be ignored without a word.
bool read_as_folder(const Options& o) {
  bool folder = o.format == "folder";
  if (o.format == "auto") {
    try {
      find_mnist_files(o.input, o.split);
    } catch (const Error&) {
      folder = true;
    }
  }
  if (!folder && o.split_name == "val")
    usage("--split val: " + o.input + " is an IDX set, whose splits are train and test");
  if (!folder && o.channels_given && o.channels != 1)
    usage("--channels " + std::to_string(o.channels) + ": an IDX set is greyscale (1 channel)");
  return folder;
}

// The folder to pack: the input, or its split --split (train by default) when the input is split by folder,
// root/<split>/<class>/<image> (data::find_split_folders).
std::string folder_to_pack(const Options& o) {
  const std::optional<SplitFolders> f = find_split_folders(o.input);
  if (!f) {
    if (o.split_given)
      usage("--split " + o.split_name + ": " + o.input + " is read as an ImageFolder (no IDX " +
            (o.split == Split::train ? "train" : "t10k") + " files found), which has no splits");
    return o.input;
  }
  const std::string& dir = o.split_name == "val" ? f->val : o.split_name == "test" ? f->test : f->train;
  std::string splits;
  for (const std::string* d : {&f->train, &f->val, &f->test})
    if (!d->empty()) splits += (splits.empty() ? "" : ", ") + d->substr(d->rfind('/') + 1) + "/";
  if (dir.empty()) usage("--split " + o.split_name + ": " + o.input + " has no such split (it has " + splits + ")");
  if (!o.split_given)
    std::printf("ember_pack: %s is split by folder (%s): packing %s (--split val or test packs another)\n",
                o.input.c_str(), splits.c_str(), dir.c_str());
  return dir;
}

// An IDX set with each image resized to rh x rw as it is read (by the loader's worker threads).
struct ResizedIdx final : Dataset {
  std::shared_ptr<InMemoryDataset> d;
  int64_t rh, rw;
  int64_t size() const override { return d->size(); }
  Sample get(int64_t i) const override {
    Sample s = d->get(i);
    s.image = resize_image(s.image, rh, rw);
    return s;
  }
  std::optional<Shape> sample_shape() const override { return Shape{d->images().size(1), rh, rw}; }
  std::vector<std::string> classes() const override { return d->classes(); }
};

std::shared_ptr<InMemoryDataset> load_idx(const Options& o, int64_t& total) {
  std::shared_ptr<InMemoryDataset> ds = load_mnist(o.input, o.split);
  total = ds->size();
  if (o.rh > 0) {
    auto w = std::make_shared<ResizedIdx>();
    w->d = ds;
    w->rh = o.rh;
    w->rw = o.rw;
    ds = InMemoryDataset::from(w, static_cast<int>(o.workers));
  }
  return ds;
}

// The ImageFolder's images decoded by o.workers threads; the ones left out by --skip-bad-images into `bad`.
std::shared_ptr<InMemoryDataset> load_folder(const Options& o, int64_t& total, std::vector<BadImage>& bad) {
  ImageFolderOptions fo;
  fo.channels(static_cast<int>(o.channels)).max_pixels(o.max_pixels);
  if (o.rh > 0) fo.resize(o.rh, o.rw);
  ImageFolder images(folder_to_pack(o), fo);
  total = images.size();
  std::printf("ember_pack: %s: %lld images in %zu classes, decoding with %lld workers\n", images.root().c_str(),
              static_cast<long long>(total), images.classes().size(),
              static_cast<long long>(std::min(o.workers, total)));
  std::fflush(stdout);
  FolderLoadOptions lo;
  lo.workers = static_cast<int>(std::min<int64_t>(o.workers, 1 << 16));
  lo.skip_bad = o.skip_bad;
  lo.resize_hint = "a packed dataset needs one size: pass --resize HxW";
  return load_image_folder(images, lo, &bad);
}

void print_written(const Options& o, const InMemoryDataset& ds, double secs, size_t skipped, int64_t total) {
  std::printf("ember_pack: wrote %s: %lld samples of [%lld, %lld, %lld] u8, %zu classes, %.1f MB, in %.2f s",
              o.output.c_str(), static_cast<long long>(ds.size()), static_cast<long long>(ds.images().size(1)),
              static_cast<long long>(ds.images().size(2)), static_cast<long long>(ds.images().size(3)),
              ds.classes().size(), static_cast<double>(file_size(o.output)) / 1e6, secs);
  if (skipped > 0) std::printf(" (skipped %zu bad images of %lld)", skipped, static_cast<long long>(total));
  std::printf("\n");
}

// The images --skip-bad-images left out: their count, and the first few by name with the reason.
void warn_skipped(const std::vector<BadImage>& bad, int64_t total) {
  std::fflush(stdout);
  std::fprintf(stderr,
               "ember_pack: warning: skipped %zu of %lld images that could not be decoded (--skip-bad-images)%s\n",
               bad.size(), static_cast<long long>(total), bad.size() > kListedBadImages ? "; the first ones:" : ":");
  for (size_t i = 0; i < std::min(bad.size(), kListedBadImages); ++i)
    std::fprintf(stderr, "ember_pack: warning:   %s\n", bad[i].why.c_str());
  if (bad.size() > kListedBadImages)
    std::fprintf(stderr, "ember_pack: warning:   ... and %zu more\n", bad.size() - kListedBadImages);
}

}  // namespace

int main(int argc, char** argv) {
  ember::install_terminate_handler("ember_pack");  // Note [no abort] in core/error.h
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("ember_pack: packs an image dataset into one file that InMemoryDataset::load reads at once\n%s",
                  kUsage);
      return 0;
    }
  const Options o = parse(argc, argv);
  if (!input_is_directory(o)) return 1;
  refuse_output_in_input(o);
  if (!output_is_writable(o)) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<BadImage> bad;
  int64_t total = 0;
  try {
    const std::shared_ptr<InMemoryDataset> ds = read_as_folder(o) ? load_folder(o, total, bad) : load_idx(o, total);
    ds->save(o.output);  // atomic: a temporary file renamed into place (io/atomic_file.h)
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    print_written(o, *ds, secs, bad.size(), total);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember_pack: error: %s\n", ember::user_message(e.what()).c_str());
    return 1;
  }
  if (!bad.empty()) warn_skipped(bad, total);
  return 0;
}
