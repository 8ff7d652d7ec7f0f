// A resume end to end on the tiny model (sdtrain_fixtures.h): the noise position a state holds is
// what BucketTrainer::noise_draws counts; the same dataset named another way (absolute, relative,
// through a symlink, with "..") resumes, a state of the earlier format too, while a genuinely
// changed dataset (an image replaced, one renamed) and tampered positions are refused by name.
#include <doctest/doctest.h>

#include <chrono>

#include "sdtrain_fixtures.h"
#include "train/run/session.h"
#include "train/run/session_impl.h"
#include "train/run/state.h"

using namespace sdtrain_test;
using gltest::error_of;

namespace {

// The tiny run of sdtrain_fixtures.h for 2 steps (one epoch: 2 updates of 2 batches), its state kept.
train::RunConfig two_steps(const fs::path& model, const std::string& data, const fs::path& out) {
    train::RunConfig c = tiny_config(model, data, out);
    c.train_data_dir = data;
    c.max_train_steps = 2;
    c.save_state_on_train_end = true;
    return c;
}

std::string run_error(const train::RunConfig& c) {
    return error_of([&] { train::Session(c).run(); });
}

void edit_state(const fs::path& state, const std::string& key, const std::string& raw) {
    std::string s = gltest::slurp(state / "train_state.json");
    const std::string k = "\"" + key + "\": ";
    const size_t at = s.find(k) + k.size();
    s = s.substr(0, at) + raw + s.substr(s.find_first_of(",\n}", at));
    write_text(state / "train_state.json", s);
}

}  // namespace

TEST_CASE("sdtrain state: the noise position of a run is what BucketTrainer::noise_draws counts for its batches") {
    Scratch s("noise_draws");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    REQUIRE(run_error(two_steps(model, data.string(), s.root / "out")) == "(no error)");
    const train::RunPosition p = train::read_run_position(s.root / "out" / "tiny-state");
    // One epoch: each bucket's 3 images as a batch of 2 and one of 1; latents 1/2 of the pixels
    // (the tiny VAE) with 4 channels: 16 x 16 and 24 x 12.
    const train::Objective o = tiny_config(model, data, s.root).objective();
    uint64_t want = 0;
    for (const int64_t per_image : {16 * 16 * 4, 24 * 12 * 4})
        want += train::BucketTrainer::noise_draws(o, 2, 2 * per_image, 4) + train::BucketTrainer::noise_draws(o, 1, per_image, 4);
    CHECK(p.batches_done == 4);
    CHECK(p.trainer.noise_counter == want);
}

TEST_CASE("sdtrain state: a resume matches the dataset by content, not by how its folder is spelled") {
    Scratch s("resume_content");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    const std::string relative = fs::relative(data, fs::current_path()).string();
    REQUIRE(relative.rfind("..", 0) == 0);
    REQUIRE(run_error(two_steps(model, relative, out)) == "(no error)");
    const fs::path state = out / "tiny-state";
    fs::copy(state, s.root / "saved", fs::copy_options::recursive);
    fs::create_directory_symlink(data, s.root / "data-link");
    for (const std::string& spelling : {data.string(), data.string() + "/", (data / "1_tiny" / "..").string(),
                                        (s.root / "data-link").string()}) {
        CAPTURE(spelling);
        train::RunConfig c = two_steps(model, spelling, out);
        c.resume = state.string();
        c.max_train_steps = 4;
        c.save_state_on_train_end = false;
        CHECK(run_error(c) == "(no error)");
    }
    // A state of the earlier format (the image paths as given) still resumes with those paths.
    {
        train::RunConfig c = two_steps(model, relative, out);
        const train::RunData d = train::load_run_data(c, c.seed.value_or(0));
        const fs::path old = s.root / "old-format";
        fs::copy(s.root / "saved", old, fs::copy_options::recursive);
        edit_state(old, "version", "1");
        edit_state(old, "run_identity", "\"" + train::run_identity(d, 42, 2, 2, 1) + "\"");
        c.resume = old.string();
        c.max_train_steps = 4;
        CHECK(run_error(c) == "(no error)");
    }
    // Tampered positions are refused by name.
    const struct {
        std::string key, value, error;
    } tampered[] = {
        {"noise_counter", "9223372036854775807", "sdtrain.noise_counter 9223372036854775807 is outside"},
        {"noise_counter", "18446744073709551616", "field 'sdtrain.noise_counter' is 1.8446744073709552e+19"},
        {"noise_counter", "-1", "field 'sdtrain.noise_counter' is -1, out of range"},
        {"current_epoch", "9223372036854775807", "current_epoch 9223372036854775807 disagrees"},
        {"batches_done", "3", "sdtrain.batches_done 3 and current_step 2 disagree"},
    };
    for (const auto& t : tampered) {
        CAPTURE(t.key);
        fs::remove_all(state);
        fs::copy(s.root / "saved", state, fs::copy_options::recursive);
        edit_state(state, t.key, t.value);
        train::RunConfig c = two_steps(model, data.string(), out);
        c.resume = state.string();
        c.max_train_steps = 4;
        const std::string e = run_error(c);
        CHECK_MESSAGE(e.find(t.error) != std::string::npos, e);
        CHECK_MESSAGE(e.find("--resume " + (state / "train_state.json").string()) == 0, e);
    }
    // A changed dataset is refused: an image replaced (same size, another time), one renamed.
    fs::remove_all(state);
    fs::copy(s.root / "saved", state, fs::copy_options::recursive);
    const fs::path img = data / "1_tiny" / "img1.bmp";
    write_bmp(img, 32, 32, 7);
    fs::last_write_time(img, fs::last_write_time(img) - std::chrono::hours(1));
    train::RunConfig c = two_steps(model, data.string(), out);
    c.resume = state.string();
    c.max_train_steps = 4;
    CHECK(run_error(c).find("the dataset, buckets, batch size or gradient accumulation differ") != std::string::npos);
    fs::rename(img, data / "1_tiny" / "img1b.bmp");
    fs::rename(data / "1_tiny" / "img1.txt", data / "1_tiny" / "img1b.txt");
    CHECK(run_error(c).find("differ from the run that saved the state") != std::string::npos);
}
