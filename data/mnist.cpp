#include "data/mnist.h"

#include <sys/stat.h>

#include <cstdio>

#include "data/idx.h"

namespace ember::data {

namespace {

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string magic_str(uint32_t m) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", m);
  return buf;
}

}  // namespace

MnistFiles find_mnist_files(const std::string& dir, Split split) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  std::vector<std::string> looked;
  auto find = [&](const std::string& kind, const std::string& idx) -> std::string {
    for (const char* sub : {"", "/raw", "/MNIST/raw", "/FashionMNIST/raw"}) {
      for (const char* sep : {"-", "."}) {
        for (const char* ext : {"", ".gz"}) {
          std::string p = dir + sub + "/" + prefix + "-" + kind + sep + idx + "-ubyte" + ext;
          if (is_file(p)) return p;
          if (*sub == '\0') looked.push_back(p);
        }
      }
    }
    return "";
  };
  MnistFiles f{find("images", "idx3"), find("labels", "idx1")};
  if (f.images.empty() || f.labels.empty()) {
    std::string list;
    for (const std::string& l : looked) list += "\n  " + l;
    EMBER_FAIL("MNIST ", split == Split::train ? "train" : "test", " files not found in '", dir,
               "' (nor its raw/, MNIST/raw/, FashionMNIST/raw/ subdirectories); looked for:", list,
               "\n(Fashion-MNIST: apt-get install dataset-fashion-mnist puts them in /usr/share/datasets/fashion-mnist)");
  }
  return f;
}

std::shared_ptr<InMemoryDataset> load_mnist_files(const std::string& images_path, const std::string& labels_path) {
  IdxArray images = read_idx(images_path);
  if (images.magic != kIdxImagesMagic) {
    EMBER_FAIL(images_path, ": expected MNIST images, magic 0x00000803 (2051: u8, 3 dims [N, rows, cols]), got ",
               magic_str(images.magic), " (", images.magic, ": ", idx_type_name(images.type), ", ", images.dims.size(),
               " dims)", images.magic == kIdxLabelsMagic ? "; that is a labels file: are the two paths swapped?" : "");
  }
  EMBER_CHECK(images.dims[1] > 0 && images.dims[2] > 0, images_path, ": images of ", images.dims[1], " x ",
              images.dims[2], " pixels");
  IdxArray labels = read_idx(labels_path);
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
  return std::make_shared<InMemoryDataset>(img, lab, std::move(classes));
}

std::shared_ptr<InMemoryDataset> load_mnist(const std::string& dir, Split split) {
  MnistFiles f = find_mnist_files(dir, split);
  return load_mnist_files(f.images, f.labels);
}

}  // namespace ember::data
