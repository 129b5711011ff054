// stb_image_write (Debian's libstb-dev) for tests that write image files: PNG, BMP and JPEG
// encoders. STATIC: each test file that includes this gets its own private copy, so two of them
// never clash at link time.
#pragma once

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop
