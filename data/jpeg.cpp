// libjpeg reports errors through a callback that must not return: it longjmps back into
// decode_jpeg, whose C++ objects (the output vector) were all constructed before the setjmp and
// stay valid. Warnings (corrupt but decodable data) are ignored, as Pillow does.
#include "data/jpeg.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>

namespace data::detail {
namespace {

struct ErrorManager {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr cinfo) {
    ErrorManager* e = reinterpret_cast<ErrorManager*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, e->message);
    std::longjmp(e->jump, 1);
}

void on_message(j_common_ptr, int) {}

// Adobe CMYK as libjpeg gives it (inverted) to RGB, rounded as Pillow's CMYK -> RGB conversion.
uint8_t muldiv255(int a, int b) {
    const int t = a * b + 128;
    return uint8_t(((t >> 8) + t) >> 8);
}

}  // namespace

bool decode_jpeg(const uint8_t* bytes, size_t n, bool header_only, JpegPixels& out, std::string& error) {
    jpeg_decompress_struct cinfo;
    ErrorManager err;
    std::vector<uint8_t> row;  // constructed before setjmp: see the file comment
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    if (setjmp(err.jump)) {
        error = err.message;
        jpeg_destroy_decompress(&cinfo);
        return false;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, bytes, static_cast<unsigned long>(n));
    jpeg_read_header(&cinfo, TRUE);
    out.width = int(cinfo.image_width);
    out.height = int(cinfo.image_height);
    out.stored_channels = cinfo.num_components;
    if (header_only) {
        jpeg_destroy_decompress(&cinfo);
        return true;
    }
    const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    const bool grey = cinfo.jpeg_color_space == JCS_GRAYSCALE;
    cinfo.out_color_space = cmyk ? JCS_CMYK : grey ? JCS_GRAYSCALE : JCS_RGB;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    const int w = int(cinfo.output_width), h = int(cinfo.output_height), c = cinfo.output_components;
    out.width = w;
    out.height = h;
    out.rgb.assign(size_t(w) * h * 3, 0);
    row.resize(size_t(w) * c);
    while (cinfo.output_scanline < cinfo.output_height) {
        const int y = int(cinfo.output_scanline);
        JSAMPROW rows[1] = {row.data()};
        jpeg_read_scanlines(&cinfo, rows, 1);
        uint8_t* d = &out.rgb[size_t(y) * w * 3];
        if (c == 3) {
            std::memcpy(d, row.data(), row.size());
        } else if (c == 1) {
            for (int x = 0; x < w; x++) d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = row[size_t(x)];
        } else {
            for (int x = 0; x < w; x++) {
                const uint8_t* p = &row[size_t(x) * 4];
                for (int k = 0; k < 3; k++) d[3 * x + k] = muldiv255(p[k], p[3]);
            }
        }
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return true;
}

}  // namespace data::detail
