// Image decoding (data/image.h) against Pillow's view of the same files
// (tests/golden/data/dataset/images/, made by make_data_images.py), and the corrupt corpus.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "data/image.h"
#include "test_util.h"

namespace {

std::string images_dir() {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/dataset/images/";
}

int max_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    REQUIRE(a.size() == b.size());
    int m = 0;
    for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
    return m;
}

}  // namespace

TEST_CASE("data image: every layout decodes as Pillow shows it") {
    // Tolerance 0 everywhere: JPEG goes through libjpeg-turbo with Pillow's settings, WebP through
    // libwebp as in Pillow, and PNG / BMP are lossless.
    const char* names[] = {"rgb.png",      "rgba.png",    "grey.png",        "grey_alpha.png", "palette.png",
                           "rgb16.png",    "grey16.png",  "rgb.bmp",         "lossless.webp",  "alpha.webp",
                           "lossy.webp",   "1x1.png",     "rgb.jpg",         "rgb_q70.jpeg",   "progressive.jpg",
                           "grey.jpg",     "cmyk.jpg",    "orient1.jpg",     "orient2.jpg",    "orient3.jpg",
                           "orient4.jpg",  "orient5.jpg", "orient6.jpg",     "orient7.jpg",    "orient8.jpg"};
    for (const std::string name : names) {
        CAPTURE(name);
        const data::Image got = data::load_image(images_dir() + "ok/" + name);
        const data::Image want = data::load_image(images_dir() + "ok/" + name + ".ref.png");
        CHECK(got.width == want.width);
        CHECK(got.height == want.height);
        CHECK(got.alpha.empty());
        CHECK(max_abs_diff(got.rgb, want.rgb) == 0);
    }
}

TEST_CASE("data image: EXIF orientation gives the displayed size, the header agrees with the pixels") {
    for (int o = 1; o <= 8; o++) {
        CAPTURE(o);
        const std::vector<uint8_t> bytes = data::read_file_bytes(images_dir() + "ok/orient" + std::to_string(o) + ".jpg");
        CHECK(data::jpeg_exif_orientation(bytes.data(), bytes.size()) == o);
        const data::ImageHeader h = data::read_image_header(bytes.data(), bytes.size(), "x.jpg");
        CHECK(h.orientation == o);
        CHECK(h.width == (o >= 5 ? 16 : 24));
        CHECK(h.height == (o >= 5 ? 24 : 16));
        const data::Image img = data::decode_image(bytes.data(), bytes.size(), "x.jpg");
        CHECK(img.width == h.width);
        CHECK(img.height == h.height);
    }
    // apply_orientation on a 3x2 picture of distinct values, each case written out by hand.
    const std::vector<uint8_t> px = {1, 2, 3, 4, 5, 6};  // rows {1 2 3} {4 5 6}
    const std::vector<std::vector<uint8_t>> want = {
        {1, 2, 3, 4, 5, 6}, {3, 2, 1, 6, 5, 4}, {6, 5, 4, 3, 2, 1}, {4, 5, 6, 1, 2, 3},
        {1, 4, 2, 5, 3, 6}, {4, 1, 5, 2, 6, 3}, {6, 3, 5, 2, 4, 1}, {3, 6, 2, 5, 1, 4}};
    for (int o = 1; o <= 8; o++) CHECK(data::apply_orientation(px, 3, 2, 1, o) == want[size_t(o - 1)]);
}

TEST_CASE("data image: alpha kept as a mask on request, 255 where the file has none") {
    data::DecodeOptions opt;
    opt.alpha = data::AlphaMode::mask;
    for (const char* name : {"rgba.png", "alpha.webp"}) {
        CAPTURE(name);
        const data::Image got = data::load_image(images_dir() + "ok/" + name, opt);
        const data::Image alpha = data::load_image(images_dir() + "ok/" + name + ".alpha.png");
        const data::Image rgb = data::load_image(images_dir() + "ok/rgb.png");
        REQUIRE(got.alpha.size() == size_t(got.width) * got.height);
        for (size_t i = 0; i < got.alpha.size(); i++) REQUIRE(got.alpha[i] == alpha.rgb[i * 3]);
        CHECK(got.rgb == rgb.rgb);  // the colours as stored, not composited
    }
    const data::Image opaque = data::load_image(images_dir() + "ok/rgb.jpg", opt);
    CHECK(opaque.alpha == std::vector<uint8_t>(size_t(24) * 16, 255));
}

TEST_CASE("data image: extreme sizes decode, max_pixels refuses before decoding") {
    const data::Image wide = data::load_image(images_dir() + "ok/10000x10.png");
    CHECK(wide.width == 10000);
    CHECK(wide.height == 10);
    const data::Image one = data::load_image(images_dir() + "ok/1x1.png");
    CHECK(one.rgb.size() == 3);
    data::DecodeOptions small;
    small.max_pixels = 50000;
    CHECK(gltest::error_of([&] { data::load_image(images_dir() + "ok/10000x10.png", small); })
              .find("too large: 10000x10 is more than 50000 pixels") != std::string::npos);
}

TEST_CASE("data image: the corrupt corpus is refused with the path and the reason") {
    const std::map<std::string, std::string> reason = {
        {"empty.png", "empty file (0 bytes)"},
        {"truncated.png", "truncated PNG (no IEND chunk"},
        {"corrupt_data.png", "corrupt or truncated PNG data ("},
        {"truncated.jpg", "truncated JPEG (no end-of-image marker"},
        {"truncated.bmp", "truncated BMP ("},
        {"truncated.webp", "truncated WebP ("},
        {"png_named.jpg", "wrong extension: the file holds PNG data"},
        {"text.png", "not a PNG, JPEG, BMP or WebP image"},
        {"bad_header.png", "corrupt PNG header ("},
        {"huge_claim.png", "too large: 100000x100000"},
        {"missing.png", "cannot open the file"},
    };
    for (const auto& [name, why] : reason) {
        CAPTURE(name);
        const std::string path = images_dir() + "bad/" + name;
        try {
            data::load_image(path);
            FAIL("no error");
        } catch (const data::ImageError& e) {
            CHECK(e.path() == path);
            CHECK_MESSAGE(e.reason().find(why) == 0, e.reason());
            CHECK(std::string(e.what()).find(path + ": ") == 0);
        }
    }
}
