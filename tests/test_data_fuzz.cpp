// Deterministic fuzz of the dataset's readers of untrusted input (run longer with
// GL_FUZZ_ITERATIONS, and under ASan/UBSan to make "no out-of-bounds read" strict): mutated and
// cut image files must decode or give an ImageError, never crash or hang, and the integrity check
// (verify_image) must refuse exactly the files decoding refuses, with the same reason; random caption text
// through every caption rule and mutated dataset TOML must give a result or a gl::Error. The
// coverage-guided libFuzzer target for the same readers is tests/fuzz/fuzz_data.cpp.
#include <doctest/doctest.h>

#include <random>

#include "data/caption.h"
#include "data/config.h"
#include "data/image.h"
#include "test_util.h"

namespace {

std::string images_dir() {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/dataset/images/ok/";
}

std::vector<uint8_t> mutate(std::vector<uint8_t> v, std::mt19937& rng) {
    const int kind = int(rng() % 4);
    if (v.empty()) return v;
    if (kind == 0) v.resize(rng() % v.size());  // cut anywhere
    const int flips = 1 + int(rng() % 8);
    for (int i = 0; i < flips && !v.empty(); i++) {
        const size_t at = kind == 1 ? rng() % std::min<size_t>(v.size(), 64) : rng() % v.size();  // headers often
        v[at] = kind == 3 ? uint8_t(rng()) : uint8_t(v[at] ^ (1u << (rng() % 8)));
    }
    return v;
}

}  // namespace

TEST_CASE("data fuzz: mutated images decode or are refused with an ImageError, the check agreeing") {
    const char* seeds[] = {"rgb.png", "rgba.png", "palette.png", "rgb16.png", "rgb.jpg", "progressive.jpg",
                           "cmyk.jpg", "orient6.jpg", "rgb.bmp", "lossless.webp", "lossy.webp", "alpha.webp"};
    std::mt19937 rng(1234);
    const int iterations = gltest::fuzz_iterations(1500);
    int refused = 0, decoded = 0;
    data::DecodeOptions opt;
    opt.max_pixels = 1 << 22;
    for (int it = 0; it < iterations; it++) {
        const char* seed = seeds[it % std::size(seeds)];
        const std::vector<uint8_t> bytes = mutate(data::read_file_bytes(images_dir() + seed), rng);
        opt.alpha = it % 2 ? data::AlphaMode::mask : data::AlphaMode::white;
        // The dataset's check and the caches' decode refuse the same files with the same reason.
        std::string verified = "(accepted)", decode = "(accepted)";
        try {
            data::verify_image(bytes.data(), bytes.size(), seed, opt);
        } catch (const data::ImageError& e) {
            verified = e.reason();
        }
        try {
            const data::Image img = data::decode_image(bytes.data(), bytes.size(), seed, opt);
            REQUIRE(img.rgb.size() == size_t(img.width) * img.height * 3);
            decoded++;
        } catch (const data::ImageError& e) {
            decode = e.reason();
            refused++;
        }
        CAPTURE(it);
        REQUIRE(verified == decode);
        data::jpeg_exif_orientation(bytes.data(), bytes.size());
    }
    MESSAGE(decoded, " decoded, ", refused, " refused");
    CHECK(refused > iterations / 4);
    CHECK(decoded > 0);
}

TEST_CASE("data fuzz: random caption text through every rule") {
    std::mt19937 rng(99);
    const char alphabet[] = ", |;\n\t ab\xC3\xA9\xE7\x8C\xAB\x80\xFF";
    data::CaptionOptions o;
    o.shuffle_caption = true;
    o.keep_tokens = 2;
    o.caption_tag_dropout_rate = 0.3;
    o.caption_prefix = "p";
    o.secondary_separator = ";";
    data::Rng draws(5);
    for (int it = 0; it < gltest::fuzz_iterations(3000); it++) {
        std::string s;
        for (size_t n = rng() % 40; n > 0; n--) s += alphabet[rng() % (sizeof alphabet - 1)];
        o.keep_tokens_separator = it % 3 == 0 ? "|" : "";
        o.caption_separator = it % 5 == 0 ? ";" : ",";
        const std::string c = data::process_caption(o, s, 1 + it % 4, draws);
        REQUIRE(c.size() <= 3 * s.size() + 8);
    }
}

TEST_CASE("data fuzz: mutated dataset TOML gives a config or a gl::Error") {
    const std::string base = R"([general]
shuffle_caption = true
caption_extension = ".txt"
[[datasets]]
resolution = [768, 512]
batch_size = 4
[[datasets.subsets]]
image_dir = "/d/x"
num_repeats = 3
keep_tokens = 1
)";
    std::mt19937 rng(7);
    for (int it = 0; it < gltest::fuzz_iterations(1500); it++) {
        std::string t = base;
        for (int k = 1 + int(rng() % 4); k > 0; k--) {
            const size_t at = rng() % t.size();
            if (rng() % 2) t[at] = char(32 + rng() % 95);
            else t.erase(at, 1 + rng() % 6);
        }
        try {
            data::parse_dataset_config(t, "fuzz.toml");
        } catch (const gl::Error&) {
        }
    }
}
