// Resizing (data/resize.h) against cv2.resize(INTER_AREA) and Pillow's LANCZOS, the two calls
// kohya's resize_image makes (tests/golden/data/dataset/resize/, made by make_data_resize.py).
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "data/image.h"
#include "data/resize.h"
#include "test_util.h"

namespace {

std::string resize_dir() {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/dataset/resize/";
}

// The PNG's pixels with `channels` channels (grey PNGs decode to equal RGB channels).
std::vector<uint8_t> pixels(const std::string& path, int channels) {
    const data::Image img = data::load_image(path);
    if (channels == 3) return img.rgb;
    std::vector<uint8_t> grey(img.rgb.size() / 3);
    for (size_t i = 0; i < grey.size(); i++) grey[i] = img.rgb[i * 3];
    return grey;
}

}  // namespace

TEST_CASE("data resize: byte for byte what cv2 INTER_AREA and Pillow LANCZOS give") {
    // Tolerance 0: both are reproduced operation by operation (see resize.cpp), so any difference
    // is a bug, not rounding noise.
    std::ifstream cases(resize_dir() + "cases.txt");
    REQUIRE(cases);
    std::string line;
    int n_area = 0, n_lanczos = 0;
    while (std::getline(cases, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream is(line);
        std::string name, method;
        int sw, sh, ch, dw, dh;
        is >> name >> sw >> sh >> ch >> dw >> dh >> method;
        CAPTURE(line);
        const std::vector<uint8_t> src = pixels(resize_dir() + name + ".src.png", ch);
        const std::vector<uint8_t> want = pixels(resize_dir() + name + ".out.png", ch);
        REQUIRE(src.size() == size_t(sw) * sh * ch);
        const std::vector<uint8_t> got = data::resize_like_kohya(src.data(), sw, sh, ch, dw, dh);
        REQUIRE(got.size() == want.size());
        size_t wrong = 0;
        int worst = 0;
        for (size_t i = 0; i < got.size(); i++) {
            const int d = std::abs(int(got[i]) - int(want[i]));
            wrong += d != 0;
            worst = std::max(worst, d);
        }
        CHECK_MESSAGE(wrong == 0, wrong, " of ", got.size(), " bytes differ, by up to ", worst);
        (method == "area" ? n_area : n_lanczos)++;
    }
    CHECK(n_area >= 12);
    CHECK(n_lanczos >= 12);
}

TEST_CASE("data resize: crop, flip and bad sizes") {
    const std::vector<uint8_t> px = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // 3x2, 2 channels
    CHECK(data::crop(px.data(), 3, 2, 2, 1, 1, 2, 1) == std::vector<uint8_t>{9, 10, 11, 12});
    std::vector<uint8_t> f = px;
    data::flip_horizontal(f.data(), 3, 2, 2);
    CHECK(f == std::vector<uint8_t>{5, 6, 3, 4, 1, 2, 11, 12, 9, 10, 7, 8});
    CHECK(gltest::error_of([&] { data::crop(px.data(), 3, 2, 2, 2, 0, 2, 1); }).find("outside 3x2") !=
          std::string::npos);
    CHECK(gltest::error_of([&] { data::resize_area(px.data(), 3, 2, 2, 4, 2); }).find("shrinks only") !=
          std::string::npos);
    CHECK(gltest::error_of([&] { data::resize_lanczos(px.data(), 3, 2, 5, 4, 2); }).find("channels must be 1..4") !=
          std::string::npos);
    CHECK(gltest::error_of([&] { data::resize_lanczos(px.data(), 3, 2, 2, 0, 2); }).find("bad sizes") !=
          std::string::npos);
}

TEST_CASE("data resize: kohya's resize_interpolation, byte for byte") {
    // tests/golden/data/dataset/resize_interp/ (make_data_resize_interp.py): kohya's own resize_image
    // with each interpolation sdtrain reimplements. Tolerance 0.
    const std::string dir = resize_dir() + "../resize_interp/";
    std::ifstream cases(dir + "cases.txt");
    REQUIRE(cases);
    std::string line;
    std::map<std::string, int> n;
    while (std::getline(cases, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream is(line);
        std::string name, how;
        int sw, sh, ch, dw, dh;
        is >> name >> sw >> sh >> ch >> dw >> dh >> how;
        CAPTURE(line);
        const std::vector<uint8_t> src = pixels(dir + name + ".src.png", ch);
        const std::vector<uint8_t> want = pixels(dir + name + ".out.png", ch);
        REQUIRE(src.size() == size_t(sw) * sh * ch);
        const data::Interpolation interp = data::parse_interpolation(how, "test");
        CHECK(data::can_resize(interp, sw, sh, dw, dh));
        const std::vector<uint8_t> got = data::resize_kohya(src.data(), sw, sh, ch, dw, dh, interp);
        REQUIRE(got.size() == want.size());
        size_t wrong = 0;
        int worst = 0;
        for (size_t i = 0; i < got.size(); i++) {
            const int d = std::abs(int(got[i]) - int(want[i]));
            wrong += d != 0;
            worst = std::max(worst, d);
        }
        CHECK_MESSAGE(wrong == 0, wrong, " of ", got.size(), " bytes differ, by up to ", worst);
        n[how]++;
    }
    CHECK(n["lanczos"] >= 20);
    CHECK(n["box"] >= 20);
    CHECK(n["area"] >= 8);
}

TEST_CASE("data resize: resize_interpolation names") {
    CHECK(data::parse_interpolation("box", "x") == data::Interpolation::box);
    CHECK(std::string(data::interpolation_name(data::Interpolation::area)) == "area");
    const std::string linear = gltest::error_of([] { data::parse_interpolation("bilinear", "subset #1"); });
    CHECK(linear.find("subset #1: resize_interpolation 'bilinear' is not supported by sdtrain") == 0);
    CHECK(linear.find("INTER_LINEAR") != std::string::npos);
    CHECK(gltest::error_of([] { data::parse_interpolation("cubic", "x"); }).find("INTER_CUBIC") != std::string::npos);
    CHECK(gltest::error_of([] { data::parse_interpolation("lanczos4", "x"); }).find("not one kohya accepts") !=
          std::string::npos);
    CHECK(!data::can_resize(data::Interpolation::area, 10, 10, 11, 9));
    CHECK(data::can_resize(data::Interpolation::box, 10, 10, 11, 9));
    CHECK(gltest::error_of([] { data::parse_interpolation("nearest", "x"); }).find("INTER_NEAREST_EXACT") !=
          std::string::npos);
    const std::vector<uint8_t> px(12, 7);
    CHECK(gltest::error_of([&] { data::resize_kohya(px.data(), 2, 2, 3, 3, 2, data::Interpolation::area); })
              .find("'area' enlarges 2x2 to 3x2") != std::string::npos);
    // the size kept: a copy, whatever the filter
    CHECK(data::resize_kohya(px.data(), 2, 2, 3, 2, 2, data::Interpolation::box) == px);
}
