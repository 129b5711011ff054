// Image decoding (PNG, JPEG, BMP; greyscale, grey+alpha, RGB or RGBA; 8 or 16 bits per channel,
// returned as 8) and resizing, on top of stb_image / stb_image_resize (Debian's libstb-dev).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/dataset.h"

namespace ember::data {

// Decodes an encoded image to CHW uint8. channels: 0 keeps what the file stores; 1 greyscale,
// 3 RGB, 4 RGBA convert as needed. `name` (usually the path) is used in errors, which say why
// decoding failed ("cannot decode 'a.png': bad png sig").
Image decode_image(std::span<const uint8_t> bytes, const std::string& name, int channels = 0);
// Reads and decodes a file ("cannot read 'a.png': No such file or directory" when unreadable).
Image load_image(const std::string& path, int channels = 0);
// Resamples to height x width (stb_image_resize's defaults: Mitchell filter when shrinking,
// Catmull-Rom when enlarging; each channel independently).
Image resize_image(const Image& image, int64_t height, int64_t width);

}  // namespace ember::data
