// ember_pack: converts an image dataset into one packed file (data/packed.h) that
// InMemoryDataset::load reads in a single read, so decoding and resizing happen once instead of
// every epoch.
//
//   ember_pack <input dir> <output file> [--split train|test] [--resize HxW] [--channels 1|3|4]
//              [--format auto|idx|folder] [--workers N]
//
// The input is a directory of MNIST-format IDX files (train-images-idx3-ubyte[.gz] and friends;
// --split picks train or t10k) or an ImageFolder (root/<class>/<image>, PNG/JPEG/BMP); "auto"
// (the default) uses IDX files when it finds them. ImageFolder images are decoded by --workers
// threads (default: all cores) and must all have one size unless --resize is given.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "data/data.h"

using namespace ember;
using namespace ember::data;

namespace {

// Exit codes: 0 success (and --help), 1 runtime error (a missing input, unreadable images, a failed
// write), 2 usage error. Errors are one line on stderr.
const char kUsage[] =
    "usage: ember_pack <input dir> <output file> [--split train|test] [--resize HxW]\n"
    "                  [--channels 1|3|4] [--format auto|idx|folder] [--workers N]\n"
    "  input: a directory of MNIST-format IDX files, or an ImageFolder (root/<class>/<image>)\n";

[[noreturn]] void usage(const char* msg) {
  if (*msg) std::fprintf(stderr, "ember_pack: error: %s (see --help)\n", msg);
  else std::fprintf(stderr, "%s", kUsage);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("ember_pack: packs an image dataset into one file that InMemoryDataset::load reads at once\n%s", kUsage);
      return 0;
    }
  if (argc < 3) usage(argc < 2 ? "missing <input dir> and <output file>" : "missing <output file>");
  std::string input = argv[1], output = argv[2], format = "auto";
  Split split = Split::train;
  int64_t rh = 0, rw = 0;
  int channels = 3;
  int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--split") {
      std::string v = value();
      if (v != "train" && v != "test") usage("--split must be train or test");
      split = v == "train" ? Split::train : Split::test;
    } else if (a == "--resize") {
      std::string v = value();
      if (std::sscanf(v.c_str(), "%ldx%ld", &rh, &rw) != 2 || rh <= 0 || rw <= 0) usage("--resize wants HxW, e.g. 32x32");
    } else if (a == "--channels") {
      channels = std::atoi(value().c_str());
      if (channels != 1 && channels != 3 && channels != 4) usage("--channels must be 1, 3 or 4");
    } else if (a == "--format") {
      format = value();
      if (format != "auto" && format != "idx" && format != "folder") usage("--format must be auto, idx or folder");
    } else if (a == "--workers") {
      workers = std::atoi(value().c_str());
      if (workers < 0) usage("--workers must be >= 0");
    } else {
      usage(("unknown option " + a).c_str());
    }
  }

  {
    struct stat st {};
    if (::stat(input.c_str(), &st) != 0) {
      std::fprintf(stderr, "ember_pack: error: the input directory %s does not exist\n", input.c_str());
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      std::fprintf(stderr, "ember_pack: error: the input %s is not a directory\n", input.c_str());
      return 1;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  bool folder = format == "folder";
  try {
    std::shared_ptr<InMemoryDataset> ds;
    if (format == "auto") {
      try {
        find_mnist_files(input, split);
      } catch (const Error&) {
        folder = true;
      }
    }
    if (!folder) {
      ds = load_mnist(input, split);
      if (rh > 0) {
        // resized by the loader's worker threads
        struct Wrap final : Dataset {
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
        auto w = std::make_shared<Wrap>();
        w->d = ds;
        w->rh = rh;
        w->rw = rw;
        ds = InMemoryDataset::from(w, workers);
      }
    } else {
      ImageFolderOptions o;
      o.channels(channels);
      if (rh > 0) o.resize(rh, rw);
      auto images = std::make_shared<ImageFolder>(input, o);
      std::printf("ember_pack: %s: %lld images in %zu classes, decoding with %d workers\n", input.c_str(),
                  static_cast<long long>(images->size()), images->classes().size(), workers);
      ds = InMemoryDataset::from(images, workers);
    }
    ds->save(output);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("ember_pack: wrote %s: %lld samples of [%lld, %lld, %lld] u8, %zu classes, %.1f MB, in %.2f s\n",
                output.c_str(), static_cast<long long>(ds->size()), static_cast<long long>(ds->images().size(1)),
                static_cast<long long>(ds->images().size(2)), static_cast<long long>(ds->images().size(3)),
                ds->classes().size(), static_cast<double>(file_size(output)) / 1e6, secs);
  } catch (const std::exception& e) {
    std::string msg = ember::user_message(e.what());
    const bool sizes = folder && rh == 0 && msg.find("--resize") == std::string::npos;
    std::fprintf(stderr, "ember_pack: error: %s%s\n", msg.c_str(),
                 sizes ? " (a packed dataset needs one image size; if the images differ, pass --resize HxW)" : "");
    return 1;
  }
  return 0;
}
