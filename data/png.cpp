// libpng reports errors through a callback that must not return: it longjmps back into
// decode_png, whose C++ objects (the reader state, the output vector) were all constructed before
// the setjmp and stay valid.
// Damaged data is an error, as in every other decoder here: a CRC mismatch in any chunk (libpng's
// default only warns for ancillary chunks; Pillow refuses those too), compressed data that is not
// zlib, too little image data, an unknown filter type, a chunk length over 2^31 - 1. libpng's
// warnings and "benign errors" about metadata (ICC profiles, text keywords, extra IDAT chunks)
// stay warnings, as Pillow opens those files; those about the image data stream itself (its zlib
// checksum, data left over inside it) are errors.
#include "data/png.h"

#include <csetjmp>
#include <cstring>

#include <png.h>

namespace data::detail {
namespace {

struct Reader {
    const uint8_t* data;
    size_t size, at;
    bool image_data = false;  // reading the image data: its warnings are errors
    char message[256];
};

void read_bytes(png_structp png, png_bytep out, png_size_t n) {
    Reader* r = static_cast<Reader*>(png_get_io_ptr(png));
    if (n > r->size - r->at) png_error(png, "unexpected end of file");
    std::memcpy(out, r->data + r->at, n);
    r->at += n;
}

void on_error(png_structp png, png_const_charp msg) {
    Reader* r = static_cast<Reader*>(png_get_error_ptr(png));
    std::strncpy(r->message, msg ? msg : "error", sizeof r->message - 1);
    png_longjmp(png, 1);
}

void on_warning(png_structp png, png_const_charp msg) {
    const Reader* r = static_cast<const Reader*>(png_get_error_ptr(png));
    if (r->image_data && msg && std::strncmp(msg, "IDAT", 4) == 0) png_error(png, msg);
}

}  // namespace

bool decode_png(const uint8_t* bytes, size_t n, PngRead what, int64_t max_pixels, PngPixels& out, std::string& error) {
    Reader r{bytes, n, 0, false, {}};
    std::vector<png_bytep> rows;      // constructed before setjmp: see the file comment
    std::vector<uint8_t> scratch_row;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
    if (!png) {
        error = "libpng: out of memory";
        return false;
    }
    png_infop info = png_create_info_struct(png);
    if (!info || setjmp(png_jmpbuf(png))) {
        error = std::string("libpng: ") + (info ? r.message : "out of memory");
        png_destroy_read_struct(&png, &info, nullptr);
        return false;
    }
    png_set_read_fn(png, &r, read_bytes);
    png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    const int color = png_get_color_type(png, info);
    out.width = int(w);
    out.height = int(h);
    out.stored_channels = png_get_channels(png, info);
    out.has_alpha = (color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS);
    if (int64_t(w) * int64_t(h) > max_pixels) png_error(png, "too many pixels");
    if (what == PngRead::header) {
        png_destroy_read_struct(&png, &info, nullptr);
        return true;
    }
    if (what == PngRead::verify) {
        // Every pass of every row is inflated and unfiltered as for the pixels (the checks are
        // libpng's own, so both reads refuse the same files), into one row that is thrown away.
        const int passes = png_set_interlace_handling(png);
        png_read_update_info(png, info);
        scratch_row.resize(png_get_rowbytes(png, info));
        r.image_data = true;
        for (int p = 0; p < passes; p++)
            for (png_uint_32 y = 0; y < h; y++) png_read_row(png, scratch_row.data(), nullptr);
        png_read_end(png, nullptr);
        png_destroy_read_struct(&png, &info, nullptr);
        return true;
    }
    png_set_strip_16(png);  // keeps the high byte
    png_set_packing(png);
    png_set_expand(png);    // palette -> RGB, grey < 8 bits -> 8 bits, tRNS -> alpha
    if (!(color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const size_t channels = png_get_channels(png, info);
    if (channels != (out.has_alpha ? 4u : 3u)) png_error(png, "unexpected channel count after conversion");
    out.pixels.assign(size_t(w) * h * channels, 0);
    rows.resize(h);
    for (png_uint_32 y = 0; y < h; y++) rows[y] = &out.pixels[size_t(y) * w * channels];
    r.image_data = true;
    png_read_image(png, rows.data());
    png_read_end(png, nullptr);
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
}

}  // namespace data::detail
