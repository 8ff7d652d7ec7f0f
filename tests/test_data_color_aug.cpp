// kohya's color_aug (data/color_aug.h) against kohya's own AugHelper.color_aug run with cv2 and
// numpy (tests/golden/make_kohya_color_aug.py): the hue branch and the gamma branch byte for byte
// for fixed draws, the branch odds of the draw, and the option's rules in a run.
#include <doctest/doctest.h>

#include "data/color_aug.h"
#include "ggml-lite/io/safetensors.h"
#include "sdtrain_fixtures.h"
#include "test_util.h"
#include "train/run/config.h"
#include "train/run/recording.h"
#include "train/run/session.h"

namespace {

std::vector<uint8_t> bytes(const gl::io::SafetensorsFile& f, const std::string& key) {
    std::vector<uint8_t> v(size_t(f.info(key).numel()));
    f.read(key, v.data(), gl::DType::u8);
    return v;
}

}  // namespace

TEST_CASE("data color_aug: the hue shift and the gamma give kohya's bytes (cv2 5.0's AVX2 HSV, numpy's pow)") {
    const gl::io::SafetensorsFile f(gltest::golden_dir("kohya") + "color_aug.safetensors");
    const std::vector<uint8_t> image = bytes(f, "image");
    const int width = int(f.info("image").shape[1]);
    const std::vector<double> draws = {0.0, 0.03125, 0.37, 0.4999, 0.5001, 0.8, 0.999999};  // the script's DRAWS
    CHECK_FALSE(f.has("hue_" + std::to_string(draws.size())));
    int changed = 0;
    for (size_t i = 0; i < draws.size(); i++) {
        CAPTURE(i);
        std::vector<uint8_t> hue = image, gamma = image;
        double shift = -8 + 16 * draws[i];
        if (shift < 0) shift += 180;
        data::hue_shift(hue, width, shift);
        data::gamma_aug(gamma, 0.95 + (1.05 - 0.95) * draws[i]);
        const std::vector<uint8_t> want_hue = bytes(f, gl::cat("hue_", i)), want_gamma = bytes(f, gl::cat("gamma_", i));
        size_t bad_hue = 0, bad_gamma = 0;
        for (size_t k = 0; k < image.size(); k++) {
            bad_hue += hue[k] != want_hue[k];
            bad_gamma += gamma[k] != want_gamma[k];
        }
        CHECK(bad_hue == 0);
        CHECK(bad_gamma == 0);
        changed += hue != image;
    }
    CHECK(changed == int(draws.size()));  // every shift moves some pixel: the comparison can fail
}

TEST_CASE("data color_aug: a third of the draws change the image, half of those by hue") {
    std::vector<uint8_t> img(16 * 4 * 3);
    for (size_t i = 0; i < img.size(); i++) img[i] = uint8_t(i * 37 % 251);
    int changed = 0;
    const int n = 3000;
    for (int k = 0; k < n; k++) {
        data::Rng rng = data::Rng::derive(5, {uint64_t(k)});
        std::vector<uint8_t> x = img;
        data::color_aug(x, 16, rng);
        changed += x != img;
    }
    CHECK(changed > n * 0.29);  // random() <= 0.33, less the rare draws that change nothing
    CHECK(changed < n * 0.37);
    CHECK_THROWS_AS(data::hue_shift(img, 7, 3.0), gl::Error);  // not whole rows
}

TEST_CASE("data color_aug: --color_aug trains without cached latents and is refused with them, as kohya does") {
    train::RunConfig c;
    c.pretrained_model_name_or_path = "m.safetensors";
    c.train_data_dir = "data";
    c.output_dir = "out";
    c.network_module = "networks.lora";
    c.resolution = std::array<int, 2>{512, 512};
    c.color_aug = true;
    CHECK(gltest::error_of([&] { c.validate(); }) == "(no error)");
    c.cache_latents = true;
    CHECK(gltest::error_of([&] { c.validate(); }).find("--cache_latents cannot be used with --color_aug") !=
          std::string::npos);
}

TEST_CASE("data color_aug: a run with --color_aug (latents not cached, flips) changes the losses, not the counts") {
    using namespace sdtrain_test;
    Scratch s("color_aug");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    struct Losses : train::RunRecording {
        std::vector<double> losses;
        void on_step(const train::StepEvent& e) override {
            RunRecording::on_step(e);
            losses.push_back(e.loss);
        }
    };
    const auto losses = [&](bool aug, const char* out) {
        train::RunConfig c = tiny_config(model, data, s.root / out);
        c.cache_latents = false;
        c.flip_aug = true;
        c.color_aug = aug;
        c.max_train_steps = 4;
        Losses l;
        train::Session(c, &l).run();
        return l.losses;
    };
    const std::vector<double> plain = losses(false, "a"), aug = losses(true, "b");
    REQUIRE(plain.size() == 4);
    REQUIRE(aug.size() == 4);
    CHECK(plain != aug);  // 16 images drawn, a third augmented: some batch changed
}
