// ImageFolder: images stored as root/<class>/<image>, torchvision's layout.
//
// Classes are the subdirectories of root, sorted by name (label = position); images are the files
// in each class directory whose extension is one of options.extensions (case insensitive), sorted
// by path. Names starting with '.' (.ipynb_checkpoints, .DS_Store) are neither classes nor images.
// A class folder with images in a sub-folder is an error naming both: its sub-folders are classes
// (or splits) of their own, and reading them as one class would train a classifier of the wrong
// thing. A class folder whose name is not UTF-8 is an error too (class names are stored in
// checkpoints, whose metadata is UTF-8 JSON). Images are decoded when a sample is read (in the
// loader's worker threads): an unreadable, corrupt, truncated or oversized file raises an error
// naming its path and what is wrong with it (data/image_decode.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/image_decode.h"
#include "data/in_memory.h"

namespace ember::data {

struct ImageFolderOptions {
  int channels_ = 3;    // 1 greyscale, 3 RGB, 4 RGBA (converted as needed); 0 as stored
  int64_t height_ = 0;  // resize every image to height x width (0: keep each image's size)
  int64_t width_ = 0;
  std::vector<std::string> extensions_ = {".png", ".jpg", ".jpeg", ".bmp"};
  // An image whose header claims more pixels (width x height) is an error, raised before it is
  // decoded; in [1, kMaxImagePixelsLimit].
  int64_t max_pixels_ = kDefaultMaxImagePixels;

  ImageFolderOptions& channels(int c) {
    channels_ = c;
    return *this;
  }
  ImageFolderOptions& resize(int64_t h, int64_t w) {
    height_ = h;
    width_ = w;
    return *this;
  }
  ImageFolderOptions& extensions(std::vector<std::string> e) {
    extensions_ = std::move(e);
    return *this;
  }
  ImageFolderOptions& max_pixels(int64_t n) {
    max_pixels_ = n;
    return *this;
  }
};

class ImageFolder final : public Dataset {
 public:
  explicit ImageFolder(std::string root, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Sample get(int64_t i) const override;
  // Known when images are resized and converted to a fixed number of channels.
  std::optional<Shape> sample_shape() const override;
  std::vector<std::string> classes() const override { return classes_; }

  const std::string& root() const { return root_; }
  // (path, label) of every sample, in sample order.
  const std::vector<std::pair<std::string, int64_t>>& samples() const { return samples_; }

 private:
  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, int64_t>> samples_;
};

// An image tree split by folder, root/<split>/<class>/<image>: the split folders' paths, empty
// where the tree has no such split.
struct SplitFolders {
  std::string train, val, test;
};

// The split folders of `root`, or nullopt when its folders are classes (a flat ImageFolder). Split
// names, in any case: train, training; val, valid, validation, dev; test, testing. A folder so
// named is a split when it holds folders itself (a flat ImageFolder may have a class "train" of
// images). Then every visible folder of root must be a split, one per role, and a training split
// must be there; otherwise an error names the folder.
std::optional<SplitFolders> find_split_folders(const std::string& root);

// An image left out by load_image_folder: its position in the folder and what is wrong with it
// (the message names the file).
struct BadImage {
  int64_t index;
  std::string why;
};

struct FolderLoadOptions {
  int workers = 1;        // decoding threads (at least 1)
  bool skip_bad = false;  // leave out (and list) images that cannot be decoded, instead of failing
  // what the error about images of different sizes tells the user to do ("pass --resize HxW"),
  // and what a bad image's error says about skipping
  std::string resize_hint = "resize them to one size";
  std::string skip_hint = "--skip-bad-images leaves such images out";
  // called from one thread about every 0.5 s while images decode, and once at the end
  std::function<void(int64_t done, int64_t total)> progress;
};

// Decodes every image of `folder` with `workers` threads straight into one in-memory dataset
// (u8 [N, C, H, W], the folder's order and classes). Every image must decode to the folder's
// sample shape (its resize) or, without one, to the first good image's shape: another size is an
// error naming both files either way (that is a setting, not a bad file). A bad image fails the
// load (the first one in folder order among those found) unless skip_bad; then it is left out
// and listed in *bad, in folder order. All images bad is an error.
std::shared_ptr<InMemoryDataset> load_image_folder(const ImageFolder& folder, const FolderLoadOptions& options,
                                                   std::vector<BadImage>* bad = nullptr);

}  // namespace ember::data
