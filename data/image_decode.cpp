// The one translation unit that compiles stb_image and stb_image_resize (as static functions, so
// they cannot clash with another copy linked into the same program).
#include "data/image_decode.h"

#include <climits>
#include <cstring>

#include "core/error.h"
#include "data/file_io.h"

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_NO_STDIO
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
// Refuse absurd sizes before allocating (a corrupt header could claim 2^24 x 2^24 pixels).
#define STBI_MAX_DIMENSIONS (1 << 15)
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wtype-limits"
#if defined(__GNUC__) && !defined(__clang__)
// (kept to the end of the file: GCC reports stb code where it is inlined into ours)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>

namespace ember::data {

Image decode_image(std::span<const uint8_t> bytes, const std::string& name, int channels) {
  EMBER_CHECK(channels == 0 || channels == 1 || channels == 3 || channels == 4, "decode_image: channels must be 0 "
              "(as stored), 1, 3 or 4; got ", channels);
  EMBER_CHECK(!bytes.empty(), "cannot decode '", name, "': the file is empty");
  EMBER_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX), "cannot decode '", name, "': ", bytes.size(),
              " bytes is more than stb_image reads");
  int w = 0, h = 0, stored = 0;
  unsigned char* px =
      stbi_load_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &stored, channels);
  EMBER_CHECK(px != nullptr, "cannot decode '", name, "': ", stbi_failure_reason() ? stbi_failure_reason() : "unknown error",
              " (ember reads PNG, JPEG and BMP)");
  const int c = channels == 0 ? stored : channels;
  Image img(c, h, w);
  // stb_image gives HWC (interleaved); ember keeps CHW.
  const int64_t plane = static_cast<int64_t>(h) * w;
  for (int64_t i = 0; i < plane; ++i)
    for (int k = 0; k < c; ++k) img.pixels[static_cast<size_t>(k * plane + i)] = px[i * c + k];
  stbi_image_free(px);
  return img;
}

Image load_image(const std::string& path, int channels) {
  std::vector<uint8_t> bytes = read_file(path);  // "cannot open '<path>': <reason>"
  return decode_image(bytes, path, channels);
}

Image resize_image(const Image& image, int64_t height, int64_t width) {
  EMBER_CHECK(height > 0 && width > 0 && height <= (1 << 15) && width <= (1 << 15), "resize_image: target size ",
              height, " x ", width, " must be in [1, 32768]");
  EMBER_CHECK(image.height > 0 && image.width > 0, "resize_image: the image is empty (", image.height, " x ",
              image.width, ")");
  if (image.height == height && image.width == width) return image;
  Image out(image.channels, height, width);
  for (int64_t c = 0; c < image.channels; ++c) {
    const uint8_t* src = image.pixels.data() + c * image.height * image.width;
    uint8_t* dst = out.pixels.data() + c * height * width;
    int ok = stbir_resize_uint8(src, static_cast<int>(image.width), static_cast<int>(image.height), 0, dst,
                                static_cast<int>(width), static_cast<int>(height), 0, 1);
    EMBER_CHECK(ok == 1, "resize_image: stb_image_resize failed for ", image.height, " x ", image.width, " -> ",
                height, " x ", width);
  }
  return out;
}

}  // namespace ember::data

#pragma GCC diagnostic pop
