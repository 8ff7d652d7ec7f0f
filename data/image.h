// Training images: decoding PNG, JPEG, BMP and WebP files into 8-bit RGB the way the dataset
// needs them. Files are untrusted: every failure is an ImageError naming the file and the reason
// (not a regular file or unreadable, empty, truncated, not an image, content that disagrees with
// the extension, too large, damaged image data), so the dataset can skip it and name it, or stop,
// as the user asked. Damaged data is refused even where a decoder would warn and fill in what it
// lost (a CRC mismatch, a premature end, corrupt JPEG scan data): a picture with grey blocks is
// not a training image.
// Rules (kohya decodes with Pillow and `convert("RGB")`, and we give Pillow's pixels; where kohya
// leaves a case open we say so):
// - grey and grey + alpha become RGB with equal channels; palette images their palette colours;
// - 16-bit PNG keeps the high byte of each sample (what Pillow's RGB conversion of 16-bit RGB does);
// - CMYK / YCCK JPEG (Adobe) are converted to RGB;
// - alpha is composited over white (kohya drops it, which shows whatever colour transparent pixels
//   happen to hold), or kept as a loss mask beside the RGB when AlphaMode::mask is asked;
// - JPEG EXIF orientation (tags 2..8) is applied, so width and height are the displayed ones.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"

namespace data {

enum class ImageFormat : uint8_t { unknown, png, jpeg, bmp, webp };
const char* format_name(ImageFormat f);
// From the first bytes of the file; unknown when they match no supported format.
ImageFormat sniff_format(const uint8_t* bytes, size_t n);
// From the extension, case-insensitive (.png .jpg .jpeg .bmp .webp); unknown for anything else.
ImageFormat format_of_extension(const std::filesystem::path& path);

// A file that cannot be used as a training image: what() is "<path>: <reason>".
class ImageError : public gl::Error {
public:
    ImageError(std::string path, std::string reason)
        : gl::Error(path + ": " + reason), path_(std::move(path)), reason_(std::move(reason)) {}
    const std::string& path() const { return path_; }
    const std::string& reason() const { return reason_; }

private:
    std::string path_, reason_;
};

enum class AlphaMode : uint8_t {
    white,  // composite over white; no mask
    mask,   // RGB as stored, alpha kept as Image::alpha (255 everywhere when the file has none)
};

struct DecodeOptions {
    AlphaMode alpha = AlphaMode::white;
    // Refuse images with more pixels than this before decoding them (a 20-byte PNG may claim
    // 10^9 pixels). The default takes 16384 x 16384.
    int64_t max_pixels = int64_t(1) << 28;
};

// 8-bit RGB, rows top to bottom, [height][width][3]; alpha [height][width] in AlphaMode::mask.
struct Image {
    int width = 0;
    int height = 0;
    std::vector<uint8_t> rgb;
    std::vector<uint8_t> alpha;
};

// What the header says, without decoding the pixels: the displayed size (EXIF orientation
// applied) and the stored layout.
struct ImageHeader {
    ImageFormat format = ImageFormat::unknown;
    int width = 0;
    int height = 0;
    int channels = 0;    // as stored: 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA / CMYK
    int orientation = 1;  // EXIF orientation 1..8 (JPEG only; 1 elsewhere)
    bool has_alpha = false;  // an alpha channel or PNG palette / colour-key transparency
};

// `name` is used in errors. All three throw ImageError.
ImageHeader read_image_header(const uint8_t* bytes, size_t n, const std::string& name,
                              const DecodeOptions& opt = {});
// The header, and the whole file checked by its decoder at a fraction of a decode's cost: PNG
// inflated and unfiltered row by row into one scratch row (every chunk's CRC, the zlib stream and
// its checksum, each row's filter), JPEG decoded at 1/8 scale (every coefficient entropy-decoded),
// WebP decoded without its loop filter, BMP decoded. A file it accepts, decode_image decodes; one
// it refuses, decode_image refuses with the same reason.
ImageHeader verify_image(const uint8_t* bytes, size_t n, const std::string& name, const DecodeOptions& opt = {});
Image decode_image(const uint8_t* bytes, size_t n, const std::string& name, const DecodeOptions& opt = {});

// The whole file, or an ImageError: not a regular file (a FIFO, device or folder is refused by its
// type before it is opened, so nothing waits for a writer), cannot be opened or read (the system's
// reason: permission denied, ...), larger than 2 GiB. load_image: decode_image on it.
std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path);
Image load_image(const std::filesystem::path& path, const DecodeOptions& opt = {});

// EXIF orientation of a JPEG (1 when it has none or it is unreadable: a broken EXIF block does
// not make a picture unusable). Exposed for tests and the fuzz target.
int jpeg_exif_orientation(const uint8_t* bytes, size_t n);
// The image as displayed: orientation 1..8 applied to interleaved pixels with `channels` bytes each.
std::vector<uint8_t> apply_orientation(const std::vector<uint8_t>& pixels, int width, int height, int channels,
                                       int orientation);

}  // namespace data
