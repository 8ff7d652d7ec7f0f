// kohya's --initial_epoch / --initial_step / --skip_until_initial_step (train/run/initial_step.h):
// the start train_network.py computes (epoch, skipped batches, step counter) for each form, its
// assertion and the combinations refused; on the tiny model, a run that starts at a later epoch
// numbers its steps from 0 and its epochs and saves from there with the lr schedule from its
// start, a skipping run counts from kohya's global_step, and a state of such a run resumes exactly.
#include <doctest/doctest.h>

#include "sdtrain_cli_fixtures.h"
#include "sdtrain_fixtures.h"
#include "tools/sdtrain/options.h"
#include "train/run/initial_step.h"
#include "train/run/observer.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

train::StepCounts counts(int64_t batches, int accum, int64_t max_steps) {
    train::StepCounts k;
    k.accum = accum;
    k.batches_per_epoch = batches;
    k.updates_per_epoch = (batches + accum - 1) / accum;
    k.max_train_steps = max_steps;
    k.epochs = (max_steps + k.updates_per_epoch - 1) / k.updates_per_epoch;
    return k;
}

struct Events : train::RunObserver {
    std::vector<train::StepEvent> steps;
    std::vector<std::string> saved;
    int64_t first_step = -1;
    void on_start(const train::RunStart& s) override { first_step = s.first_step; }
    void on_step(const train::StepEvent& e) override { steps.push_back(e); }
    void on_save(const train::SaveEvent& e) override { saved.push_back(fs::path(e.path).filename().string()); }
};

std::map<std::string, std::vector<float>> tensors(const fs::path& file) {
    const gl::io::SafetensorsFile f(file.string());
    std::map<std::string, std::vector<float>> m;
    for (const gl::io::TensorInfo& t : f.list()) {
        std::vector<float> v(size_t(t.numel()));
        f.read(t.name, v.data(), gl::DType::f32);
        m[t.name] = std::move(v);
    }
    return m;
}

}  // namespace

TEST_CASE("initial step: kohya's start for --initial_epoch, --initial_step and --skip_until_initial_step") {
    train::RunConfig c;
    // 10 batches of 2 accumulation steps: 5 updates an epoch.
    const train::StepCounts k = counts(10, 2, 40);
    c.initial_epoch = 3;  // step (3 - 1) * 5 = 10: epoch 3 from its first batch, counting from 0
    std::optional<train::KohyaStart> s = train::kohya_start(c, k);
    REQUIRE(s);
    CHECK(s->epoch == 3);
    CHECK(s->first_batch == 20);
    CHECK(s->step == 0);
    c.initial_step = 7;  // overrides the epoch: 7 // 5 = 1 epoch skipped, from its start
    s = train::kohya_start(c, k);
    CHECK(s->epoch == 2);
    CHECK(s->first_batch == 10);
    CHECK(s->step == 0);
    c.initial_epoch = 1;  // the first epoch: as without it
    c.initial_step.reset();
    CHECK_FALSE(train::kohya_start(c, k));

    // Skipping (no accumulation): 6 batches an epoch, step 8 is 2 into epoch 2; kohya's global_step
    // is what is left after the skipped epochs' batches: 2.
    train::RunConfig skip;
    skip.skip_until_initial_step = true;
    skip.initial_step = 8;
    s = train::kohya_start(skip, counts(6, 1, 30));
    CHECK(s->epoch == 2);
    CHECK(s->first_batch == 8);
    CHECK(s->step == 2);
    skip.initial_step = 3;  // within the first epoch: the counter is the step
    s = train::kohya_start(skip, counts(6, 1, 30));
    CHECK(s->epoch == 1);
    CHECK(s->first_batch == 3);
    CHECK(s->step == 3);
    // kohya's assertion.
    skip.initial_step = 30;
    CHECK(gltest::error_of([&] { train::kohya_start(skip, counts(6, 1, 30)); })
              .find("--initial_step 30: max_train_steps should be greater than initial step (kohya's assertion): 30 "
                    "vs 30") != std::string::npos);
}

TEST_CASE("initial step: the options are implemented, refused where kohya's arithmetic breaks, noted where inert") {
    const std::vector<std::string> base = {"--pretrained_model_name_or_path", "m.safetensors", "--train_data_dir",
                                           "data", "--output_dir", "out", "--network_module", "networks.lora",
                                           "--resolution", "512"};
    auto parse = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = base;
        a.insert(a.end(), extra.begin(), extra.end());
        return sdtrain::parse_command_line(a).config;
    };
    const train::RunConfig c = parse({"--initial_epoch", "2", "--initial_step", "5", "--skip_until_initial_step"});
    CHECK(c.initial_epoch == 2);
    CHECK(c.initial_step == 5);
    CHECK(c.skip_until_initial_step);
    CHECK(sdtrain_cli_test::has_note(c, "--initial_step overrides --initial_epoch (as kohya)"));
    CHECK(sdtrain_cli_test::has_note(parse({"--skip_until_initial_step"}), "no effect without --initial_step"));
    CHECK(gltest::error_of([&] { parse({"--initial_step", "5", "--resume", "st"}); })
              .find("--initial_step with --resume: sdtrain's --resume continues exactly") != std::string::npos);
    CHECK(gltest::error_of([&] {
              parse({"--initial_step", "5", "--skip_until_initial_step", "--gradient_accumulation_steps", "2"});
          }).find("kohya counts the skip in batches and the epochs in updates") != std::string::npos);
    CHECK(gltest::error_of([&] { parse({"--initial_epoch", "0"}); }).find("--initial_epoch wants an integer in [1, ") !=
          std::string::npos);
}

TEST_CASE("sdtrain initial step: a later epoch from step 0, and a skip counting as kohya that resumes exactly") {
    Scratch s("initial-step");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    // 4 batches an epoch (two buckets of 3 images, batch 2), 2 updates with accumulation 2.
    train::RunConfig a = tiny_config(model, data, s.root / "epoch");
    a.lr_scheduler = "linear";
    a.save_every_n_epochs = 1;
    a.save_every_n_steps = 2;
    train::RunConfig plain = a;
    plain.output_dir = (s.root / "plain").string();
    a.initial_epoch = 2;
    Events ea, ep;
    train::Session(a, &ea).run();
    train::Session(plain, &ep).run();
    // Epochs 2 and 3 of 3, counted from step 0 on a schedule from its start: 4 of the 6 steps.
    CHECK(ea.first_step == 0);
    REQUIRE(ea.steps.size() == 4);
    for (size_t i = 0; i < 4; i++) {
        CAPTURE(i);
        CHECK(ea.steps[i].step == int64_t(i) + 1);
        CHECK(ea.steps[i].epoch == 2 + int64_t(i) / 2);
        CHECK(ea.steps[i].lr_unet == ep.steps[i].lr_unet);
    }
    CHECK(ea.saved == std::vector<std::string>{"tiny-step00000002.safetensors", "tiny-000002.safetensors",
                                               "tiny-step00000004.safetensors", "tiny.safetensors"});

    // Without accumulation: 4 updates an epoch, 12 steps; skipping to step 6 is 2 into epoch 2, where
    // kohya's counter starts at 2. A state of it resumes to the same end.
    train::RunConfig b = tiny_config(model, data, s.root / "skip");
    b.gradient_accumulation_steps = 1;
    b.max_train_steps = 12;
    b.lr_scheduler = "linear";
    b.initial_step = 6;
    b.skip_until_initial_step = true;
    b.save_every_n_steps = 4;
    b.save_state = true;
    Events eb;
    train::Session(b, &eb).run();
    CHECK(eb.first_step == 2);
    REQUIRE(eb.steps.size() == 6);  // the 6 batches left, steps 3 to 8
    CHECK(eb.steps.front().step == 3);
    CHECK(eb.steps.front().epoch == 2);
    CHECK(eb.steps.back().step == 8);
    CHECK(*eb.steps.front().lr_unet == doctest::Approx(b.learning_rate).epsilon(1e-6));  // from the start, not step 2
    CHECK(eb.steps.back().lr_unet < b.learning_rate);
    train::RunConfig r = tiny_config(model, data, s.root / "resumed");
    r.gradient_accumulation_steps = 1;
    r.max_train_steps = 12;
    r.lr_scheduler = "linear";
    r.resume = (s.root / "skip" / "tiny-step00000004-state").string();
    Events er;
    train::Session(r, &er).run();
    REQUIRE_FALSE(er.steps.empty());
    CHECK(er.steps.front().step == 5);
    CHECK(tensors(s.root / "resumed" / "tiny.safetensors") == tensors(s.root / "skip" / "tiny.safetensors"));
}
