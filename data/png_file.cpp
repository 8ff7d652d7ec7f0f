#include "data/png_file.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/atomic_file.h"

// stb_image_write's implementation, private to this file (static), so another file may compile its
// own without clashing.
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace data {

namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr size_t kIhdrEnd = 8 + 4 + 4 + 13 + 4;  // signature, then IHDR's length, type, data, CRC

// The PNG CRC-32 (ISO 3309, polynomial 0xEDB88320) over chunk type and data.
uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

uint32_t get_u32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

void append_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
    put_u32(out, uint32_t(data.size()));
    const size_t start = out.size();
    out.insert(out.end(), type, type + 4);
    out.insert(out.end(), data.begin(), data.end());
    put_u32(out, crc32(out.data() + start, out.size() - start));
}

void check_keyword(const std::string& k) {
    GL_CHECK(!k.empty() && k.size() <= 79, "png: text keyword '", k, "' must be 1 to 79 characters");
    for (char c : k) GL_CHECK(c >= 32 && c <= 126, "png: text keyword '", k, "' holds a character outside printable ASCII");
    GL_CHECK(k.front() != ' ' && k.back() != ' ' && k.find("  ") == std::string::npos, "png: text keyword '", k,
             "' has leading, trailing or double spaces");
}

// A tEXt chunk for ASCII text, else an uncompressed iTXt chunk holding the UTF-8 bytes.
void append_text(std::vector<uint8_t>& out, const std::string& key, const std::string& text) {
    check_keyword(key);
    GL_CHECK(text.find('\0') == std::string::npos, "png: the text of '", key, "' holds a NUL byte");
    const bool ascii = std::all_of(text.begin(), text.end(), [](char c) { return (unsigned char)c < 0x80; });
    std::vector<uint8_t> data(key.begin(), key.end());
    data.push_back(0);
    if (!ascii) data.insert(data.end(), {0, 0, 0, 0});  // not compressed, method 0, no language, no translation
    data.insert(data.end(), text.begin(), text.end());
    append_chunk(out, ascii ? "tEXt" : "iTXt", data);
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
    for (const auto& [k, v] : text) {
        check_keyword(k);
        GL_CHECK(v.size() < (size_t(1) << 30), "png: the text of '", k, "' is too long");
    }
    std::vector<uint8_t> png;
    auto sink = [](void* ctx, void* data, int size) {
        auto* v = static_cast<std::vector<uint8_t>*>(ctx);
        v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
    };
    const int ok = stbi_write_png_to_func(sink, &png, img.width, img.height, img.channels, img.pixels.data(),
                                          img.width * img.channels);
    GL_CHECK(ok && png.size() > kIhdrEnd && std::memcmp(png.data(), kSignature, 8) == 0 &&
                 std::memcmp(png.data() + 12, "IHDR", 4) == 0,
             "png: stb_image_write could not encode a ", img.width, "x", img.height, " image");
    std::vector<uint8_t> chunks;
    for (const auto& [k, v] : text) append_text(chunks, k, v);
    png.insert(png.begin() + ptrdiff_t(kIhdrEnd), chunks.begin(), chunks.end());
    return png;
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
        GL_CHECK(crc32(bytes.data() + pos + 4, size_t(len) + 4) == get_u32(data + len), origin, ": PNG chunk ", type,
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
