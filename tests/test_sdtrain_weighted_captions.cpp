// sdtrain --weighted_captions end to end on the tiny model (sdtrain_fixtures.h): captions without
// weights train exactly as without the option (trained and frozen text encoder), weighted ones
// change the loss, alike whether the frozen text encoder's outputs are cached or computed each
// step, and a weight kohya's float() refuses stops the run before any model loads, naming the file.
#include <doctest/doctest.h>

#include "sdtrain_fixtures.h"
#include "train/run/recording.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

struct Losses : train::RunRecording {
    std::vector<double> losses;
    void on_step(const train::StepEvent& e) override {
        RunRecording::on_step(e);
        losses.push_back(e.loss);
    }
};

std::vector<double> losses_of(train::RunConfig c, const fs::path& out, bool weighted) {
    c.output_dir = out.string();
    c.weighted_captions = weighted;
    Losses l;
    train::Session(c, &l).run();
    return l.losses;
}

void weigh_captions(const fs::path& data) {
    const char* captions[] = {"a (red:1.5) cat, sitting", "a [red] cat, ((standing))", "a (blue cat:0.6)",
                              "a wide room, (window:1.3)", "a [[wide]] room", "a wide field, (sky)"};
    for (int i = 0; i < 6; i++) write_text(data / "1_tiny" / gl::cat("img", i, ".txt"), captions[i]);
}

}  // namespace

TEST_CASE("sdtrain weighted captions: plain captions train as without the option, weighted ones differ") {
    Scratch s("weighted");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig trained = tiny_config(model, data, s.root / "unused");
    trained.max_train_steps = 2;
    train::RunConfig frozen = trained;
    frozen.network_train_unet_only = true;
    train::RunConfig cached = frozen;
    cached.cache_text_encoder_outputs = true;

    // No bracket in the captions: every weight is 1, the same run bit for bit.
    const std::vector<double> te_plain = losses_of(trained, s.root / "a", false);
    REQUIRE(te_plain.size() == 2);
    CHECK(losses_of(trained, s.root / "b", true) == te_plain);
    const std::vector<double> frozen_plain = losses_of(frozen, s.root / "c", false);
    CHECK(losses_of(frozen, s.root / "d", true) == frozen_plain);
    const std::vector<double> cached_plain = losses_of(cached, s.root / "e", true);  // batched apart: not bitwise
    REQUIRE(cached_plain.size() == 2);
    for (size_t i = 0; i < 2; i++) CHECK(cached_plain[i] == doctest::Approx(frozen_plain[i]).epsilon(1e-6));

    weigh_captions(data);
    const std::vector<double> te_w = losses_of(trained, s.root / "f", true);
    CHECK(te_w[0] != te_plain[0]);
    const std::vector<double> frozen_w = losses_of(frozen, s.root / "g", true);
    CHECK(frozen_w[0] != frozen_plain[0]);
    // Cached outputs are the weighted ones (their key says so: no unweighted entry is reused).
    const std::vector<double> cached_w = losses_of(cached, s.root / "h", true);
    REQUIRE(cached_w.size() == 2);
    for (size_t i = 0; i < 2; i++) CHECK(cached_w[i] == doctest::Approx(frozen_w[i]).epsilon(1e-6));
}

TEST_CASE("sdtrain weighted captions: a weight kohya's float() refuses stops the run naming the caption file") {
    Scratch s("weighted_bad");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    write_text(data / "1_tiny" / "img2.txt", "a (blue:1.2.3) cat");
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    c.weighted_captions = true;
    const std::string err = gltest::error_of([&] { train::Session(c).run(); });
    CHECK(err.find("--weighted_captions: the caption of ") != std::string::npos);
    CHECK(err.find("img2.bmp") != std::string::npos);
    CHECK(err.find("'1.2.3' is not a number") != std::string::npos);
    CHECK_FALSE(fs::exists(s.root / "out" / "tiny.safetensors"));
    // Without the option the brackets are text.
    c.weighted_captions = false;
    c.max_train_steps = 1;
    CHECK(gltest::error_of([&] { train::Session(c).run(); }) == "(no error)");
}
