// The packed dataset file: a whole image dataset (uint8 pixels, labels, class names) in one file
// that InMemoryDataset::load reads in a single read. bin/ember_pack writes it from an ImageFolder
// or an IDX set, so decoding and resizing happen once, not every epoch.
//
// Layout (little-endian; offsets are from the start of the file):
//    0  char[8] magic "EMBPACK1"
//    8  u32 version (1)             12  u32 header bytes (100; 96 in files without a header CRC)
//   16  u64 count N                 24  u32 channels C, 28 u32 height H, 32 u32 width W
//   36  u32 number of classes K
//   40  u64 classes offset          48  u64 classes bytes: K x (u32 length, UTF-8 name)
//   56  u64 index offset: N records of (u64 pixel offset relative to the pixel section, i64 label)
//   64  u64 pixels offset (a multiple of 64)
//   72  u64 pixel bytes (N x C x H x W)
//   80  u64 file bytes
//   88  u32 CRC-32 of the pixel bytes   92  u32 CRC-32 of the classes and index sections
//   96  u32 CRC-32 of header bytes 0-95 (absent from older files, whose header is 96 bytes: they
//       are still read, without a header check)
// Samples are dense and in order (record i's offset is i x C x H x W); the index is there so a
// reader can check that, and so the format can grow variable-sized records later.
// Every size, offset and CRC is checked before the data is used; a bad file names the field.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::data {

inline constexpr char kPackedMagic[9] = "EMBPACK1";
inline constexpr uint32_t kPackedVersion = 1;

struct PackedDataset {
  Tensor images;  // u8 [N, C, H, W] (a view into the file's bytes)
  Tensor labels;  // i64 [N]
  std::vector<std::string> classes;
};

// images: u8 [N, C, H, W] on the host; labels: integer [N]; classes may be empty.
void write_packed(const std::string& path, const Tensor& images, const Tensor& labels,
                  const std::vector<std::string>& classes);
// Reads and validates a packed file (one read of the whole file).
PackedDataset read_packed(const std::string& path);

}  // namespace ember::data
