// Image decoding (PNG, JPEG, BMP; greyscale, grey+alpha, RGB or RGBA; 8 or 16 bits per channel,
// returned as 8) and resizing, on top of stb_image / stb_image_resize (Debian's libstb-dev).
//
// stb_image trusts its input more than a dataset tool can: it skips PNG chunk CRCs and the zlib
// adler32, decodes corrupt deflate data and truncated BMPs into garbage or zero pixels, and
// allocates whatever a header claims. So every file's structure is checked first (check_png,
// check_bmp, check_jpeg in image_decode.cpp) and only a file that passes reaches stb_image.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/dataset.h"

namespace ember::data {

// The most pixels (width x height) an image header may claim by default: 16384 x 16384, far above
// any training image, far below what a corrupt header can claim.
inline constexpr int64_t kDefaultMaxImagePixels = int64_t{1} << 28;
// What stb_image decodes at most per side, so also the most a max_pixels limit can allow per side.
inline constexpr int64_t kMaxImageSide = int64_t{1} << 15;
inline constexpr int64_t kMaxImagePixelsLimit = kMaxImageSide * kMaxImageSide;

// Decodes an encoded image to CHW uint8. channels: 0 keeps what the file stores; 1 greyscale,
// 3 RGB, 4 RGBA convert as needed. `name` (usually the path) is used in errors, which say why
// decoding failed and where ("cannot decode 'a.png': bad CRC in chunk IDAT at offset 33 ...",
// "cannot decode 'b.bmp': truncated: ..."). An image whose header claims more than max_pixels
// pixels (in [1, kMaxImagePixelsLimit]) is refused before anything is allocated for it.
Image decode_image(std::span<const uint8_t> bytes, const std::string& name, int channels = 0,
                   int64_t max_pixels = kDefaultMaxImagePixels);
// Reads and decodes a file ("cannot read 'a.png': No such file or directory" when unreadable).
Image load_image(const std::string& path, int channels = 0, int64_t max_pixels = kDefaultMaxImagePixels);
// Resamples to height x width (stb_image_resize's defaults: Mitchell filter when shrinking,
// Catmull-Rom when enlarging; each channel independently).
Image resize_image(const Image& image, int64_t height, int64_t width);

}  // namespace ember::data
