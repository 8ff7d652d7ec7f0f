// sdtrain's validation loss end to end on the tiny model (sdtrain_fixtures.h): passes at kohya's
// steps and epochs with kohya's recorder averages, in the events, metrics.jsonl and TensorBoard
// (read back with train/tensorboard.h's reader), the same loss for the same weights, the same
// losses from two runs with the same seeds and other ones from another --validation_seed, weights
// and optimizer state bit for bit those of the run without passes, kohya's
// ss_num_validation_images, and the refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "ggml-lite/io/safetensors.h"
#include "sdtrain_fixtures.h"
#include "train/run/data_plan.h"
#include "train/run/recording.h"
#include "train/run/session.h"
#include "train/tensorboard.h"

using namespace sdtrain_test;

namespace {

struct Recorded : train::RunRecording {
    std::string plan_text;
    train::StepCounts counts;
    std::vector<train::StepEvent> steps;
    std::vector<train::ValidationEvent> validations;
    void on_plan(const train::RunPlan& p) override {
        RunRecording::on_plan(p);
        plan_text = p.text();
        counts = p.counts;
    }
    void on_step(const train::StepEvent& e) override {
        RunRecording::on_step(e);
        steps.push_back(e);
    }
    void on_validation(const train::ValidationEvent& e) override {
        RunRecording::on_validation(e);
        validations.push_back(e);
    }
};

// The tiny run with 2 of its 6 images held out (training keeps ceil(6 * 0.66) = 4).
train::RunConfig split_config(const fs::path& model, const fs::path& data, const fs::path& out) {
    train::RunConfig c = tiny_config(model, data, out);
    c.validation_split = 0.34;
    c.max_train_steps = 4;
    return c;
}

std::unique_ptr<Recorded> run(const train::RunConfig& c) {
    auto r = std::make_unique<Recorded>();
    train::Session s(c, r.get());
    s.run();
    return r;
}

using Tensors = std::map<std::string, std::vector<uint8_t>>;
Tensors tensor_bytes(const fs::path& file) {
    const gl::io::SafetensorsFile f(file.string());
    Tensors out;
    for (const gl::io::TensorInfo& t : f.list()) {
        std::vector<float> v(size_t(t.numel()));
        f.read(t.name, v.data(), gl::DType::f32);
        out[t.name].resize(v.size() * sizeof(float));
        std::memcpy(out[t.name].data(), v.data(), v.size() * sizeof(float));
    }
    return out;
}

// Every tensor of a run's final LoRA and of its last state folder's files.
std::map<std::string, Tensors> saved_tensors(const fs::path& out) {
    std::map<std::string, Tensors> all;
    all["lora"] = tensor_bytes(out / "tiny.safetensors");
    for (const auto& e : fs::directory_iterator(out / "tiny-state"))
        if (e.path().extension() == ".safetensors") all[e.path().filename().string()] = tensor_bytes(e.path());
    return all;
}

// The validation batches of a pass: the held-out images in micro-batches of the bucket.
int64_t validation_batches(const train::RunConfig& c) {
    const train::RunData d = train::load_run_data(c, *c.seed);
    REQUIRE(d.validation);
    int64_t n = 0;
    for (const data::Bucket& b : d.validation->buckets.buckets)
        n += (int64_t(b.images.size()) + c.train_batch_size - 1) / c.train_batch_size;
    return n;
}

std::vector<double> losses(const std::vector<train::ValidationEvent>& v) {
    std::vector<double> out;
    for (const train::ValidationEvent& e : v) out.push_back(e.loss);
    return out;
}

}  // namespace

TEST_CASE("sdtrain validation: kohya's passes and averages in the events, metrics.jsonl and TensorBoard") {
    Scratch s("validation");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    train::RunConfig c = split_config(model, data, out);
    c.gradient_accumulation_steps = 1;
    c.validate_every_n_steps = 1;
    c.logging_dir = (s.root / "logs").string();
    const auto r = run(c);
    CHECK(r->plan_text.find("validation: 2 images held out (validation_split 0.34)") != std::string::npos);
    const int64_t per_epoch = r->counts.updates_per_epoch, total = 4;
    REQUIRE(per_epoch >= 2);  // 4 training images, batch 2: an epoch holds two or three updates
    REQUIRE(r->steps.size() == size_t(total));

    // A step pass after every step; an epoch pass at the end of every epoch, after the step's.
    std::vector<std::pair<int64_t, bool>> want;
    for (int64_t step = 1; step <= total; step++) {
        want.emplace_back(step, false);
        if (step % per_epoch == 0 || step == total) want.emplace_back(step, true);
    }
    std::vector<std::pair<int64_t, bool>> got;
    for (const train::ValidationEvent& e : r->validations) got.emplace_back(e.step, e.per_epoch);
    CHECK(got == want);
    const int64_t batches = validation_batches(c);
    for (const train::ValidationEvent& e : r->validations) {
        CAPTURE(e.step);
        CHECK(e.timesteps == std::vector<int32_t>{200, 400, 600, 800});
        CHECK(e.batches == batches);
        CHECK(e.epoch == (e.step - 1) / per_epoch + 1);
        CHECK(std::isfinite(e.loss));
        CHECK(e.loss > 0);
        // The divergence is from the training loss's running mean at that step.
        CHECK(e.divergence == e.average - r->steps[size_t(e.step - 1)].loss_mean);
    }
    // kohya's recorders: the step passes of epoch 1 (kohya's epoch 0) append, so the second one's
    // average is the mean of both passes; in epoch 2 a pass replaces the first pass's losses only.
    std::vector<train::ValidationEvent> step_passes, epoch_passes;
    for (const train::ValidationEvent& e : r->validations) (e.per_epoch ? epoch_passes : step_passes).push_back(e);
    CHECK(step_passes[0].average == doctest::Approx(step_passes[0].loss));
    CHECK(step_passes[1].average == doctest::Approx((step_passes[0].loss + step_passes[1].loss) / 2));
    const size_t first_of_epoch2 = size_t(per_epoch);
    std::vector<double> held;  // what the step recorder holds, pass by pass (each pass the same count)
    for (size_t i = 0; i < first_of_epoch2; i++) held.push_back(step_passes[i].loss);
    held[0] = step_passes[first_of_epoch2].loss;
    double mean = 0;
    for (double h : held) mean += h / double(held.size());
    CHECK(step_passes[first_of_epoch2].average == doctest::Approx(mean));
    for (const train::ValidationEvent& e : epoch_passes) CHECK(e.average == doctest::Approx(e.loss));
    // The same weights give the same loss: the last step's pass and its epoch's pass.
    CHECK(step_passes.back().step == epoch_passes.back().step);
    CHECK(step_passes.back().loss == epoch_passes.back().loss);
    CHECK(step_passes[0].loss != step_passes[1].loss);  // the weights moved between them

    // metrics.jsonl holds every pass as it came.
    const train::MetricsHistory h = train::read_metrics(out / "metrics.jsonl");
    std::vector<const train::MetricsEvent*> recorded;
    for (const train::MetricsEvent& e : h.events)
        if (e.kind == train::EventKind::validation) recorded.push_back(&e);
    REQUIRE(recorded.size() == r->validations.size());
    for (size_t i = 0; i < recorded.size(); i++) {
        const train::ValidationEvent& e = r->validations[i];
        CHECK(recorded[i]->step == e.step);
        CHECK(recorded[i]->epoch == e.epoch);
        CHECK(recorded[i]->message == (e.per_epoch ? "epoch" : "step"));
        CHECK(recorded[i]->loss == e.loss);
        CHECK(recorded[i]->average == e.average);
        CHECK(recorded[i]->divergence == e.divergence);
    }
    CHECK(gltest::slurp(out / "report.html").find("validation loss") != std::string::npos);

    // TensorBoard: the step passes at their step, the epoch passes at their epoch (kohya's tags).
    fs::path events;
    for (const auto& e : fs::recursive_directory_iterator(s.root / "logs"))
        if (e.is_regular_file()) events = e.path();
    std::map<std::string, std::vector<std::pair<int64_t, float>>> by_tag;
    for (const train::TbEvent& e : train::read_tensorboard_events(events).events)
        if (e.value) by_tag[e.tag].push_back({e.step, *e.value});
    std::vector<std::pair<int64_t, float>> step_avg, step_div, epoch_avg, epoch_div;
    for (const train::ValidationEvent& e : step_passes) {
        step_avg.emplace_back(e.step, float(e.average));
        step_div.emplace_back(e.step, float(e.divergence));
    }
    for (const train::ValidationEvent& e : epoch_passes) {
        epoch_avg.emplace_back(e.epoch, float(e.average));
        epoch_div.emplace_back(e.epoch, float(e.divergence));
    }
    CHECK(by_tag["loss/validation/step_average"] == step_avg);
    CHECK(by_tag["loss/validation/step_divergence"] == step_div);
    CHECK(by_tag["loss/validation/epoch_average"] == epoch_avg);
    CHECK(by_tag["loss/validation/epoch_divergence"] == epoch_div);

    // kohya's metadata: the held-out images, once each, and the options as given.
    const gl::io::SafetensorsFile f((out / "tiny.safetensors").string());
    CHECK(f.metadata().at("ss_num_validation_images") == "2");
    CHECK(f.metadata().at("ss_num_train_images") == "4");
    CHECK(f.metadata().at("ss_validation_split") == "0.34");
    CHECK(f.metadata().at("ss_validate_every_n_steps") == "1");
    CHECK(f.metadata().at("ss_max_validation_steps") == "None");
}

namespace {

// Two runs with passes and one without (the split kept, no pass due): the passes' losses equal
// bit for bit between the first two, the training losses, the LoRA and the state's tensors
// between all three. cached: the tiny run (text encoder trained, latents cached, 2 accumulation
// steps); else the latents encoded each step and the frozen text encoder's outputs cached, so the
// validation batches take each path the training batches take.
void check_same_and_harmless(bool cached) {
    Scratch s(cached ? "validation_same_cached" : "validation_same");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    auto config = [&](const std::string& name) {
        train::RunConfig c = split_config(model, data, s.root / name);
        c.save_state_on_train_end = true;
        if (!cached) {
            c.cache_latents = false;
            c.network_train_unet_only = true;
            c.cache_text_encoder_outputs = true;
            c.max_train_steps = 2;
        }
        return c;
    };
    train::RunConfig with = config("a");
    with.validate_every_n_steps = 2;
    with.max_validation_steps = 1;
    const auto a = run(with);
    with.output_dir = (s.root / "b").string();
    const auto b = run(with);
    train::RunConfig without = config("c");
    without.validate_every_n_epochs = 1000;
    const auto n = run(without);
    REQUIRE(a->validations.size() > 2);
    CHECK(losses(a->validations) == losses(b->validations));
    for (size_t i = 0; i < a->validations.size(); i++) CHECK(a->validations[i].average == b->validations[i].average);
    CHECK(n->validations.empty());
    REQUIRE(a->steps.size() == n->steps.size());
    for (size_t i = 0; i < a->steps.size(); i++) CHECK(a->steps[i].loss == n->steps[i].loss);
    const auto saved = saved_tensors(s.root / "a");
    CHECK(saved.size() >= 2);  // the LoRA and the state's files
    CHECK(saved == saved_tensors(s.root / "c"));
    CHECK(gltest::slurp(s.root / "a" / "tiny-state" / "train_state.json") ==
          gltest::slurp(s.root / "c" / "tiny-state" / "train_state.json"));
}

}  // namespace

TEST_CASE("sdtrain validation: the same seeds give the same losses, the passes change no weight or state") {
    check_same_and_harmless(true);
}

TEST_CASE("sdtrain validation: the same with the latents encoded each step and the text encoder's outputs cached") {
    check_same_and_harmless(false);
}

TEST_CASE("sdtrain validation: --validation_seed seeds the draws of every pass (the split kept by the dataset config)") {
    Scratch s("validation_seed");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    // The dataset config's validation_seed orders the split, the command line's the draws.
    const fs::path toml = s.root / "dataset.toml";
    write_text(toml, "[[datasets]]\nvalidation_split = 0.34\nvalidation_seed = 3\n[[datasets.subsets]]\nimage_dir = \"" +
                         (data / "1_tiny").string() + "\"\nnum_repeats = 1\n");
    auto config = [&](const std::string& name, int64_t seed) {
        train::RunConfig c = tiny_config(model, data, s.root / name);
        c.train_data_dir.reset();
        c.dataset_config = toml.string();
        c.validation_seed = seed;
        c.max_train_steps = 2;
        c.max_validation_steps = 1;
        return c;
    };
    const auto a = run(config("a", 1)), b = run(config("b", 1)), other = run(config("c", 2));
    REQUIRE_FALSE(a->validations.empty());
    REQUIRE(a->validations.size() == other->validations.size());
    for (const auto* r : {&a, &b, &other}) CHECK((*r)->validations[0].batches == 1);  // --max_validation_steps
    CHECK(losses(a->validations) == losses(b->validations));
    for (size_t i = 0; i < a->validations.size(); i++) CHECK(a->validations[i].loss != other->validations[i].loss);
    for (size_t i = 0; i < a->steps.size(); i++) CHECK(a->steps[i].loss == other->steps[i].loss);  // the same split
}

TEST_CASE("sdtrain validation: a split that leaves no training image and network dropout are refused by name") {
    Scratch s("validation_refused");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig all = split_config(model, data, s.root / "a");
    all.validation_split = 1.0;
    CHECK(gltest::error_of([&] { train::Session(all).prepare(); }) ==
          "validation_split 1 leaves no training image (kohya's rule: each subset trains on its first ceil(n * (1 - "
          "split)) images); lower it");
    train::RunConfig dropout = split_config(model, data, s.root / "b");
    dropout.network_dropout = 0.1;
    const std::string e = gltest::error_of([&] { train::Session(dropout).prepare(); });
    CHECK(e.find("validation_split 0.34 with network dropout (0.1): the validation pass runs the training graphs") == 0);
    dropout.validation_split = 0.0;
    CHECK(gltest::error_of([&] { train::Session(dropout).prepare(); }) == "(no error)");
    // Without a split the metadata counts no validation image.
    train::RunConfig plain = tiny_config(model, data, s.root / "c");
    plain.max_train_steps = 1;
    const auto r = run(plain);
    CHECK(r->validations.empty());
    CHECK(gl::io::SafetensorsFile((s.root / "c" / "tiny.safetensors").string()).metadata().at("ss_num_validation_images") ==
          "0");
}
