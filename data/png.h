// PNG decoding with libpng (internal to image.cpp): every colour type and bit depth to 8-bit RGB
// or RGBA, 16-bit samples reduced to their high byte (what Pillow's RGB conversion keeps), palette
// transparency turned into alpha, no gamma correction (Pillow applies none).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace data::detail {

struct PngPixels {
    int width = 0, height = 0;
    int stored_channels = 0;      // 1 grey or palette, 2 grey + alpha, 3 RGB, 4 RGBA
    bool has_alpha = false;       // alpha channel or tRNS
    std::vector<uint8_t> pixels;  // [h][w][3 or 4] (PngRead::pixels only)
};

enum class PngRead : uint8_t {
    header,  // size and layout: the chunks up to the first IDAT
    verify,  // the whole file read as `pixels` does, row by row into one scratch row (no pixels kept)
    pixels,  // the whole file decoded
};

// Returns false with `error` ("libpng: <its message>") on corrupt data. Refuses images with more
// than max_pixels pixels before allocating them.
bool decode_png(const uint8_t* bytes, size_t n, PngRead what, int64_t max_pixels, PngPixels& out, std::string& error);

}  // namespace data::detail
