// The step graph's hooks for kohya's noise and loss variants (train/step.h): host-drawn noise, the
// input perturbation entering the noisy latents only (the target keeps the plain noise), the loss
// mask weighing each latent pixel, and the objective's tables carrying the zero-terminal-SNR
// schedule and the post-process loss weights, against a plain step graph and host arithmetic.
#include <doctest/doctest.h>

#include <cmath>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/io/safetensors.h"
#include "op_harness.h"
#include "test_util.h"
#include "train/noise_variants.h"
#include "train/trainer.h"
#include "train_fixtures.h"

using namespace gl;
using namespace train_test;

namespace {

std::vector<float> tiny_context(int64_t n, uint32_t seed) { return normal(size_t(n * kTokens * 16), seed); }
double max_rel(const std::vector<float>& a, const std::vector<float>& b) { return gltest::rel_err(a, b, 1e-6); }

struct Graph1 {
    std::unique_ptr<train::StepGraph> s;
    std::unique_ptr<Runtime> rt;
    explicit Graph1(const train::StepOptions& o, const train::Objective& obj = {}) {
        s = train::build_step(o);
        s->g.mark_output(s->pred);
        rt = make_cpu_runtime(make_plan(s->g));
        io::SafetensorsFile f(kTinyUnet);
        sd::load_unet(*s->unet_weights, sd::sd_config(*o.config).unet, f, *rt);
        s->net->init(*rt, 3);
        s->update->init_state(*rt);
        train::write_objective_tables(*s, *rt, obj, diffusion::DdpmSchedule::sd15());
    }
    // One evaluation without an update (as Trainer::evaluate runs it).
    float run(const std::vector<float>& x0, const std::vector<float>& ctx, const train::StepDraw& mb,
              const std::vector<float>& mask = {}) {
        s->update->prepare(*rt, s->opt.grad_accum - 1, 0.0, /*skip=*/true);
        optim::LossScaler::Options one;
        one.init_scale = 1.0;
        const float loss = train::run_micro_batch(*s, *rt, x0.data(), std::span<const float>(ctx), mb,
                                                  optim::LossScaler(one), 0, 0, mask);
        s->update->finish_run(*rt, false);
        return loss;
    }
};

}  // namespace

TEST_CASE("train step: host-drawn noise, the input perturbation in the noisy latents only, the loss mask per latent pixel") {
    const std::vector<float> x0 = structured_latents(2, 1), ctx = tiny_context(2, 2);
    train::StepOptions o = train_test::tiny_options(train::Precision::fp32, 2, 1, 1e-3f);
    o.host_noise = true;
    train::StepOptions varied = o;
    varied.input_perturbation = true;
    varied.masked_loss = true;
    Graph1 plain(o), g(varied);
    CHECK(g.s->g.shape(g.s->loss_mask) == Shape{2, kSide, kSide, 1});

    train::Objective obj;
    obj.ip_noise_gamma = 0.5;
    REQUIRE(train::draws_noise_on_host(obj));
    diffusion::NoiseRng rng{5, 0};
    const train::StepDraw mb = train::draw_step(obj, diffusion::DdpmSchedule::sd15(), 2, int64_t(x0.size()), 4, rng,
                                                {kSide, kSide, x0});
    REQUIRE(mb.ip_noise.size() == x0.size());
    REQUIRE(mb.noise.size() == x0.size());
    // The host draw is draw_micro_batch's, and moves the stream as far.
    diffusion::NoiseRng again{5, 0};
    const train::MicroBatch ref = train::draw_micro_batch(obj, diffusion::DdpmSchedule::sd15(), 2, int64_t(x0.size()), 4,
                                                          again, {kSide, kSide, x0});
    CHECK(ref.noise == mb.noise);
    CHECK(ref.ip_noise == mb.ip_noise);
    CHECK(ref.t == mb.t);
    CHECK(again.counter == rng.counter);
    // A graph that draws its own noise refuses a host draw, and the other way round.
    CHECK(gltest::error_of([&] { plain.run(x0, ctx, train::StepDraw{5, 0, 0.0, mb.t}); }).find("noise") !=
          std::string::npos);

    // The plain graph given noise + perturbation predicts what the perturbed graph predicts.
    train::StepDraw perturbed = mb;
    for (size_t i = 0; i < x0.size(); i++) perturbed.noise[i] += mb.ip_noise[i];
    perturbed.ip_noise.clear();
    plain.run(x0, ctx, perturbed);
    const std::vector<float> ones(size_t(2 * kSide * kSide), 1.0f);
    const float loss = g.run(x0, ctx, mb, ones);
    const std::vector<float> pred = g.rt->read_f32(g.s->pred);
    CHECK(max_rel(pred, plain.rt->read_f32(plain.s->pred)) < 1e-6);

    // ... and its target is the plain noise: loss = mean_b mean_i (pred - noise)^2 (no weights here).
    const size_t M = x0.size() / 2, C = 4;
    double total = 0;
    for (size_t i = 0; i < x0.size(); i++) total += (double(pred[i]) - mb.noise[i]) * (double(pred[i]) - mb.noise[i]);
    CHECK(loss == doctest::Approx(total / double(M) / 2).epsilon(1e-5));

    // A mask: masked pixels add nothing, the mean still divides by every element (kohya's).
    std::vector<float> mask(ones.size());
    for (size_t p = 0; p < mask.size(); p++) mask[p] = p % 3 == 0 ? 0.0f : p % 3 == 1 ? 0.5f : 1.0f;
    const float masked = g.run(x0, ctx, mb, mask);
    double want = 0;
    for (size_t i = 0; i < x0.size(); i++) {
        const double d = double(pred[i]) - mb.noise[i];
        want += mask[i / C] * d * d;
    }
    CHECK(masked == doctest::Approx(want / double(M) / 2).epsilon(1e-5));
    CHECK(masked < loss);
    // A masked-loss graph refuses to run without its mask.
    CHECK(gltest::error_of([&] { g.run(x0, ctx, mb); }).find("mask") != std::string::npos);
}

TEST_CASE("train step: the objective's tables hold the zero-terminal-SNR noising and kohya's post-process loss weights") {
    train::StepOptions o = train_test::tiny_options(train::Precision::fp32, 2, 1, 1e-3f);
    o.prediction = diffusion::Prediction::v_prediction;
    train::Objective obj;
    obj.prediction = diffusion::Prediction::v_prediction;
    obj.zero_terminal_snr = true;
    obj.min_snr_gamma = 5;
    obj.scale_v_pred_loss_like_noise_pred = true;
    obj.debiased_estimation = true;
    REQUIRE_FALSE(train::draws_noise_on_host(obj));
    Graph1 g(o, obj);
    const diffusion::DdpmSchedule& s = diffusion::DdpmSchedule::sd15();
    const diffusion::DdpmSchedule z = train::noising_schedule(obj, s);
    const std::vector<float> sqrt_ac = g.rt->read_f32(g.s->sqrt_ac_table);
    const std::vector<float> sqrt_1m = g.rt->read_f32(g.s->sqrt_1m_ac_table);
    const std::vector<float> weight = g.rt->read_f32(g.s->loss_weight_table);
    REQUIRE(sqrt_ac.size() == size_t(s.num_steps));
    CHECK(sqrt_ac.back() == 0.0f);  // zero terminal SNR: alpha_bar ends at 0
    CHECK(sqrt_1m.back() == 1.0f);
    for (int t : {0, 1, 250, 999}) {
        CHECK(sqrt_ac[size_t(t)] == float(z.sqrt_alphas_cumprod[size_t(t)]));
        CHECK(sqrt_1m[size_t(t)] == float(z.sqrt_one_minus_alphas_cumprod[size_t(t)]));
        CHECK(weight[size_t(t)] == float(train::loss_weight(obj, s, t)));
    }
    CHECK(weight[500] != float(train::min_snr_weight(s, 500, 5, obj.prediction)));  // more than min-SNR alone
    // The host reference draws the same per-sample values.
    diffusion::NoiseRng rng{9, 0};
    const int64_t n = g.s->latent_numel();
    const train::MicroBatch mb = train::draw_micro_batch(obj, s, 2, n, 4, rng);
    for (size_t b = 0; b < mb.t.size(); b++) {
        CHECK(mb.sqrt_ac[b] == sqrt_ac[size_t(mb.t[b])]);
        CHECK(mb.weights[b] == weight[size_t(mb.t[b])]);
    }
}

TEST_CASE("train step: per-sample loss weights multiply each sample's loss (kohya's loss_weights)") {
    const std::vector<float> x0 = structured_latents(2, 1), ctx = tiny_context(2, 2);
    train::StepOptions o = train_test::tiny_options(train::Precision::fp32, 2, 1, 1e-3f);
    train::StepOptions weighted = o;
    weighted.sample_weights = true;
    Graph1 plain(o), g(weighted);
    diffusion::NoiseRng a{3, 0}, b{3, 0};
    const train::Objective obj;
    const train::StepDraw d = train::draw_step(obj, diffusion::DdpmSchedule::sd15(), 2, int64_t(x0.size()), 4, a);
    const train::StepDraw same = train::draw_step(obj, diffusion::DdpmSchedule::sd15(), 2, int64_t(x0.size()), 4, b);
    const float loss = plain.run(x0, ctx, d);
    const std::vector<float> per = plain.rt->read_f32(plain.s->per_sample);
    REQUIRE(per.size() == 2);
    CHECK(g.run(x0, ctx, same) == loss);  // no weights given: ones
    const std::vector<float> w{0.25f, 2.0f};
    g.s->update->prepare(*g.rt, 0, 0.0, /*skip=*/true);
    optim::LossScaler::Options one;
    one.init_scale = 1.0;
    const float weighted_loss = train::run_micro_batch(*g.s, *g.rt, x0.data(), std::span<const float>(ctx), same,
                                                       optim::LossScaler(one), 0, 0, {}, w);
    g.s->update->finish_run(*g.rt, false);
    CHECK(weighted_loss == doctest::Approx((0.25 * per[0] + 2.0 * per[1]) / 2).epsilon(1e-6));
    // Refused: weights for a graph without them, the wrong count, a negative weight.
    const auto run_with = [&](Graph1& m, std::vector<float> ws) {
        return gltest::error_of([&] {
            train::run_micro_batch(*m.s, *m.rt, x0.data(), std::span<const float>(ctx), same, optim::LossScaler(one), 0,
                                   0, {}, ws);
        });
    };
    CHECK(run_with(plain, w).find("built without them") != std::string::npos);
    CHECK(run_with(g, {1.0f}).find("for a batch of 2") != std::string::npos);
    CHECK(run_with(g, {1.0f, -1.0f}).find("must be finite and >= 0") != std::string::npos);
}
