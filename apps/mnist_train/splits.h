// Where mnist_train's data comes from: the three forms --data takes (an IDX directory, an
// ImageFolder directory, a packed file from ember_pack), the test, validation and training
// splits, and the per-channel normalisation measured on the training split.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/mnist_train/models.h"
#include "apps/mnist_train/options.h"
#include "data/data.h"
#include "io/state_dict.h"

namespace mnist {

struct Splits {
  std::shared_ptr<ember::data::InMemoryDataset> train, val, test;
  std::vector<std::string> classes;
  std::string kind;  // "IDX", "ImageFolder" or "packed": what --data held
  InputShape shape;  // per sample, and the number of classes
  // per-channel pixel statistics of the training split (on the [0, 1] scale), for normalisation
  std::vector<double> mean{0.0}, std{1.0};
  // the data's identity, recorded in checkpoints (a resume on other data is refused): the sizes of
  // the training and test sets before any split and a checksum of their labels in order
  int64_t train_file_images = 0, test_file_images = 0;
  std::string labels_checksum;
  int64_t skipped_images = 0;  // --skip-bad-images: images left out
  bool test_held_out = false;  // the test set is --test-split of the data (which has no test split)
};

// Loads --data (one error listing the three forms when it is none of them), holds out
// --test-split when the data has no test split of its own (stratified by class, seeded) and
// --val-split of the training set (a seeded permutation) when it has no validation split of its
// own, and measures the training split's per-channel mean and std. Prints what it loads unless
// --quiet.
Splits load_splits(const Options& o);

// A usage error that depends on what --data holds ("" when none): --val-split given for data with a
// validation split of its own (root/valid/... and the like, data::find_split_folders).
std::string data_usage_error(const Options& o);

// What a training checkpoint records about the data its model was trained on (the run.* metadata
// that Trainer::run_record writes). nullopt for a checkpoint that records none (saved before these
// entries existed); throws naming `what` ("--eval-only ck.safetensors") when they are malformed.
struct TrainedOn {
  std::string model;  // --model
  InputShape shape;   // with the number of classes
  std::vector<std::string> classes;
  std::vector<double> mean, std;  // the normalisation, one value per channel
};
std::optional<TrainedOn> trained_on(const ember::Metadata& metadata, const std::string& what);

// "1x28x28" (the form checkpoints record), and "0.2860,0.3530"-style lists of exact doubles.
std::string shape_text(const InputShape& s);
std::string doubles_text(const std::vector<double>& v);
// One double exactly ("%.17g": it reads back to the same value).
std::string exact_text(double v);
std::vector<double> parse_doubles(const std::string& text);

}  // namespace mnist
