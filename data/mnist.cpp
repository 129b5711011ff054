#include "data/mnist.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>

#include "data/idx.h"
#include "io/input_file.h"

namespace ember::data {

namespace {

// A regular file; a FIFO, device, socket or directory under a data file's name is an error saying
// what it is (read, it could block forever; skipped, the error would be "not found").
bool is_file(const std::string& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return false;
  EMBER_CHECK(S_ISREG(st.st_mode), "'", p, "' is ", io::file_kind_name(st.st_mode), ", not a regular file");
  return true;
}

// The note for a file that also exists gzip'd, printed on stderr once per file and process.
std::string both_note(const std::string& raw) {
  std::string note = str("both ", raw, " and ", raw, ".gz exist; reading ", raw, " (the uncompressed one)");
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(raw).second) std::fprintf(stderr, "ember: note: %s\n", note.c_str());
  return note;
}

std::string shape_str(const Tensor& images) {  // "1 x 28 x 28" of u8 [N, C, H, W]
  std::string out;
  for (int d = 1; d < images.dim(); ++d) out += (d > 1 ? " x " : "") + std::to_string(images.shape()[d]);
  return out;
}

std::string magic_str(uint32_t m) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", m);
  return buf;
}

}  // namespace

MnistFiles find_mnist_files(const std::string& dir, Split split) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  std::vector<std::string> looked, notes;
  auto find = [&](const std::string& kind, const std::string& idx) -> std::string {
    for (const char* sub : {"", "/raw", "/MNIST/raw", "/FashionMNIST/raw"}) {
      for (const char* sep : {"-", "."}) {
        for (const char* ext : {"", ".gz"}) {
          std::string p = dir + sub + "/" + prefix + "-" + kind + sep + idx + "-ubyte" + ext;
          if (is_file(p)) {
            // the uncompressed file wins (it is the one a user unpacked or edited last); say so
            if (*ext == '\0' && is_file(p + ".gz")) notes.push_back(both_note(p));
            return p;
          }
          if (*sub == '\0') looked.push_back(p);
        }
      }
    }
    return "";
  };
  MnistFiles f{find("images", "idx3"), find("labels", "idx1"), {}};
  f.notes = notes;
  if (f.images.empty() || f.labels.empty()) {
    std::string list;
    for (const std::string& l : looked) list += "\n  " + l;
    EMBER_FAIL(
        "MNIST ", split == Split::train ? "train" : "test", " files not found in '", dir,
        "' (nor its raw/, MNIST/raw/, FashionMNIST/raw/ subdirectories); looked for:", list,
        "\n(Fashion-MNIST: apt-get install dataset-fashion-mnist puts them in /usr/share/datasets/fashion-mnist)");
  }
  return f;
}

std::shared_ptr<InMemoryDataset> load_mnist_files(const std::string& images_path, const std::string& labels_path) {
  IdxArray images = read_idx(images_path);  // a wrong magic is reported below, with what it is
  if (images.magic != kIdxImagesMagic) {
    EMBER_FAIL(images_path, ": expected MNIST images, magic 0x00000803 (2051: u8, 3 dims [N, rows, cols]), got ",
               magic_str(images.magic), " (", images.magic, ": ", idx_type_name(images.type), ", ", images.dims.size(),
               " dims)", images.magic == kIdxLabelsMagic ? "; that is a labels file: are the two paths swapped?" : "");
  }
  EMBER_CHECK(images.dims[1] > 0 && images.dims[2] > 0, images_path, ": images of ", images.dims[1], " x ",
              images.dims[2], " pixels");
  // the magic is checked before the dims: an images file here would otherwise be read as labels of a
  // nonsense shape (its pixels taken for dims)
  IdxArray labels = read_idx(labels_path, IdxCompression::by_name, kIdxLabelsMagic);
  if (labels.magic != kIdxLabelsMagic) {
    EMBER_FAIL(labels_path, ": expected MNIST labels, magic 0x00000801 (2049: u8, 1 dim [N]), got ",
               magic_str(labels.magic), " (", labels.magic, ": ", idx_type_name(labels.type), ", ", labels.dims.size(),
               " dims)", labels.magic == kIdxImagesMagic ? "; that is an images file: are the two paths swapped?" : "");
  }
  EMBER_CHECK(images.dims[0] == labels.dims[0], "MNIST: ", images_path, " holds ", images.dims[0], " images but ",
              labels_path, " holds ", labels.dims[0], " labels; the counts must be equal");
  EMBER_CHECK(images.dims[0] > 0, images_path, ": the file holds no images");
  int max_label = 0;
  for (uint8_t l : labels.data) max_label = std::max<int>(max_label, l);
  std::vector<std::string> classes;
  for (int c = 0; c <= max_label; ++c) classes.push_back(std::to_string(c));
  Tensor img = images.to_tensor().unsqueeze(1);  // [N, 1, rows, cols]
  Tensor lab = labels.to_tensor().to(DType::i64);
  auto ds = std::make_shared<InMemoryDataset>(img, lab, std::move(classes));
  ds->set_source(images_path);
  return ds;
}

void check_same_image_size(const InMemoryDataset& train, const InMemoryDataset& test) {
  const Shape& a = train.images().shape();
  const Shape& b = test.images().shape();
  if (a.size() == b.size() && std::equal(a.begin() + 1, a.end(), b.begin() + 1)) return;
  auto name = [](const InMemoryDataset& d) { return d.source().empty() ? std::string("(in memory)") : d.source(); };
  EMBER_FAIL("the training and test images differ in size: ", name(train), " holds images of ",
             shape_str(train.images()), " (channels x height x width) but ", name(test), " holds ",
             shape_str(test.images()), "; a model takes one size: use training and test files of the same dataset");
}

std::shared_ptr<InMemoryDataset> load_mnist(const std::string& dir, Split split) {
  MnistFiles f = find_mnist_files(dir, split);
  return load_mnist_files(f.images, f.labels);
}

}  // namespace ember::data
