// Image decoding: libjpeg-turbo for JPEG (data/jpeg.cpp: Pillow's decoder and settings, so the
// same pixels), libpng for PNG (data/png.cpp), libwebp for WebP, stb_image for BMP only (its JPEG
// and PNG decoders misbehave on corrupt files: a Huffman table overflow, null-pointer copies), and
// our own bounds-checked walk over JPEG markers for the EXIF orientation and the end-of-image
// check (libjpeg decodes a JPEG cut short with a warning, filling the missing blocks, where Pillow
// refuses it). verify_image and decode_image run each decoder with the same checks, so a file the
// dataset accepted decodes later, and one it would refuse is refused by both with one reason.
#include "data/image.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>

#include <webp/decode.h>

#include "data/jpeg.h"
#include "data/png.h"
#include "ggml-lite/io/files.h"

#define STBI_NO_STDIO
#define STBI_ONLY_BMP
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace data {

const char* format_name(ImageFormat f) {
    switch (f) {
        case ImageFormat::png: return "PNG";
        case ImageFormat::jpeg: return "JPEG";
        case ImageFormat::bmp: return "BMP";
        case ImageFormat::webp: return "WebP";
        case ImageFormat::unknown: break;
    }
    return "unknown";
}

ImageFormat sniff_format(const uint8_t* b, size_t n) {
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 8 && std::memcmp(b, png, 8) == 0) return ImageFormat::png;
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return ImageFormat::jpeg;
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return ImageFormat::bmp;
    if (n >= 12 && std::memcmp(b, "RIFF", 4) == 0 && std::memcmp(b + 8, "WEBP", 4) == 0) return ImageFormat::webp;
    return ImageFormat::unknown;
}

ImageFormat format_of_extension(const std::filesystem::path& path) {
    std::string ext = path.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (ext == ".png") return ImageFormat::png;
    if (ext == ".jpg" || ext == ".jpeg") return ImageFormat::jpeg;
    if (ext == ".bmp") return ImageFormat::bmp;
    if (ext == ".webp") return ImageFormat::webp;
    return ImageFormat::unknown;
}

namespace {

struct JpegScan {
    int orientation = 1;
    bool complete = false;  // an end-of-image marker follows the first scan
};

uint32_t read_u16(const uint8_t* p, bool big) { return big ? (p[0] << 8 | p[1]) : (p[1] << 8 | p[0]); }
uint32_t read_u32(const uint8_t* p, bool big) {
    return big ? (uint32_t(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3])
               : (uint32_t(p[3]) << 24 | p[2] << 16 | p[1] << 8 | p[0]);
}

// The orientation tag (0x0112) of IFD0 in a TIFF block; 1 when absent or out of range.
int tiff_orientation(const uint8_t* t, size_t n) {
    if (n < 8) return 1;
    bool big;
    if (t[0] == 'M' && t[1] == 'M') big = true;
    else if (t[0] == 'I' && t[1] == 'I') big = false;
    else return 1;
    if (read_u16(t + 2, big) != 42) return 1;
    const uint64_t ifd = read_u32(t + 4, big);
    if (ifd + 2 > n) return 1;
    const uint32_t count = read_u16(t + ifd, big);
    for (uint32_t i = 0; i < count; i++) {
        const uint64_t e = ifd + 2 + uint64_t(i) * 12;
        if (e + 12 > n) return 1;
        if (read_u16(t + e, big) != 0x0112) continue;
        if (read_u16(t + e + 2, big) != 3 /* SHORT */ || read_u32(t + e + 4, big) < 1) return 1;
        const uint32_t v = read_u16(t + e + 8, big);
        return v >= 1 && v <= 8 ? int(v) : 1;
    }
    return 1;
}

JpegScan scan_jpeg(const uint8_t* b, size_t n) {
    JpegScan s;
    size_t i = 2;  // after SOI
    while (i + 1 < n) {
        if (b[i] != 0xff) return s;  // not a marker where one must be: corrupt header
        uint8_t m = b[i + 1];
        if (m == 0xff) {  // fill byte
            i++;
            continue;
        }
        i += 2;
        if (m == 0xd8 || m == 0x01 || (m >= 0xd0 && m <= 0xd7)) continue;  // no length
        if (m == 0xd9) return s;                                            // EOI before any scan
        if (i + 2 > n) return s;
        const size_t len = size_t(b[i]) << 8 | b[i + 1];
        if (len < 2 || i + len > n) return s;
        if (m == 0xe1 && len >= 8 && std::memcmp(b + i + 2, "Exif\0\0", 6) == 0 && s.orientation == 1)
            s.orientation = tiff_orientation(b + i + 8, len - 8);
        i += len;
        if (m == 0xda) break;  // start of scan: entropy-coded data follows
    }
    // Inside entropy-coded data a 0xff byte is always followed by 0x00 or a marker, so the first
    // ff d9 pair is the end of the image (progressive files carry more scans before it).
    for (; i + 1 < n; i++)
        if (b[i] == 0xff && b[i + 1] == 0xd9) {
            s.complete = true;
            break;
        }
    return s;
}

// The pixel data an uncompressed BMP needs; 0 when the header is not one we check.
uint64_t bmp_needed_bytes(const uint8_t* b, size_t n) {
    if (n < 34) return 0;
    const uint32_t header = read_u32(b + 14, false);
    const uint32_t compression = read_u32(b + 30, false);
    if (header < 40 || (compression != 0 && compression != 3)) return 0;
    const uint64_t offset = read_u32(b + 10, false);
    const int64_t w = int32_t(read_u32(b + 18, false));
    const int64_t h = int32_t(read_u32(b + 22, false));
    const uint64_t bpp = read_u16(b + 28, false);
    if (w <= 0 || h == 0 || bpp == 0 || bpp > 32 || w > (int64_t(1) << 24) || std::llabs(h) > (int64_t(1) << 24))
        return 0;
    const uint64_t row = (uint64_t(w) * bpp + 31) / 32 * 4;
    return offset + row * uint64_t(std::llabs(h));
}

struct Checked {
    ImageHeader header;
    bool has_alpha = false;
    bool lossless_webp = false;
};

const char* webp_status(VP8StatusCode s) {
    switch (s) {
        case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
        case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
        case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
        case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature (animated WebP is not supported)";
        case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data";
        default: return "decoding failed";
    }
}

// What a decoder said about damaged image data, in the same words for verify_image and decode_image.
[[noreturn]] void refuse_data(const std::string& name, ImageFormat f, const std::string& why) {
    throw ImageError(name, gl::cat(f == ImageFormat::jpeg ? "corrupt " : "corrupt or truncated ", format_name(f),
                                   " data (", why, ")"));
}

// WebP decoded into `into` (stride bytes a row) or, for a check, into libwebp's own buffer in the
// decoder's native layout without the loop filter and fancy upsampling (neither can fail; they
// are most of the time spent after the bitstream).
VP8StatusCode decode_webp(const uint8_t* b, size_t n, WEBP_CSP_MODE mode, bool check_only, uint8_t* into,
                          size_t into_size, int stride) {
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg)) return VP8_STATUS_INVALID_PARAM;
    cfg.output.colorspace = mode;
    if (check_only) {
        cfg.options.bypass_filtering = 1;
        cfg.options.no_fancy_upsampling = 1;
    } else {
        cfg.output.is_external_memory = 1;
        cfg.output.u.RGBA.rgba = into;
        cfg.output.u.RGBA.size = into_size;
        cfg.output.u.RGBA.stride = stride;
    }
    const VP8StatusCode st = WebPDecode(b, n, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    return st;
}

Checked check(const uint8_t* b, size_t n, const std::string& name, const DecodeOptions& opt) {
    if (n == 0) throw ImageError(name, "empty file (0 bytes)");
    if (n > size_t(INT_MAX)) throw ImageError(name, gl::cat("file too large (", n, " bytes)"));
    Checked c;
    ImageHeader& h = c.header;
    h.format = sniff_format(b, n);
    if (h.format == ImageFormat::unknown) throw ImageError(name, "not a PNG, JPEG, BMP or WebP image");
    const ImageFormat by_name = format_of_extension(name);
    if (by_name != ImageFormat::unknown && by_name != h.format)
        throw ImageError(name, gl::cat("wrong extension: the file holds ", format_name(h.format), " data"));
    JpegScan scan;
    if (h.format == ImageFormat::jpeg) {
        scan = scan_jpeg(b, n);
        if (!scan.complete) throw ImageError(name, "truncated JPEG (no end-of-image marker after the image data)");
        detail::JpegPixels jp;
        std::string why;
        if (!detail::decode_jpeg(b, n, detail::JpegRead::header, jp, why))
            throw ImageError(name, "corrupt JPEG header (" + why + ")");
        h.width = jp.width;
        h.height = jp.height;
        h.channels = jp.stored_channels;
    } else if (h.format == ImageFormat::webp) {
        WebPBitstreamFeatures f;
        if (const VP8StatusCode st = WebPGetFeatures(b, n, &f); st != VP8_STATUS_OK)
            throw ImageError(name, gl::cat("corrupt or truncated WebP header (libwebp: ", webp_status(st), ")"));
        h.width = f.width;
        h.height = f.height;
        h.channels = f.has_alpha ? 4 : 3;
        c.lossless_webp = f.format == 2;
    } else if (h.format == ImageFormat::png) {
        detail::PngPixels pp;
        std::string why;
        if (!detail::decode_png(b, n, detail::PngRead::header, INT64_MAX, pp, why))
            throw ImageError(name, "corrupt PNG header (" + why + ")");
        h.width = pp.width;
        h.height = pp.height;
        h.channels = pp.stored_channels;
        c.has_alpha = pp.has_alpha;
    } else {
        int w = 0, ht = 0, comp = 0;
        if (!stbi_info_from_memory(b, int(n), &w, &ht, &comp))
            throw ImageError(name, gl::cat("corrupt or truncated ", format_name(h.format), " header (stb_image: ",
                                           stbi_failure_reason(), ")"));
        h.width = w;
        h.height = ht;
        h.channels = comp;
    }
    if (h.format != ImageFormat::png)  // PNG: also palette transparency, set above
        c.has_alpha = h.format != ImageFormat::jpeg && (h.channels == 2 || h.channels == 4);  // JPEG 4: CMYK
    h.has_alpha = c.has_alpha;
    if (h.width <= 0 || h.height <= 0) throw ImageError(name, gl::cat("bad size ", h.width, "x", h.height));
    if (int64_t(h.width) * h.height > opt.max_pixels)
        throw ImageError(name, gl::cat("too large: ", h.width, "x", h.height, " is more than ", opt.max_pixels,
                                       " pixels"));
    if (h.format == ImageFormat::jpeg) {
        h.orientation = scan.orientation;
        if (h.orientation >= 5) std::swap(h.width, h.height);
    }
    if (h.format == ImageFormat::png) {  // the IEND chunk closes every complete PNG
        const size_t tail = std::min<size_t>(n, 1024);
        const uint8_t* end = b + n;
        if (std::search(end - tail, end, "IEND", "IEND" + 4) == end)
            throw ImageError(name, "truncated PNG (no IEND chunk at the end)");
    }
    if (h.format == ImageFormat::webp && uint64_t(read_u32(b + 4, false)) + 8 > n)
        throw ImageError(name, gl::cat("truncated WebP (", n, " bytes of ", uint64_t(read_u32(b + 4, false)) + 8, ")"));
    if (h.format == ImageFormat::bmp) {
        // stb_image reads other depths' headers and then fails with "invalid" at the pixels.
        const size_t at = n >= 18 && read_u32(b + 14, false) == 12 ? 24 : 28;
        const uint32_t bpp = n >= at + 2 ? read_u16(b + at, false) : 0;
        if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
            throw ImageError(name, gl::cat("unsupported BMP bit depth ", bpp, " (1, 4, 8, 16, 24 or 32)"));
        const uint64_t need = bmp_needed_bytes(b, n);
        if (need > n) throw ImageError(name, gl::cat("truncated BMP (", n, " bytes of ", need, ")"));
    }
    return c;
}

}  // namespace

int jpeg_exif_orientation(const uint8_t* bytes, size_t n) {
    if (sniff_format(bytes, n) != ImageFormat::jpeg) return 1;
    return scan_jpeg(bytes, n).orientation;
}

std::vector<uint8_t> apply_orientation(const std::vector<uint8_t>& px, int w, int h, int ch, int orientation) {
    if (orientation <= 1 || orientation > 8) return px;
    const bool swap = orientation >= 5;
    const int ow = swap ? h : w, oh = swap ? w : h;
    std::vector<uint8_t> out(px.size());
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int sx = x, sy = y;
            switch (orientation) {
                case 2: sx = w - 1 - x; break;                  // mirrored
                case 3: sx = w - 1 - x, sy = h - 1 - y; break;  // rotated 180
                case 4: sy = h - 1 - y; break;                  // mirrored vertically
                case 5: sx = y, sy = x; break;                  // transposed
                case 6: sx = y, sy = h - 1 - x; break;          // stored rotated: turn 90 clockwise
                case 7: sx = w - 1 - y, sy = h - 1 - x; break;  // transverse
                case 8: sx = w - 1 - y, sy = x; break;          // turn 90 counter-clockwise
            }
            std::memcpy(&out[(size_t(y) * ow + x) * ch], &px[(size_t(sy) * w + sx) * ch], size_t(ch));
        }
    return out;
}

ImageHeader read_image_header(const uint8_t* bytes, size_t n, const std::string& name, const DecodeOptions& opt) {
    return check(bytes, n, name, opt).header;
}

ImageHeader verify_image(const uint8_t* bytes, size_t n, const std::string& name, const DecodeOptions& opt) {
    const Checked c = check(bytes, n, name, opt);
    const ImageFormat f = c.header.format;
    std::string why;
    if (f == ImageFormat::jpeg) {
        detail::JpegPixels jp;
        if (!detail::decode_jpeg(bytes, n, detail::JpegRead::verify, jp, why)) refuse_data(name, f, why);
    } else if (f == ImageFormat::png) {
        detail::PngPixels pp;
        if (!detail::decode_png(bytes, n, detail::PngRead::verify, opt.max_pixels, pp, why)) refuse_data(name, f, why);
    } else if (f == ImageFormat::webp) {
        const WEBP_CSP_MODE mode = c.lossless_webp ? MODE_BGRA : c.has_alpha ? MODE_YUVA : MODE_YUV;
        if (const VP8StatusCode st = decode_webp(bytes, n, mode, true, nullptr, 0, 0); st != VP8_STATUS_OK)
            refuse_data(name, f, gl::cat("libwebp: ", webp_status(st)));
    } else {  // BMP is stored uncompressed: decoding it costs about what reading it did
        int w = 0, h = 0, comp = 0;
        std::unique_ptr<uint8_t, void (*)(void*)> px(stbi_load_from_memory(bytes, int(n), &w, &h, &comp, 3), std::free);
        if (!px) refuse_data(name, f, gl::cat("stb_image: ", stbi_failure_reason()));
    }
    return c.header;
}

// Interleaved 8-bit RGB or RGBA (has_alpha) -> Image::rgb and, in mask mode, Image::alpha.
static void split_alpha(const uint8_t* p, size_t count, bool has_alpha, AlphaMode mode, std::vector<uint8_t>& rgb,
                 std::vector<uint8_t>& alpha) {
    rgb.resize(count * 3);
    if (!has_alpha) {
        std::memcpy(rgb.data(), p, rgb.size());
    } else if (mode == AlphaMode::mask) {
        alpha.resize(count);
        for (size_t i = 0; i < count; i++) {
            std::memcpy(&rgb[i * 3], p + i * 4, 3);
            alpha[i] = p[i * 4 + 3];
        }
    } else {
        for (size_t i = 0; i < count; i++) {
            const uint32_t a = p[i * 4 + 3];
            for (int k = 0; k < 3; k++) rgb[i * 3 + k] = uint8_t((p[i * 4 + k] * a + 255 * (255 - a) + 127) / 255);
        }
    }
    if (mode == AlphaMode::mask && alpha.empty()) alpha.assign(count, 255);
}

Image decode_image(const uint8_t* bytes, size_t n, const std::string& name, const DecodeOptions& opt) {
    const Checked c = check(bytes, n, name, opt);
    const ImageFormat f = c.header.format;
    int w = 0, h = 0;
    std::vector<uint8_t> rgb, alpha;
    std::string why;
    if (f == ImageFormat::jpeg) {
        detail::JpegPixels jp;
        if (!detail::decode_jpeg(bytes, n, detail::JpegRead::pixels, jp, why)) refuse_data(name, f, why);
        w = jp.width;
        h = jp.height;
        rgb = std::move(jp.rgb);
        if (opt.alpha == AlphaMode::mask) alpha.assign(size_t(w) * size_t(h), 255);
    } else if (f == ImageFormat::png) {
        detail::PngPixels pp;
        if (!detail::decode_png(bytes, n, detail::PngRead::pixels, opt.max_pixels, pp, why)) refuse_data(name, f, why);
        w = pp.width;
        h = pp.height;
        split_alpha(pp.pixels.data(), size_t(w) * size_t(h), pp.has_alpha, opt.alpha, rgb, alpha);
    } else if (f == ImageFormat::webp) {
        w = c.header.width;
        h = c.header.height;
        const int ch = c.has_alpha ? 4 : 3;
        std::vector<uint8_t> px(size_t(w) * size_t(h) * size_t(ch));
        if (const VP8StatusCode st = decode_webp(bytes, n, c.has_alpha ? MODE_RGBA : MODE_RGB, false, px.data(),
                                                 px.size(), w * ch);
            st != VP8_STATUS_OK)
            refuse_data(name, f, gl::cat("libwebp: ", webp_status(st)));
        split_alpha(px.data(), size_t(w) * size_t(h), c.has_alpha, opt.alpha, rgb, alpha);
    } else {
        int comp = 0;
        std::unique_ptr<uint8_t, void (*)(void*)> px(
            stbi_load_from_memory(bytes, int(n), &w, &h, &comp, c.has_alpha ? 4 : 3), std::free);
        if (!px) refuse_data(name, f, gl::cat("stb_image: ", stbi_failure_reason()));
        split_alpha(px.get(), size_t(w) * size_t(h), c.has_alpha, opt.alpha, rgb, alpha);
    }
    Image img;
    const int o = c.header.orientation;
    img.rgb = o > 1 ? apply_orientation(rgb, w, h, 3, o) : std::move(rgb);
    if (!alpha.empty()) img.alpha = o > 1 ? apply_orientation(alpha, w, h, 1, o) : std::move(alpha);
    img.width = o >= 5 ? h : w;
    img.height = o >= 5 ? w : h;
    return img;
}

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path) {
    const std::string name = path.string();
    uint64_t size = 0;
    int fd = -1;
    try {  // refuses FIFOs, devices and folders before opening (no read can wait for a writer)
        fd = gl::io::open_regular(name, &size);
    } catch (const gl::Error& e) {
        const std::string m = e.what();
        throw ImageError(name, m.rfind(name + ": ", 0) == 0 ? m.substr(name.size() + 2) : m);
    }
    std::vector<uint8_t> bytes;
    std::string error;
    if (size > uint64_t(INT_MAX)) {
        error = gl::cat("file too large (", size, " bytes)");
    } else {
        bytes.resize(size_t(size));
        size_t got = 0;
        while (got < bytes.size()) {
            const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) error = gl::cat("cannot read: ", std::strerror(errno));
            if (r <= 0) break;  // 0: it shrank while being read; the checks see what is there
            got += size_t(r);
        }
        bytes.resize(got);
    }
    ::close(fd);
    if (!error.empty()) throw ImageError(name, error);
    return bytes;
}

Image load_image(const std::filesystem::path& path, const DecodeOptions& opt) {
    const std::vector<uint8_t> bytes = read_file_bytes(path);
    return decode_image(bytes.data(), bytes.size(), path.string(), opt);
}

}  // namespace data
