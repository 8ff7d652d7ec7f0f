// PNG writing and reading back: text chunks survive a round trip (ASCII in tEXt, UTF-8 in iTXt),
// pixels decode to what was written (through data/'s libpng decoder), corrupt files and bad keywords
// are refused, writes are atomic, grids tile.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <png.h>
#include <unistd.h>

#include "data/image.h"
#include "data/png_file.h"
#include "pipelines/a1111.h"
#include "test_util.h"

using data::Bitmap;
using gltest::error_of;

namespace {
Bitmap pattern(int w, int h, int c, int salt) {
    Bitmap im{w, h, c, {}};
    for (int i = 0; i < w * h * c; i++) im.pixels.push_back(uint8_t((i * 37 + salt * 11) & 0xff));
    return im;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
// A PNG's text chunks as libpng itself reads them (the whole file, so text after the image data
// counts too), with the chunk each came in (PNG_TEXT_COMPRESSION_NONE: tEXt,
// PNG_ITXT_COMPRESSION_NONE: uncompressed iTXt), and the colour type; "" on any libpng error.
struct LibpngText {
    std::vector<std::tuple<std::string, std::string, int>> chunks;  // keyword, text, compression
    int color_type = -1;
    std::string error;
};
LibpngText libpng_text(const std::vector<uint8_t>& bytes) {
    struct Source {
        const std::vector<uint8_t>* bytes;
        size_t at;
    } src{&bytes, 0};
    LibpngText out;
    png_structp png = png_create_read_struct(
        PNG_LIBPNG_VER_STRING, nullptr, [](png_structp p, png_const_charp) { png_longjmp(p, 1); },
        [](png_structp, png_const_charp) {});
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, nullptr);
        out.error = "libpng refused the file";
        return out;
    }
    png_set_read_fn(png, &src, [](png_structp p, png_bytep to, png_size_t n) {
        Source* s = static_cast<Source*>(png_get_io_ptr(p));
        if (n > s->bytes->size() - s->at) png_error(p, "end of file");
        std::memcpy(to, s->bytes->data() + s->at, n);
        s->at += n;
    });
    png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
    png_read_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
    png_textp text = nullptr;
    const int n = png_get_text(png, info, &text, nullptr);
    for (int i = 0; i < n; i++)
        out.chunks.emplace_back(text[i].key, std::string(text[i].text, text[i].compression == PNG_TEXT_COMPRESSION_NONE
                                                                           ? text[i].text_length
                                                                           : text[i].itxt_length),
                                text[i].compression);
    out.color_type = png_get_color_type(png, info);
    png_destroy_read_struct(&png, &info, nullptr);
    return out;
}
// The pixels as libpng decodes them (RGB, alpha kept apart).
data::Image pixels_of(const std::vector<uint8_t>& png) {
    return data::decode_image(png.data(), png.size(), "mem.png", {data::AlphaMode::mask});
}
}  // namespace

TEST_CASE("png: pixels and text chunks round trip") {
    const Bitmap im = pattern(13, 7, 3, 1);
    const std::string params = "a cat, (masterpiece)\nNegative prompt: blurry\nSteps: 20, Sampler: Euler a, Seed: 1";
    const std::string utf8 = "\xe7\x8c\xab\xe3\x81\xa8\xe7\x8a\xac, caf\xc3\xa9";  // CJK and Latin-1 letters
    const auto bytes = data::encode_png(im, {{"parameters", params}, {"Comment", utf8}});
    // The chunks sit between IHDR and the image data, as PIL writes them.
    const std::string raw(bytes.begin(), bytes.end());
    CHECK(raw.find("tEXtparameters") == 37);
    CHECK(raw.find("iTXtComment") != std::string::npos);
    CHECK(raw.find("tEXtparameters") < raw.find("IDAT"));

    const data::PngInfo f = data::read_png_info(bytes, "mem.png");
    CHECK(f.width == 13);
    CHECK(f.height == 7);
    CHECK(f.channels() == 3);
    CHECK(f.bit_depth == 8);
    REQUIRE(f.text.size() == 2);
    CHECK(f.text[0] == std::pair<std::string, std::string>{"parameters", params});
    CHECK(f.text[1] == std::pair<std::string, std::string>{"Comment", utf8});
    CHECK(pixels_of(bytes).rgb == im.pixels);

    // Grey and RGBA images too.
    const Bitmap grey = pattern(5, 9, 1, 1), rgba = pattern(5, 9, 4, 2);
    const data::Image g = pixels_of(data::encode_png(grey));
    for (size_t i = 0; i < grey.pixels.size(); i++) CHECK(g.rgb[3 * i + 1] == grey.pixels[i]);
    const data::Image c = pixels_of(data::encode_png(rgba));
    for (size_t i = 0; i < 45; i++) {
        CHECK(c.rgb[3 * i] == rgba.pixels[4 * i]);
        CHECK(c.alpha[i] == rgba.pixels[4 * i + 3]);
    }
}

TEST_CASE("png: libpng reads the text chunks back as A1111 and PIL do") {
    const std::string params = "a cat\nNegative prompt: blurry\nSteps: 20, Sampler: Euler a, Seed: 1";
    const std::string utf8 = "\xe7\x8c\xab, caf\xc3\xa9";
    const LibpngText t = libpng_text(data::encode_png(pattern(7, 5, 3, 1), {{"parameters", params}, {"Comment", utf8},
                                                                            {"empty", ""}}));
    REQUIRE(t.error.empty());
    CHECK(t.color_type == PNG_COLOR_TYPE_RGB);
    REQUIRE(t.chunks.size() == 3);
    CHECK(t.chunks[0] == std::tuple<std::string, std::string, int>{"parameters", params, PNG_TEXT_COMPRESSION_NONE});
    CHECK(t.chunks[1] == std::tuple<std::string, std::string, int>{"Comment", utf8, PNG_ITXT_COMPRESSION_NONE});
    CHECK(t.chunks[2] == std::tuple<std::string, std::string, int>{"empty", "", PNG_TEXT_COMPRESSION_NONE});
    // Each channel count has its colour type: grey, grey + alpha, RGB, RGBA.
    const int types[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
    for (int c = 1; c <= 4; c++) {
        const std::vector<uint8_t> png = data::encode_png(pattern(3, 2, c, c));
        CHECK(libpng_text(png).color_type == types[c - 1]);
        CHECK(data::read_png_info(png, "c.png").channels() == c);
    }
    // A flipped bit in the text is libpng's error too, as it is read_png_info's.
    std::vector<uint8_t> flipped = data::encode_png(pattern(4, 4, 3, 2), {{"parameters", "x"}});
    flipped[45] ^= 0x20;
    CHECK(libpng_text(flipped).error == "libpng refused the file");
}

TEST_CASE("png: corrupt data and bad arguments are refused") {
    auto bytes = data::encode_png(pattern(4, 4, 3, 2), {{"parameters", "x"}});
    auto flipped = bytes;
    flipped[45] ^= 0x20;  // inside the tEXt chunk's data
    CHECK(has(error_of([&] { data::read_png_info(flipped, "bad.png"); }), "bad.png: PNG chunk tEXt at byte 33 fails its CRC"));
    auto cut = bytes;
    cut.resize(50);
    CHECK(has(error_of([&] { data::read_png_info(cut, "cut.png"); }), "cut.png: PNG chunk tEXt at byte 33 runs past the end"));
    cut.resize(33);
    CHECK(has(error_of([&] { data::read_png_info(cut, "cut.png"); }), "cut.png: truncated PNG"));
    auto no_header = bytes;
    std::memcpy(no_header.data() + 12, "IHDX", 4);
    CHECK(has(error_of([&] { data::read_png_info(no_header, "h.png"); }), "fails its CRC"));
    CHECK(has(error_of([] { data::read_png_info({1, 2, 3}, "x.png"); }), "not a PNG file"));
    CHECK(has(error_of([] { data::encode_png(pattern(4, 4, 3, 0), {{"", "x"}}); }), "must be 1 to 79 characters"));
    CHECK(has(error_of([] { data::encode_png(pattern(4, 4, 3, 0), {{" lead", "x"}}); }), "leading, trailing"));
    CHECK(has(error_of([] { data::encode_png(pattern(4, 4, 3, 0), {{"k", std::string("a\0b", 3)}}); }),
              "holds a NUL byte"));
    Bitmap short_img = pattern(4, 4, 3, 0);
    short_img.pixels.pop_back();
    CHECK(has(error_of([&] { data::encode_png(short_img); }), "holds 47 bytes, expected 48"));
    CHECK(has(error_of([] { data::encode_png(Bitmap{0, 4, 3, {}}); }), "image size 0x4"));
    CHECK(has(error_of([] { data::read_png_info("/nonexistent/dir/x.png"); }), "/nonexistent/dir/x.png: cannot open it"));
}

TEST_CASE("png: atomic write over an existing file, and a failed write keeps it") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("gl-test-png-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string path = (dir / "out.png").string();
    data::write_png(path, pattern(6, 6, 3, 1), {{"parameters", "first"}});
    data::write_png(path, pattern(6, 6, 3, 2), {{"parameters", "second"}});
    CHECK(data::read_png_info(path).text.at(0).second == "second");
    CHECK(data::load_image(path).rgb == pattern(6, 6, 3, 2).pixels);
    // A bad image throws before the file is touched.
    CHECK(has(error_of([&] { data::write_png(path, Bitmap{2, 2, 3, {1}}); }), "out.png: png:"));
    CHECK(data::read_png_info(path).text.at(0).second == "second");
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
    CHECK(files == 1);  // no temporary file left behind
    CHECK(has(error_of([&] { data::write_png((dir / "missing" / "x.png").string(), pattern(2, 2, 3, 0)); }),
              "x.png: its folder does not exist"));
    fs::remove_all(dir);
}

TEST_CASE("png: grids") {
    const Bitmap a = pattern(4, 3, 3, 1), b = pattern(2, 5, 3, 2), c = pattern(4, 3, 3, 3);
    // Pixels of g that differ from the images placed at their (x, y), or that are not black
    // outside them.
    auto wrong_pixels = [](const Bitmap& g, const std::vector<std::tuple<const Bitmap*, int, int>>& placed) {
        std::vector<uint8_t> want(g.pixels.size(), 0);
        for (const auto& [im, x0, y0] : placed)
            for (int y = 0; y < im->height; y++)
                std::copy_n(&im->pixels[size_t(y * im->width * 3)], im->width * 3,
                            &want[size_t(((y0 + y) * g.width + x0) * 3)]);
        int wrong = 0;
        for (size_t i = 0; i < want.size(); i++) wrong += g.pixels[i] != want[i];
        return wrong;
    };
    // Cells as large as the largest image (4x5), each image centred in its cell; 3 images make
    // 2 rows of 2, as A1111 lays them out, the last cell black.
    const Bitmap g = sd::make_grid({a, b, c});
    CHECK(g.width == 8);
    CHECK(g.height == 10);
    CHECK(wrong_pixels(g, {{&a, 0, 1}, {&b, 5, 0}, {&c, 0, 6}}) == 0);
    const Bitmap row = sd::make_grid({a, b, c}, 3);  // 3 columns asked for: one row
    CHECK(row.width == 12);
    CHECK(row.height == 5);
    CHECK(wrong_pixels(row, {{&a, 0, 1}, {&b, 5, 0}, {&c, 8, 1}}) == 0);
    // A1111's rows: round(sqrt(n)), then as many columns as needed.
    for (const auto& [n, cols, rows] : {std::tuple{1, 1, 1}, {2, 2, 1}, {4, 2, 2}, {5, 3, 2}, {6, 3, 2}, {7, 3, 3},
                                        {9, 3, 3}, {10, 4, 3}, {13, 4, 4}}) {
        const Bitmap grid = sd::make_grid(std::vector<Bitmap>(size_t(n), a));
        CHECK_MESSAGE(grid.width == 4 * cols, n, " images");
        CHECK_MESSAGE(grid.height == 3 * rows, n, " images");
    }
    CHECK(has(error_of([&] { sd::make_grid({a, pattern(2, 2, 4, 0)}); }), "images with 3 and 4 channels"));
    CHECK(has(error_of([] { sd::make_grid({}); }), "no images"));
}
