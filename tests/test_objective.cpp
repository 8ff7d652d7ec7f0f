// The training objective's pieces built on the DDPM schedule: min-SNR-gamma weights against kohya's
// formula (tests/golden/make_schedule_golden.py -> tests/golden/data/schedule/ddpm.json), debiased
// estimation weights against kohya's own function (tests/golden/make_kohya_loss_weights.py ->
// tests/golden/data/kohya/loss_weights.json), seeded timestep sampling and offset noise. The draws of a whole micro-batch: test_train.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "ddpm_golden.h"
#include "ggml-lite/core/error.h"
#include "test_util.h"
#include "train/objective.h"

using diffusion::DdpmSchedule;
using diffusion::NoiseRng;
using diffusion::Prediction;

TEST_CASE("train objective: min-SNR-gamma weights as kohya computes them") {
    const auto g = gltest::ddpm_golden();
    const DdpmSchedule s = DdpmSchedule::sd15();
    const gltest::SnrGolden kohya(g);
    const std::vector<int>& ts = kohya.ts;
    const std::vector<double>& snr = kohya.snr;
    // Every weight is a function of the SNR with relative slope <= 1: the SNR's tolerance holds.
    auto tol = [&](int t) { return kohya.tolerance(s, t); };
    double worst_formula = 0, worst_w = 0;
    for (const auto& m : g.at("min_snr")) {
        const double gamma = m.at("gamma").get<double>();
        const auto eps = m.at("epsilon").get<std::vector<double>>();
        const auto v = m.at("v").get<std::vector<double>>();
        for (size_t i = 0; i < ts.size(); ++i) {
            // The formula on kohya's own SNR values: exact up to f32 rounding of the golden.
            const double fe = train::min_snr_weight_from_snr(snr[i], gamma, Prediction::epsilon);
            const double fv = train::min_snr_weight_from_snr(snr[i], gamma, Prediction::v_prediction);
            worst_formula = std::max({worst_formula, std::abs(fe - eps[i]) / eps[i], std::abs(fv - v[i]) / v[i]});
            // Our table end to end.
            const double we = train::min_snr_weight(s, ts[i], gamma, Prediction::epsilon);
            const double wv = train::min_snr_weight(s, ts[i], gamma, Prediction::v_prediction);
            CHECK(std::abs(we - eps[i]) <= tol(ts[i]) * eps[i]);
            CHECK(std::abs(wv - v[i]) <= tol(ts[i]) * v[i]);
            worst_w = std::max({worst_w, std::abs(we - eps[i]) / eps[i], std::abs(wv - v[i]) / v[i]});
        }
    }
    CHECK(worst_formula <= 1e-6);
    MESSAGE("min-SNR: formula max rel. error ", worst_formula, ", weights ", worst_w);
    // Low-noise timesteps (snr > gamma) are down-weighted; high-noise ones keep weight 1 (epsilon).
    CHECK(train::min_snr_weight(s, 999, 5.0, Prediction::epsilon) == 1.0);
    CHECK(train::min_snr_weight(s, 0, 5.0, Prediction::epsilon) == doctest::Approx(5.0 / s.snr(0)));
    CHECK_THROWS_AS(train::min_snr_weight(s, 10, 0.0, Prediction::epsilon), gl::Error);
}

TEST_CASE("train objective: seeded timesteps and offset noise") {
    NoiseRng a{42, 0}, b{42, 0};
    const auto ta = train::sample_timesteps(4096, 100, 900, 1000, a);
    const auto tb = train::sample_timesteps(4096, 100, 900, 1000, b);
    CHECK(ta == tb);  // same seed, same stream
    int lo = 1 << 30, hi = -1;
    double mean = 0;
    for (int32_t v : ta) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        mean += v;
    }
    mean /= double(ta.size());
    CHECK(lo >= 100);
    CHECK(hi <= 899);
    CHECK(lo < 110);
    CHECK(hi > 889);
    CHECK(std::abs(mean - 499.5) < 10.0);  // std of the mean is about 3.6
    NoiseRng c{43, 0};
    CHECK(train::sample_timesteps(16, 0, 1000, 1000, c) != std::vector<int32_t>(ta.begin(), ta.begin() + 16));
    CHECK_THROWS_AS(train::sample_timesteps(1, 5, 5, 1000, c), gl::Error);
    CHECK_THROWS_AS(train::sample_timesteps(1, 0, 1001, 1000, c), gl::Error);

    // Offset noise: one shift per (sample, channel), the same at every pixel (NHWC).
    const int64_t B = 3, H = 2, W = 5, C = 4;
    std::vector<float> noise(size_t(B * H * W * C), 0.0f);
    NoiseRng o{9, 0};
    train::apply_noise_offset(noise, B, C, 0.1, o);
    for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t c = 0; c < C; ++c) {
            const float first = noise[size_t(bi * H * W * C + c)];
            CHECK(first != 0.0f);
            CHECK(std::abs(first) < 0.6f);
            for (int64_t p = 1; p < H * W; ++p) CHECK(noise[size_t((bi * H * W + p) * C + c)] == first);
        }
    CHECK(noise[0] != noise[1]);                          // channels differ
    CHECK(noise[0] != noise[size_t(H * W * C)]);          // samples differ
    CHECK_THROWS_AS(train::apply_noise_offset(noise, 7, C, 0.1, o), gl::Error);
}

TEST_CASE("train objective: debiased estimation weights as kohya's apply_debiased_estimation makes them") {
    std::ifstream in(gltest::golden_dir("kohya") + "loss_weights.json");
    REQUIRE(in.good());
    const nlohmann::json g = nlohmann::json::parse(in);
    const DdpmSchedule s = DdpmSchedule::sd15();
    const gltest::SnrGolden kohya(gltest::ddpm_golden());
    const auto ts = g.at("t").get<std::vector<int>>();
    REQUIRE(ts.size() == 1000);
    double worst = 0;
    for (const auto& [name, pred] : {std::pair{"epsilon", Prediction::epsilon}, {"v", Prediction::v_prediction}}) {
        const auto want = g.at("debiased").at(name).get<std::vector<double>>();
        for (size_t i = 0; i < ts.size(); ++i) {
            // Each weight moves at most as fast as the SNR (relative): the SNR's tolerance holds.
            const double w = train::debiased_weight(s, ts[i], pred), err = std::abs(w - want[i]) / want[i];
            CHECK_MESSAGE(err <= kohya.tolerance(s, ts[i]), name, " t = ", ts[i], ": ", w, " vs kohya ", want[i]);
            worst = std::max(worst, err);
        }
    }
    MESSAGE("debiased estimation: max rel. error ", worst);
    // t = 0's SNR (about 1175) is capped at 1000.
    CHECK(s.snr(0) > 1000);
    CHECK(train::debiased_weight(s, 0, Prediction::epsilon) == 1 / std::sqrt(1000.0));
    CHECK(train::debiased_weight(s, 0, Prediction::v_prediction) == 1 / 1001.0);

    // A micro-batch's loss weights: min-SNR's times the debiased one, as kohya applies both.
    train::Objective o;
    o.min_snr_gamma = 5.0;
    o.debiased_estimation = true;
    NoiseRng rng{3, 0};
    const train::MicroBatch m = train::draw_micro_batch(o, s, 4, 4 * 2 * 2 * 4, 4, rng);
    for (size_t b = 0; b < 4; b++)
        CHECK(m.weights[b] == doctest::Approx(train::min_snr_weight(s, m.t[b], 5.0, Prediction::epsilon) *
                                              train::debiased_weight(s, m.t[b], Prediction::epsilon)));
    o.debiased_estimation = false;
    NoiseRng same{3, 0};
    const train::MicroBatch plain = train::draw_micro_batch(o, s, 4, 4 * 2 * 2 * 4, 4, same);
    CHECK(plain.t == m.t);  // the option draws nothing
    for (size_t b = 0; b < 4; b++)
        CHECK(plain.weights[b] == float(train::min_snr_weight(s, m.t[b], 5.0, Prediction::epsilon)));
}

TEST_CASE("train objective: draw_step moves the stream as draw_micro_batch does and draws its timesteps") {
    for (const double offset : {0.0, 0.1}) {
        train::Objective o;
        o.noise_offset = offset;
        o.min_timestep = 200;
        o.max_timestep = 700;
        const diffusion::DdpmSchedule s = diffusion::DdpmSchedule::sd15();
        NoiseRng host{8, 40}, graph{8, 40};
        for (int k = 0; k < 3; k++) {
            const train::MicroBatch mb = train::draw_micro_batch(o, s, 4, 4 * 3 * 2 * 4, 4, host);
            const uint64_t at = graph.counter;
            const train::StepDraw d = train::draw_step(o, s, 4, 4 * 3 * 2 * 4, 4, graph);
            CHECK(d.seed == 8);
            CHECK(d.counter == at);
            CHECK(d.noise_offset == offset);
            CHECK(d.t == mb.t);
            CHECK(graph.counter == host.counter);
        }
        CHECK_THROWS_AS(train::draw_step(o, s, 3, 50, 4, graph), gl::Error);
    }
}
