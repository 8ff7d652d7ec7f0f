// libjpeg reports errors through a callback that must not return: it longjmps back into
// decode_jpeg, whose C++ objects (the output vector) were all constructed before the setjmp and
// stay valid.
// libjpeg decodes damaged scan data with a warning and fills what it lost with grey (Pillow
// ignores the warning). Here the warnings about the coded image data are errors: a bad Huffman or
// arithmetic code, a segment or file that ends early, lost restart markers, impossible scan
// parameters. Those about markers and metadata (bytes skipped between segments, an unknown JFIF
// version or Adobe transform, a bad ICC marker) stay warnings: the picture itself decodes whole.
#include "data/jpeg.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
// after jpeglib.h: the message codes
#include <jerror.h>

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

bool damages_image_data(int code) {
    switch (code) {
        case JWRN_ARITH_BAD_CODE:
        case JWRN_BOGUS_PROGRESSION:
        case JWRN_HIT_MARKER:
        case JWRN_HUFF_BAD_CODE:
        case JWRN_JPEG_EOF:
        case JWRN_MUST_RESYNC:
        case JWRN_NOT_SEQUENTIAL: return true;
        default: return false;
    }
}

// level < 0: a warning (libjpeg's message code is set); >= 0: trace messages, never shown.
void on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && damages_image_data(cinfo->err->msg_code)) on_error(cinfo);
}

// Adobe CMYK as libjpeg gives it (inverted) to RGB, rounded as Pillow's CMYK -> RGB conversion.
uint8_t muldiv255(int a, int b) {
    const int t = a * b + 128;
    return uint8_t(((t >> 8) + t) >> 8);
}

}  // namespace

bool decode_jpeg(const uint8_t* bytes, size_t n, JpegRead what, JpegPixels& out, std::string& error) {
    jpeg_decompress_struct cinfo;
    ErrorManager err;
    std::vector<uint8_t> row;  // constructed before setjmp: see the file comment
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    if (setjmp(err.jump)) {
        error = std::string("libjpeg: ") + err.message;
        jpeg_destroy_decompress(&cinfo);
        return false;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, bytes, static_cast<unsigned long>(n));
    jpeg_read_header(&cinfo, TRUE);
    out.width = int(cinfo.image_width);
    out.height = int(cinfo.image_height);
    out.stored_channels = cinfo.num_components;
    if (what == JpegRead::header) {
        jpeg_destroy_decompress(&cinfo);
        return true;
    }
    const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    const bool grey = cinfo.jpeg_color_space == JCS_GRAYSCALE;
    if (what == JpegRead::verify) {
        // The entropy decoder reads every coefficient whatever the output scale; at 1/8 the
        // inverse DCT keeps only each block's DC term, and grey output from YCbCr skips the
        // chroma's transforms and the colour conversion.
        cinfo.scale_num = 1;
        cinfo.scale_denom = 8;
        cinfo.dct_method = JDCT_IFAST;
        cinfo.do_fancy_upsampling = FALSE;
        cinfo.do_block_smoothing = FALSE;
        cinfo.out_color_space = cmyk ? JCS_CMYK : cinfo.jpeg_color_space == JCS_YCbCr || grey ? JCS_GRAYSCALE : JCS_RGB;
        jpeg_start_decompress(&cinfo);
        row.resize(size_t(cinfo.output_width) * size_t(cinfo.output_components));
        JSAMPROW rows[1] = {row.data()};
        while (cinfo.output_scanline < cinfo.output_height) jpeg_read_scanlines(&cinfo, rows, 1);
        jpeg_finish_decompress(&cinfo);
        jpeg_destroy_decompress(&cinfo);
        return true;
    }
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
