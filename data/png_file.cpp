#include "data/png_file.h"

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>

#include <png.h>
#include <zlib.h>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/atomic_file.h"

namespace data {

namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// libpng reports errors through a callback that must not return: it longjmps back into
// encode_png, whose C++ objects were all constructed before the setjmp and stay valid. Nothing may
// unwind through libpng's C frames either: the output's growth failing is a libpng error too.
struct Writer {
    std::vector<uint8_t>* out;
    char message[256];
};

void write_bytes(png_structp png, png_bytep data, png_size_t n) {
    Writer* w = static_cast<Writer*>(png_get_io_ptr(png));
    bool grown = true;
    try {
        w->out->insert(w->out->end(), data, data + n);
    } catch (const std::bad_alloc&) {
        grown = false;  // the longjmp leaves from outside the handler
    }
    if (!grown) png_error(png, "out of memory");
}

void flush_nothing(png_structp) {}

void on_error(png_structp png, png_const_charp msg) {
    Writer* w = static_cast<Writer*>(png_get_error_ptr(png));
    std::strncpy(w->message, msg ? msg : "error", sizeof w->message - 1);
    png_longjmp(png, 1);
}

// The keywords and texts are checked before libpng sees them; library code prints nothing.
void on_warning(png_structp, png_const_charp) {}

uint32_t get_u32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

void check_keyword(const std::string& k) {
    GL_CHECK(!k.empty() && k.size() <= 79, "png: text keyword '", k, "' must be 1 to 79 characters");
    for (char c : k) GL_CHECK(c >= 32 && c <= 126, "png: text keyword '", k, "' holds a character outside printable ASCII");
    GL_CHECK(k.front() != ' ' && k.back() != ' ' && k.find("  ") == std::string::npos, "png: text keyword '", k,
             "' has leading, trailing or double spaces");
}

std::string latin1_to_utf8(const uint8_t* p, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < 0x80) {
            s += char(p[i]);
        } else {
            s += char(0xC0 | (p[i] >> 6));
            s += char(0x80 | (p[i] & 0x3F));
        }
    }
    return s;
}

// The keyword and the rest of a text chunk's data (keyword NUL rest).
bool split_keyword(const uint8_t* p, size_t n, std::string& key, size_t& rest) {
    const auto* nul = static_cast<const uint8_t*>(std::memchr(p, 0, n));
    if (!nul) return false;
    key.assign(reinterpret_cast<const char*>(p), size_t(nul - p));
    rest = size_t(nul - p) + 1;
    return true;
}

}  // namespace

std::vector<uint8_t> encode_png(const Bitmap& img, const TextChunks& text) {
    GL_CHECK(img.width > 0 && img.height > 0 && img.width <= 65535 && img.height <= 65535, "png: image size ",
             img.width, "x", img.height, " must be 1..65535 on each side");
    GL_CHECK(img.channels >= 1 && img.channels <= 4, "png: ", img.channels, " channels (1 to 4 supported)");
    const size_t need = size_t(img.width) * size_t(img.height) * size_t(img.channels);
    GL_CHECK(img.pixels.size() == need, "png: ", img.width, "x", img.height, "x", img.channels, " image holds ",
             img.pixels.size(), " bytes, expected ", need);
    // Everything libpng is given, and the output, exist before the setjmp (see Writer).
    std::vector<png_text> chunks(text.size());
    for (size_t i = 0; i < text.size(); i++) {
        const auto& [k, v] = text[i];
        check_keyword(k);
        GL_CHECK(v.find('\0') == std::string::npos, "png: the text of '", k, "' holds a NUL byte");
        GL_CHECK(v.size() < (size_t(1) << 30), "png: the text of '", k, "' is too long");
        const bool ascii = std::all_of(v.begin(), v.end(), [](char c) { return (unsigned char)c < 0x80; });
        png_text& t = chunks[i];
        t.compression = ascii ? PNG_TEXT_COMPRESSION_NONE : PNG_ITXT_COMPRESSION_NONE;
        t.key = const_cast<char*>(k.c_str());  // libpng copies keys and texts
        t.text = const_cast<char*>(v.c_str());
        t.text_length = v.size();
    }
    std::vector<png_bytep> rows(size_t(img.height));
    for (size_t y = 0; y < rows.size(); y++)
        rows[y] = const_cast<png_bytep>(img.pixels.data() + y * size_t(img.width) * size_t(img.channels));
    std::vector<uint8_t> out;
    Writer w{&out, {}};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, on_error, on_warning);
    GL_CHECK(png, "png: libpng: out of memory");
    png_infop info = png_create_info_struct(png);
    if (!info || setjmp(png_jmpbuf(png))) {
        const std::string why = info ? w.message : "out of memory";
        png_destroy_write_struct(&png, &info);
        gl::fail("png: libpng could not encode a ", img.width, "x", img.height, " image: ", why);
    }
    png_set_write_fn(png, &w, write_bytes, flush_nothing);
    constexpr int kColorType[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                  PNG_COLOR_TYPE_RGB_ALPHA};
    png_set_IHDR(png, info, png_uint_32(img.width), png_uint_32(img.height), 8, kColorType[img.channels - 1],
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    // Written with the header, between IHDR and the image data, where A1111 and PIL look first.
    if (!chunks.empty()) png_set_text(png, info, chunks.data(), int(chunks.size()));
    png_write_info(png, info);
    png_write_image(png, rows.data());
    png_write_end(png, nullptr);
    png_destroy_write_struct(&png, &info);
    return out;
}

void write_png(const std::string& path, const Bitmap& img, const TextChunks& text) {
    std::vector<uint8_t> bytes;
    try {
        bytes = encode_png(img, text);
    } catch (const gl::Error& e) {
        gl::fail(path, ": ", e.what());
    }
    gl::io::write_file_atomic(path, bytes.data(), bytes.size());
}

int PngInfo::channels() const {
    switch (color_type) {
        case 0: return 1;
        case 4: return 2;
        case 2:
        case 3: return 3;
        case 6: return 4;
    }
    return 0;
}

PngInfo read_png_info(const std::vector<uint8_t>& bytes, const std::string& origin) {
    GL_CHECK(bytes.size() >= 8 && std::memcmp(bytes.data(), kSignature, 8) == 0, origin, ": not a PNG file (signature)");
    PngInfo f;
    size_t pos = 8;
    bool end = false, header = false;
    while (!end) {
        GL_CHECK(bytes.size() - pos >= 12, origin, ": truncated PNG (a chunk header at byte ", pos, ")");
        const uint32_t len = get_u32(bytes.data() + pos);
        const std::string type(reinterpret_cast<const char*>(bytes.data() + pos + 4), 4);
        GL_CHECK(len <= bytes.size() - pos - 12, origin, ": PNG chunk ", type, " at byte ", pos, " runs past the end");
        const uint8_t* data = bytes.data() + pos + 8;
        GL_CHECK(uint32_t(crc32_z(0, bytes.data() + pos + 4, size_t(len) + 4)) == get_u32(data + len), origin, ": PNG chunk ", type,
                 " at byte ", pos, " fails its CRC");
        GL_CHECK(header || type == "IHDR", origin, ": the first PNG chunk is ", type, ", not IHDR");
        std::string key;
        size_t rest = 0;
        if (type == "IHDR") {
            GL_CHECK(!header && len == 13, origin, ": a malformed or repeated IHDR chunk");
            f.width = int(std::min<uint32_t>(get_u32(data), INT32_MAX));
            f.height = int(std::min<uint32_t>(get_u32(data + 4), INT32_MAX));
            f.bit_depth = data[8];
            f.color_type = data[9];
            header = true;
        } else if (type == "tEXt" && split_keyword(data, len, key, rest)) {
            f.text.emplace_back(key, latin1_to_utf8(data + rest, len - rest));
        } else if (type == "iTXt" && split_keyword(data, len, key, rest) && len - rest >= 2 && data[rest] == 0) {
            // compression flag 0, method, then language tag NUL translated keyword NUL text.
            size_t p = rest + 2;
            for (int field = 0; field < 2 && p <= len; field++) {
                const auto* nul = static_cast<const uint8_t*>(std::memchr(data + p, 0, len - p));
                p = nul ? size_t(nul - data) + 1 : len + 1;
            }
            if (p <= len) f.text.emplace_back(key, std::string(reinterpret_cast<const char*>(data + p), len - p));
        }
        end = type == "IEND";
        pos += size_t(len) + 12;
    }
    return f;
}

PngInfo read_png_info(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    GL_CHECK(in.good(), path, ": cannot open it");
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    GL_CHECK(!in.bad(), path, ": read error");
    return read_png_info(bytes, path);
}

}  // namespace data
