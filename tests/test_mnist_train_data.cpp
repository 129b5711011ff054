// mnist_train on a user's own images: --data as an ImageFolder (RGB of two sizes, resized; grey
// with train/ and test/), as a packed file from ember_pack, and as none of the three forms;
// --predict with the checkpoint's classes and normalisation; a checkpoint refused on other data.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "tests/data_test_util.h"
#include "tests/mnist_train_util.h"

#include "tests/stb_image_write_util.h"

using namespace ember;
using namespace ember::testing::app;
namespace fs = std::filesystem;

namespace {

// A w x h image of `channels` channels: class `c` of `colours` is bright in one channel (colour)
// or one brightness band (grey), over noise from a fixed LCG.
void write_image(const std::string& path, int h, int w, int channels, int c, uint32_t seed) {
  std::vector<uint8_t> px(static_cast<size_t>(h * w * channels));
  uint32_t s = seed * 2654435761u + 7;
  for (int i = 0; i < h * w; ++i)
    for (int k = 0; k < channels; ++k) {
      s = s * 1664525u + 1013904223u;
      const int noise = static_cast<int>(s >> 26);  // 0..63
      const int base = channels == 1 ? 40 + 150 * c : (k == c ? 190 : 30);
      px[static_cast<size_t>(i * channels + k)] = static_cast<uint8_t>(std::min(255, base + noise));
    }
  fs::create_directories(fs::path(path).parent_path());
  REQUIRE(stbi_write_png(path.c_str(), w, h, channels, px.data(), w * channels) != 0);
}

// root/<red|green|blue>/<n>.png, RGB, half of them 20x20 and half 24x18
void write_colour_folder(const std::string& root, int per_class) {
  const char* names[] = {"red", "green", "blue"};
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < per_class; ++i)
      write_image(root + "/" + names[c] + "/" + std::to_string(i) + ".png", i % 2 ? 20 : 24, i % 2 ? 20 : 18, 3, c,
                  static_cast<uint32_t>(100 * c + i));
}

const std::string kPack = EMBER_BINARY_DIR "/bin/ember_pack";

}  // namespace

TEST_CASE("mnist_train: trains on an ImageFolder and a packed file, predicts, refuses a mismatched checkpoint",
          "[mnist_train][data]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string folder = tmp.file("colours"), ck = tmp.file("ck.safetensors");
  write_colour_folder(folder, 30);
  auto common = [&](const std::string& data, std::vector<std::string> more) {
    std::vector<std::string> a = {"--data",   data, "--device",     "cpu", "--workers",   "2", "--model", "mlp",
                                  "--epochs", "4",  "--batch-size", "8",   "--val-split", "0"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  // two sizes without --resize: the error names both files and the flag
  RunResult r = run_app(common(folder, {}), tmp.path());
  check_error(r, 1, "images differ in size");
  CHECK(r.err.find(folder + "/blue/") != std::string::npos);
  CHECK(r.err.find("pass --resize HxW") != std::string::npos);

  // resized to one: trains well above chance (1 in 3), the classes from the folders
  r = run_app(common(folder, {"--resize", "16x16", "--save", ck}), tmp.path());
  require_success(r);
  CHECK(r.out.find("data: ImageFolder " + folder + ": 3x16x16 images of 3 classes") != std::string::npos);
  CHECK(r.out.find("normalised per channel with mean (") != std::string::npos);
  CHECK(r.out.find("72 train, 0 validation, 18 test images") != std::string::npos);  // --test-split 0.2, by class
  CHECK(r.out.find("red") != std::string::npos);
  CHECK(reported_test_accuracy(r.out) > 80.0);

  // --predict: classes and normalisation from the checkpoint, no --data read
  const std::string red = tmp.file("new/red.png"), blue = tmp.file("new/blue.bmp.png");
  write_image(red, 30, 30, 3, 0, 999);
  write_image(blue, 12, 12, 3, 2, 998);
  RunResult p =
      run_app({"--eval-only", ck, "--predict", red, blue, "--device", "cpu", "--data", "/nonexistent"}, tmp.path());
  require_success(p);
  CHECK(p.out.find(red + ": red ") != std::string::npos);
  CHECK(p.out.find(blue + ": blue ") != std::string::npos);
  CHECK(p.out.find("(then ") != std::string::npos);
  check_error(run_app({"--eval-only", ck, "--predict", tmp.file("missing.png"), "--device", "cpu"}, tmp.path()), 1,
              "missing.png");
  check_error(run_app({"--predict", red}, tmp.path()), 2, "--predict needs --eval-only");

  // a checkpoint of this data refused on other data, naming both
  const std::string idx = tmp.file("idx");
  write_synthetic_set(idx, false);
  check_error(run_app({"--data", idx, "--device", "cpu", "--eval-only", ck}, tmp.path()), 1,
              "the checkpoint's model takes 3x16x16 images of 3 classes (blue, green, red), but --data " + idx +
                  " has 1x28x28 images of 10 classes");
  check_error(run_app(common(idx, {"--resume", ck}), tmp.path()), 1,
              "--data: the image shape (CxHxW) 1x28x28 differs "
              "from the checkpoint's 3x16x16");

  check_error(run_app(common(idx, {"--resize", "8x8"}), tmp.path()), 1,
              "--resize applies to an ImageFolder; --data " + idx + " is an IDX set of 28x28 images");
  // before: ignored without a word
  check_error(run_app(common(idx, {"--test-split", "0.3"}), tmp.path()), 1,
              "--test-split applies to data without a test split of its own; --data " + idx + " has one (");
  // the held-out split is the run's: a resume with another is named as that flag, not as other data
  RunResult other = run_app(common(folder, {"--resize", "16x16", "--resume", ck, "--test-split", "0.3"}), tmp.path());
  check_error(other, 1, "--test-split 0.3 differs from the checkpoint's 0.2");
  CHECK(other.err.find("another dataset") == std::string::npos);

  // the same images packed by ember_pack
  if (!fs::exists(kPack)) WARN("SKIPPED (the packed part): " << kPack << " is not built");
  if (fs::exists(kPack)) {
    const std::string pack = tmp.file("colours.embpack");
    REQUIRE(std::system(("'" + kPack + "' '" + folder + "' '" + pack + "' --resize 16x16 > /dev/null").c_str()) == 0);
    r = run_app(common(pack, {}), tmp.path());
    require_success(r);
    CHECK(r.out.find("data: packed " + pack + ": 3x16x16 images of 3 classes") != std::string::npos);
    CHECK(reported_test_accuracy(r.out) > 80.0);
  }

  // none of the three forms: one error listing them
  fs::create_directories(tmp.file("empty"));
  testing::write_bytes(tmp.file("not_a_pack"), {'h', 'e', 'l', 'l', 'o', '!', '!', '!', '!'});
  for (const std::string& bad : {tmp.file("empty"), tmp.file("not_a_pack")}) {
    RunResult e = run_app(common(bad, {}), tmp.path());
    check_error(e, 1, "--data " + bad + ": ");
    CHECK(e.err.find("expected one of: a directory of IDX files") != std::string::npos);
    CHECK(e.err.find("an ImageFolder directory") != std::string::npos);
    CHECK(e.err.find("a packed file written by ember_pack") != std::string::npos);
  }
}

TEST_CASE("mnist_train: an ImageFolder with train/ and test/, grey images, and a bad image skipped on request",
          "[mnist_train][data]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string root = tmp.file("grey");
  const char* names[] = {"dark", "light"};
  for (const char* split : {"train", "test"})
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < (std::string(split) == "train" ? 24 : 8); ++i)
        write_image(root + "/" + split + "/" + names[c] + "/" + std::to_string(i) + ".png", 12, 12, 1, c,
                    static_cast<uint32_t>(1000 * c + i + (std::string(split) == "train" ? 0 : 500)));
  const std::string broken = root + "/train/light/broken.png";
  testing::write_bytes(broken, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0});
  std::vector<std::string> a = {"--data", root,       "--device", "cpu",          "--workers", "2",           "--model",
                                "cnn",    "--epochs", "3",        "--batch-size", "8",         "--val-split", "0"};
  RunResult r = run_app(a, tmp.path());
  check_error(r, 1, broken);
  CHECK(r.err.find("--skip-bad-images leaves such images out") != std::string::npos);
  a.push_back("--skip-bad-images");
  r = run_app(a, tmp.path());
  require_success(r);
  CHECK(r.out.find("1x12x12 images of 2 classes") != std::string::npos);
  CHECK(r.out.find("48 train, 0 validation, 16 test images") != std::string::npos);  // test/ as it is
  CHECK(r.out.find("1 bad image(s) left out (--skip-bad-images)") != std::string::npos);
  CHECK(r.err.find("broken.png") != std::string::npos);
  CHECK(reported_test_accuracy(r.out) > 80.0);
}

TEST_CASE("mnist_train: --predict checks a checkpoint's recorded shape, classes and normalisation first",
          "[mnist_train][data][checkpoint]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data"), img = tmp.file("x.png");
  write_synthetic_set(d, false);
  write_image(img, 28, 28, 1, 1, 5);
  // every model's real checkpoint predicts: the size the check expects is the model's
  for (const char* model : {"mlp", "cnn", "fast"}) {
    const std::string ck = tmp.file(std::string(model) + ".safetensors");
    require_success(run_app(quick(d, {"--model", model, "--epochs", "1", "--save", ck}), tmp.path()));
    require_success(run_app({"--eval-only", ck, "--predict", img, "--device", "cpu"}, tmp.path()));
  }
  const io::SafetensorsFile good = io::load_safetensors(tmp.file("mlp.safetensors"));
  struct Case {
    std::string key, value, needle;
  };
  const std::vector<Case> cases = {
      // before: a 1.3 MB checkpoint claiming 1x3000x3000 inputs made a model of 4.6 GB
      {"input_shape", "1x3000x3000",
       "records 1x3000x3000 inputs and 10 classes for --model mlp, which has 1152009034 values, but its model "
       "tensors hold 109386"},
      {"input_shape", "1x5000x5000", "expected 1 or 3 channels of 1x1 to 4096x4096 pixels"},
      {"input_shape", "-1x28x28", "expected 1 or 3 channels"},
      {"classes", "[\"one\"]", "names 1 class(es), a classifier has at least 2"},
      {"classes", "[\"a\",\"b\",\"c\"]", "records 1x28x28 inputs and 3 classes for --model mlp"},
      {"normalize_mean", "nan", "channel 0's normalisation (mean nan"},
      {"normalize_std", "0", "is not that of pixels on the [0, 1] scale"},
  };
  for (const Case& c : cases) {
    INFO(c.key << " = " << c.value);
    Metadata m = good.metadata;
    m.at("run." + c.key) = c.value;
    const std::string bad = tmp.file("bad.safetensors");
    io::save_safetensors(bad, good.tensors, m);
    check_error(run_app({"--eval-only", bad, "--predict", img, "--device", "cpu"}, tmp.path()), 1, c.needle);
  }
}

namespace {

// root/<split>/<dark|light>/<i>.png for each {split, images per class}: 12x12 grey, separable.
void write_grey_splits(const std::string& root, const std::vector<std::pair<std::string, int>>& splits) {
  const char* names[] = {"dark", "light"};
  uint32_t seed = 0;
  for (const auto& [split, n] : splits)
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < n; ++i)
        write_image(root + "/" + split + "/" + names[c] + "/" + std::to_string(i) + ".png", 12, 12, 1, c, ++seed);
}

std::vector<std::string> quick_run(const std::string& data, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--data",  data,  "--device", "cpu", "--workers",    "2",
                                "--model", "mlp", "--epochs", "1",   "--batch-size", "8"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

TEST_CASE("mnist_train: split folders (train/ with valid/, val/, dev/, Test/ ...) are splits, never classes",
          "[mnist_train][data]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  // train/ and valid/, no test/: valid/ is the validation set, --test-split comes out of train/
  const std::string tv = tmp.file("tv");
  write_grey_splits(tv, {{"train", 24}, {"valid", 6}});
  fs::create_directories(tv + "/.ipynb_checkpoints");  // hidden: neither a split nor a class
  RunResult r = run_app(quick_run(tv), tmp.path());
  require_success(r);
  CHECK(r.out.find("1x12x12 images of 2 classes") != std::string::npos);
  CHECK(r.out.find("38 train, 12 validation, 10 test images") != std::string::npos);
  // any case, all three
  const std::string tvt = tmp.file("tvt");
  write_grey_splits(tvt, {{"Train", 24}, {"Validation", 6}, {"Test", 8}});
  r = run_app(quick_run(tvt), tmp.path());
  require_success(r);
  CHECK(r.out.find("48 train, 12 validation, 16 test images") != std::string::npos);
  // --val-split would be ignored: a usage error
  check_error(
      run_app(quick_run(tv, {"--val-split", "0.2"}), tmp.path()), 2,
      "--val-split 0.2: --data " + tv + " has a validation split of its own (" + tv + "/valid); leave --val-split out");
  // without a validation split --val-split still comes out of train/
  const std::string tt = tmp.file("tt");
  write_grey_splits(tt, {{"TRAIN", 20}, {"test", 5}});
  r = run_app(quick_run(tt, {"--val-split", "0.1"}), tmp.path());
  require_success(r);
  CHECK(r.out.find("36 train, 4 validation, 10 test images") != std::string::npos);
  // splits under other names are class folders holding class folders: refused, naming both levels
  const std::string other = tmp.file("other");
  write_grey_splits(other, {{"part1", 4}, {"part2", 4}});
  check_error(run_app(quick_run(other), tmp.path()), 1,
              "the class folder '" + other + "/part1' has a sub-folder 'dark' with images");
  // a folder beside the splits that is none: named
  write_grey_splits(tv, {{"extra", 2}});
  check_error(run_app(quick_run(tv), tmp.path()), 1, "'extra' is none of the split names");
}

TEST_CASE("mnist_train: a class folder whose name is not UTF-8 is refused before training, naming it",
          "[mnist_train][data]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string root = tmp.file("latin1"), ck = tmp.file("ck.safetensors");
  write_grey_splits(root, {{"dark", 6}});  // root/dark/{dark,light}: rename the classes
  fs::rename(root + "/dark/dark", root + "/caf\xE9");
  fs::rename(root + "/dark/light", root + "/ok");
  fs::remove(root + "/dark");
  RunResult r = run_app(quick_run(root, {"--save", ck}), tmp.path());
  check_error(r, 1, "the class folder '" + root + "/caf\\xE9' has a name that is not UTF-8 (byte 3 is \\xE9)");
  CHECK(r.out.find("epoch") == std::string::npos);  // before, it trained and failed at the first checkpoint
  CHECK_FALSE(fs::exists(ck));
}
