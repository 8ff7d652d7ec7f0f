// PNG images with text chunks: written through libpng (to memory; the text chunks through
// png_set_text, between IHDR and the image data), and their chunks read back (size and text, CRCs
// checked with zlib's crc32). This is how sample
// images carry their generation parameters: A1111 stores them in a "parameters" text chunk, which
// A1111, ComfyUI and most image tools read back.
//
// A text whose bytes are all ASCII goes into a tEXt chunk; any other (UTF-8) text into an
// uncompressed iTXt chunk, as PIL's PngInfo.add_text does for text Latin-1 cannot hold.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace data {

// 8-bit pixels, rows top to bottom, channels interleaved (1 grey, 3 RGB, 4 RGBA): what is written.
struct Bitmap {
    int width = 0, height = 0, channels = 3;
    std::vector<uint8_t> pixels;  // width * height * channels
};

using TextChunks = std::vector<std::pair<std::string, std::string>>;  // (keyword, text), in order

// The PNG file's bytes. Throws gl::Error for an inconsistent image (sizes, channel count, pixel
// count) or an invalid keyword (1..79 printable Latin-1 characters, no leading / trailing / double
// spaces, as the PNG specification requires).
std::vector<uint8_t> encode_png(const Bitmap& img, const TextChunks& text = {});

// Writes the PNG atomically (temporary file in the same folder, fsync, rename): `path` is the
// old file or the complete new one. Throws gl::Error naming the path.
void write_png(const std::string& path, const Bitmap& img, const TextChunks& text = {});

// What a PNG's chunks say, pixels not decoded (image.h decodes images).
struct PngInfo {
    int width = 0, height = 0;
    int bit_depth = 0, color_type = 0;  // IHDR's
    TextChunks text;  // tEXt (Latin-1, returned as UTF-8) and uncompressed iTXt chunks, in file order
    // 1 grey, 2 grey + alpha, 3 RGB or palette, 4 RGBA (colour type 0, 4, 2 / 3, 6).
    int channels() const;
};
// Walks the chunk structure: the signature, every chunk's length and CRC, an IHDR first and an
// IEND last. Throws gl::Error naming `origin` for a bad signature, a truncated or corrupt chunk, or
// a missing IHDR / IEND. Compressed text chunks (zTXt, compressed iTXt) are skipped.
PngInfo read_png_info(const std::vector<uint8_t>& bytes, const std::string& origin);
PngInfo read_png_info(const std::string& path);

}  // namespace data
