// kohya's validation loss, the pieces: the fixed timesteps and the LossRecorder against sd-scripts'
// own code (tests/golden/make_kohya_validation_golden.py), when passes run, and
// BucketTrainer::evaluate on the tiny UNet: its draws (every sample at the timestep, the noise
// from the caller's stream), dropouts off, and a LoRA, optimizer state and run counters left bit
// for bit as they were.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/safetensors.h"
#include "optim/optimizer_config.h"
#include "test_util.h"
#include "train/bucket_trainer.h"
#include "train/run/validation.h"
#include "train_fixtures.h"

using namespace train_test;

namespace {

nlohmann::json golden() {
    std::ifstream f(gltest::golden_dir("kohya") + "validation.json");
    return nlohmann::json::parse(f);
}

// The tiny UNet's step graph (batch 2, fp32, noise and timesteps kept) on the CPU with its
// BucketTrainer, the LoRA initialised from seed 3.
struct TinyTrainer {
    std::unique_ptr<train::StepGraph> s;
    std::unique_ptr<gl::Runtime> rt;
    std::unique_ptr<train::BucketTrainer> bt;
    TinyTrainer(const train::StepOptions& o, const train::TrainerOptions& to) {
        s = train::build_step(o);
        s->g.mark_output(s->noise);
        s->g.mark_output(s->timesteps);
        rt = gl::make_cpu_runtime(gl::make_plan(s->g));
        rt->poison(0xff);
        gl::io::SafetensorsFile f(kTinyUnet);
        sd::load_unet(*s->unet_weights, sd::sd_config(*o.config).unet, f, *rt);
        bt = std::make_unique<train::BucketTrainer>(std::vector<train::BucketTrainer::Member>{{s.get(), rt.get()}}, to);
        bt->init(3);
    }
    // Every LoRA parameter and optimizer state tensor, by name.
    std::vector<std::pair<std::string, std::vector<float>>> persistent() const {
        std::vector<std::pair<std::string, std::vector<float>>> out;
        for (gl::ValueId p : s->net->parameters()) out.emplace_back(s->g.v(p).name, rt->read_f32(p));
        for (gl::ValueId v : s->update->optimizer().state_values()) out.emplace_back(s->g.v(v).name, rt->read_f32(v));
        return out;
    }
};

bool bitwise_equal(const std::vector<std::pair<std::string, std::vector<float>>>& a,
                   const std::vector<std::pair<std::string, std::vector<float>>>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++)
        if (a[i].first != b[i].first || a[i].second.size() != b[i].second.size() ||
            std::memcmp(a[i].second.data(), b[i].second.data(), a[i].second.size() * sizeof(float)) != 0)
            return false;
    return true;
}

train::TrainerOptions trainer_options() {
    train::TrainerOptions to;
    to.seed = 17;
    to.objective.noise_offset = 0.1;  // the offset noise is part of the validation's draws too
    return to;
}

// Micro-batches of 2 latents and their contexts (kept alive by the caller's vectors).
struct Batches {
    std::vector<std::vector<float>> latents, contexts;
    explicit Batches(int n) {
        for (int i = 0; i < n; i++) {
            latents.push_back(structured_latents(2, uint32_t(10 + i)));
            contexts.push_back(normal(size_t(2 * kTokens * 16), uint32_t(40 + i)));
        }
    }
    train::MicroInput operator[](size_t i) const { return {0, latents[i], std::span<const float>(contexts[i]), {}}; }
};

}  // namespace

TEST_CASE("validation: kohya's timesteps, as train_network.py computes them with numpy") {
    const nlohmann::json g = golden();
    REQUIRE(g["timesteps"].size() >= 10);
    for (const nlohmann::json& c : g["timesteps"]) {
        CAPTURE(c.dump());
        CHECK(train::validation_timesteps(c["min"], c["max"]) == c["timesteps"].get<std::vector<int32_t>>());
    }
    CHECK(train::validation_timesteps(0, 1000) == std::vector<int32_t>{200, 400, 600, 800});
    CHECK(gltest::error_of([] { train::validation_timesteps(500, 500); }).find("range [500, 500) is empty") !=
          std::string::npos);
}

TEST_CASE("validation: kohya's LossRecorder, add by add (appended in epoch 0, replaced by step later)") {
    const nlohmann::json g = golden();
    REQUIRE(g["recorder"].size() > 40);
    train::LossRecorder r;
    CHECK(r.moving_average() == 0.0);
    for (const nlohmann::json& a : g["recorder"]) {
        r.add(a["epoch"], a["step"], a["loss"]);
        CAPTURE(a.dump());
        CHECK(r.moving_average() == a["average"].get<double>());  // the same double operations as Python's
    }
}

TEST_CASE("validation: when passes run, how many batches, and the seed of their draws") {
    train::RunConfig c;
    CHECK_FALSE(train::validation_due_at_step(c, 4));  // no step passes without --validate_every_n_steps
    for (int64_t e : {1, 2, 7}) CHECK(train::validation_due_at_epoch(c, e));  // every epoch by default
    c.validate_every_n_steps = 3;
    c.validate_every_n_epochs = 2;
    CHECK(train::validation_due_at_step(c, 3));
    CHECK(train::validation_due_at_step(c, 9));
    CHECK_FALSE(train::validation_due_at_step(c, 4));
    CHECK_FALSE(train::validation_due_at_epoch(c, 1));
    CHECK(train::validation_due_at_epoch(c, 2));
    CHECK(train::validation_batches(c, 5) == 5);
    c.max_validation_steps = 2;
    CHECK(train::validation_batches(c, 5) == 2);
    CHECK(train::validation_batches(c, 1) == 1);
    CHECK(train::validation_draw_seed(c, 42) == 42);
    c.validation_seed = 7;
    CHECK(train::validation_draw_seed(c, 42) == 7);
}

TEST_CASE("bucket trainer: evaluate puts every sample at the timestep and draws the noise from the caller's stream") {
    TinyTrainer t(tiny_options(train::Precision::fp32, 2, 1, 1e-3f), trainer_options());
    const Batches b(1);
    const train::Objective o = trainer_options().objective;
    const int64_t n = int64_t(b.latents[0].size());
    diffusion::NoiseRng rng{9, 0};
    const double at200 = t.bt->evaluate(b[0], 200, rng);
    CHECK(t.rt->read_f32(t.s->timesteps) == std::vector<float>{200.0f, 200.0f});
    diffusion::NoiseRng host{9, 0};
    const train::MicroBatch mb =
        train::draw_micro_batch(o, diffusion::DdpmSchedule::sd15(), 2, n, 4, host, {}, 200);
    CHECK(mb.t == std::vector<int32_t>{200, 200});
    CHECK(t.rt->read_f32(t.s->noise) == mb.noise);
    CHECK(rng.counter == host.counter);
    CHECK(rng.counter == train::noise_draws(o, 2, n, 4));  // no timestep drawn
    // The same stream position gives the same loss; another timestep another one.
    diffusion::NoiseRng again{9, 0};
    CHECK(t.bt->evaluate(b[0], 200, again) == at200);
    diffusion::NoiseRng other{9, 0};
    CHECK(t.bt->evaluate(b[0], 800, other) != at200);
    CHECK(gltest::error_of([&] { t.bt->evaluate(b[0], 1000, other); }).find("timestep 1000 outside [0, 1000)") !=
          std::string::npos);
    // A NaN loss names the validation, its step and timestep.
    const gl::ValueId p = t.s->net->parameters()[0];
    std::vector<float> v = t.rt->read_f32(p);
    v[0] = std::nanf("");
    t.rt->write_f32(p, v);
    CHECK(gltest::error_of([&] { t.bt->evaluate(b[0], 600, other); }).find("validation after step 0 at timestep 600: ") ==
          0);
}

TEST_CASE("bucket trainer: evaluate leaves the LoRA, the optimizer state and the run's counters bit for bit") {
    for (const char* optimizer : {"AdamW", "Prodigy"}) {
        CAPTURE(optimizer);
        train::StepOptions so = tiny_options(train::Precision::fp32, 2, 2, 1e-3f);
        so.optimizer = optim::parse_optimizer(optimizer, {});
        TinyTrainer a(so, trainer_options()), b(so, trainer_options());
        const Batches in(4);
        const train::StepReport a1 = a.bt->update({in[0], in[1]});
        const train::StepReport b1 = b.bt->update({in[0], in[1]});
        REQUIRE(a1.applied);
        CHECK(a1.loss == b1.loss);
        const auto before = a.persistent();
        const train::BucketTrainerState state = a.bt->state();
        diffusion::NoiseRng rng{5, 0};
        for (int32_t t : train::validation_timesteps(0, 1000)) {
            CHECK(std::isfinite(a.bt->evaluate(in[2], t, rng)));
            CHECK(std::isfinite(a.bt->evaluate(in[3], t, rng)));
        }
        CHECK(bitwise_equal(a.persistent(), before));
        CHECK(a.bt->steps_done() == state.steps);
        CHECK(a.bt->state().noise_counter == state.noise_counter);
        CHECK(a.bt->updates_applied() == 1);
        // The next update is the one a run without the evaluations makes.
        const train::StepReport a2 = a.bt->update({in[2], in[3]});
        const train::StepReport b2 = b.bt->update({in[2], in[3]});
        CHECK(a2.loss == b2.loss);
        CHECK(a2.grad_norm == b2.grad_norm);
        CHECK(bitwise_equal(a.persistent(), b.persistent()));
        CHECK(a.bt->updates_applied() == 2);
        CHECK(a.bt->state().noise_counter == b.bt->state().noise_counter);
    }
}

TEST_CASE("bucket trainer: evaluate runs without the LoRA's rank and module dropout, and refuses network dropout") {
    train::StepOptions plain = tiny_options(train::Precision::fp32, 2, 1, 1e-3f), dropped = plain;
    dropped.lora.rank_dropout = 0.5f;
    dropped.lora.module_dropout = 0.5f;
    TinyTrainer a(plain, trainer_options()), b(dropped, trainer_options());
    // Non-zero up weights, the same in both, so the LoRA takes part in the prediction.
    std::mt19937 gen(4);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (size_t k = 0; k < a.s->net->parameters().size(); k++) {
        std::vector<float> v = a.rt->read_f32(a.s->net->parameters()[k]);
        for (float& e : v) e += u(gen);
        a.rt->write_f32(a.s->net->parameters()[k], v);
        b.rt->write_f32(b.s->net->parameters()[k], v);
    }
    const Batches in(1);
    diffusion::NoiseRng ra{3, 0}, rb{3, 0};
    CHECK(a.bt->evaluate(in[0], 400, ra) == b.bt->evaluate(in[0], 400, rb));

    train::StepOptions net_dropout = plain;
    net_dropout.lora.dropout = 0.1f;
    TinyTrainer c(net_dropout, trainer_options());
    diffusion::NoiseRng rc{3, 0};
    CHECK(gltest::error_of([&] { c.bt->evaluate(in[0], 400, rc); }).find("network dropout") != std::string::npos);
}
