// JPEG decoding with libjpeg-turbo, the library Pillow (kohya's decoder) uses, with Pillow's
// settings (accurate integer IDCT, fancy upsampling): the same pixels. Internal to image.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace data::detail {

struct JpegPixels {
    int width = 0, height = 0;
    int stored_channels = 0;   // 1 grey, 3 YCbCr / RGB, 4 CMYK / YCCK
    std::vector<uint8_t> rgb;  // [h][w][3] (JpegRead::pixels only)
};

enum class JpegRead : uint8_t {
    header,  // size and layout
    verify,  // every scan entropy-decoded (every coefficient), output at 1/8 scale and thrown away
    pixels,  // the whole image decoded
};

// Returns false with `error` ("libjpeg: <its message>") on corrupt data.
bool decode_jpeg(const uint8_t* bytes, size_t n, JpegRead what, JpegPixels& out, std::string& error);

}  // namespace data::detail
