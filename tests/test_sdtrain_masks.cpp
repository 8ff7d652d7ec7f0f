// sdtrain's masked loss from mask images and several datasets end to end on the tiny model
// (sdtrain_fixtures.h): black masks train nothing (every loss 0), white masks give the unmasked
// run's losses, half-grey ones half of them; mask images need --masked_loss; two [[datasets]] of
// their own batch sizes run kohya's batches per epoch.
#include <doctest/doctest.h>

#include <cmath>

#include "data/png_file.h"
#include "sdtrain_fixtures.h"
#include "train/run/recording.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

struct Steps : train::RunRecording {
    std::vector<double> losses;
    train::StepCounts counts;
    void on_plan(const train::RunPlan& p) override {
        RunRecording::on_plan(p);
        counts = p.counts;
    }
    void on_step(const train::StepEvent& e) override {
        RunRecording::on_step(e);
        losses.push_back(e.loss);
    }
};

std::vector<double> losses_of(const train::RunConfig& c) {
    Steps s;
    train::Session(c, &s).run();
    return s.losses;
}

// A mask for each image of the tiny dataset (its sizes and names) in `dir`, all of value `v`.
void masks(const fs::path& dir, uint8_t v) {
    fs::create_directories(dir);
    for (int i = 0; i < 6; i++) {
        const int w = i < 3 ? 32 : 48, h = i < 3 ? 32 : 24;
        data::write_png((dir / gl::cat("img", i, ".png")).string(),
                        data::Bitmap{w, h, 3, std::vector<uint8_t>(size_t(w * h * 3), v)});
    }
}

train::RunConfig with_masks(train::RunConfig c, const fs::path& toml, const fs::path& mask_dir) {
    write_text(toml, gl::cat("[[datasets]]\nresolution = 48\nbatch_size = 2\nenable_bucket = true\n"
                             "bucket_no_upscale = true\nbucket_reso_steps = 8\nmin_bucket_reso = 16\n"
                             "max_bucket_reso = 64\n[[datasets.subsets]]\nimage_dir = '",
                             (fs::path(*c.train_data_dir) / "1_tiny").string(), "'\ncaption_extension = '.txt'\n",
                             "conditioning_data_dir = '", mask_dir.string(), "'\n"));
    c.dataset_config = toml.string();
    c.train_data_dir.reset();
    c.masked_loss = true;
    return c;
}

}  // namespace

TEST_CASE("sdtrain masks: black masks train nothing, white ones as no mask, grey ones half (cached latents)") {
    Scratch s("masks");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig plain = tiny_config(model, data, s.root / "plain");
    plain.max_train_steps = 3;
    const std::vector<double> base = losses_of(plain);
    REQUIRE(base.size() == 3);
    for (double l : base) CHECK(l > 0);

    masks(s.root / "black", 0);
    masks(s.root / "white", 255);
    masks(s.root / "grey", 128);
    train::RunConfig black = with_masks(plain, s.root / "black.toml", s.root / "black");
    black.output_dir = (s.root / "out_black").string();
    for (double l : losses_of(black)) CHECK(l == 0.0);
    train::RunConfig white = with_masks(plain, s.root / "white.toml", s.root / "white");
    white.output_dir = (s.root / "out_white").string();
    const std::vector<double> w = losses_of(white);
    REQUIRE(w.size() == 3);
    for (size_t i = 0; i < 3; i++) CHECK(w[i] == doctest::Approx(base[i]).epsilon(1e-5));
    train::RunConfig grey = with_masks(plain, s.root / "grey.toml", s.root / "grey");
    grey.output_dir = (s.root / "out_grey").string();
    // The first step only: later ones follow weights that trained on other losses.
    CHECK(losses_of(grey)[0] == doctest::Approx(base[0] * 128.0 / 255.0).epsilon(1e-4));

    train::RunConfig unasked = white;
    unasked.masked_loss = false;
    std::string err;
    try {
        train::Session(unasked).run();
    } catch (const gl::Error& e) {
        err = e.what();
    }
    CHECK(err.find("conditioning_data_dir (mask images) needs --masked_loss") != std::string::npos);
}

TEST_CASE("sdtrain datasets: two [[datasets]] at their own batch sizes run kohya's batches per epoch") {
    Scratch s("multires");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    const std::string dir = (data / "1_tiny").string();
    write_text(s.root / "multi.toml",
               gl::cat("[general]\ncaption_extension = '.txt'\nenable_bucket = true\nbucket_no_upscale = true\n"
                       "bucket_reso_steps = 8\nmin_bucket_reso = 16\nmax_bucket_reso = 64\n"
                       "[[datasets]]\nresolution = 48\nbatch_size = 2\n[[datasets.subsets]]\nimage_dir = '", dir,
                       "'\n[[datasets]]\nresolution = 32\nbatch_size = 3\nenable_bucket = false\n"
                       "[[datasets.subsets]]\nimage_dir = '", dir, "'\nnum_repeats = 2\n"));
    c.dataset_config = (s.root / "multi.toml").string();
    c.train_data_dir.reset();
    c.gradient_accumulation_steps = 1;
    c.max_train_steps = 4;
    Steps r;
    train::Session(c, &r).run();
    // Dataset 1: buckets 32x32 and 48x24 of 3 images at batch 2 (2 + 2 batches); dataset 2: one
    // 32x32 bucket of 12 images at batch 3 (4 batches).
    CHECK(r.counts.batches_per_epoch == 8);
    CHECK(r.losses.size() == 4);
    for (double l : r.losses) CHECK(std::isfinite(l));
}
