// DDPM objective pieces against diffusers' DDPMScheduler (SD1.5 config) and kohya's min-SNR
// formula (tests/golden/make_schedule_golden.py -> tests/golden/data/schedule/ddpm.json).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"
#include "models/sd15/noise.h"

using sd::DdpmSchedule;
using sd::NoiseRng;
using sd::Prediction;

namespace {
nlohmann::json ddpm_golden() {
    std::string f = __FILE__;
    std::ifstream in(f.substr(0, f.find_last_of('/')) + "/golden/data/schedule/ddpm.json");
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
}
}  // namespace

TEST_CASE("ddpm: SD1.5 alphas_cumprod, add_noise and velocity match diffusers") {
    const auto g = ddpm_golden();
    const DdpmSchedule s = DdpmSchedule::sd15();
    REQUIRE(s.num_steps == 1000);
    const auto ac = g.at("alphas_cumprod").get<std::vector<double>>();
    REQUIRE(ac.size() == 1000);
    double worst_ac = 0;
    for (size_t i = 0; i < ac.size(); ++i) worst_ac = std::max(worst_ac, std::abs(s.alphas_cumprod[i] - ac[i]) / ac[i]);
    // diffusers keeps the product in f32: its rounding is the whole difference (measured 9.5e-7).
    CHECK(worst_ac <= 1e-6);
    CHECK(std::abs(s.sqrt_alphas_cumprod[500] - std::sqrt(s.alphas_cumprod[500])) < 1e-15);
    CHECK(std::abs(s.sqrt_one_minus_alphas_cumprod[500] - std::sqrt(1 - s.alphas_cumprod[500])) < 1e-15);

    const auto x0 = g.at("x0").get<std::vector<float>>();
    const auto noise = g.at("noise").get<std::vector<float>>();
    const auto t = g.at("t").get<std::vector<int32_t>>();
    const size_t n = x0.size() / t.size();
    std::vector<float> noisy(x0.size()), vel(x0.size());
    s.add_noise(x0, noise, t, noisy);
    s.velocity(x0, noise, t, vel);
    // Error relative to the size of the two terms (the sum itself may cancel towards 0).
    // add_noise weighs x0 by sqrt(ac) and the noise by sqrt(1 - ac); velocity the other way round.
    auto worst = [&](const std::vector<float>& got, const char* key, bool swap) {
        const auto want = g.at(key).get<std::vector<float>>();
        double w = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            const size_t ti = size_t(t[i / n]);
            const double a = std::abs(swap ? noise[i] : x0[i]), b = std::abs(swap ? x0[i] : noise[i]);
            const double scale = s.sqrt_alphas_cumprod[ti] * a + s.sqrt_one_minus_alphas_cumprod[ti] * b;
            w = std::max(w, std::abs(double(got[i]) - double(want[i])) / scale);
        }
        return w;
    };
    const double e_noisy = worst(noisy, "noisy", false), e_vel = worst(vel, "velocity", true);
    CHECK(e_noisy <= 1e-6);
    CHECK(e_vel <= 1e-6);
    MESSAGE("ddpm: alphas_cumprod max rel. error ", worst_ac, ", add_noise ", e_noisy, ", velocity ", e_vel);

    // In place (out aliasing x0) gives the same values.
    std::vector<float> inplace = x0;
    s.add_noise(inplace, noise, t, inplace);
    CHECK(inplace == noisy);
}

TEST_CASE("ddpm: SNR and min-SNR-gamma weights as kohya computes them") {
    const auto g = ddpm_golden();
    const DdpmSchedule s = DdpmSchedule::sd15();
    const auto ts = g.at("snr_t").get<std::vector<int>>();
    const auto snr = g.at("snr").get<std::vector<double>>();
    const auto ac_gold = g.at("alphas_cumprod").get<std::vector<double>>();
    // Our alphas_cumprod differs from diffusers' f32 cumprod by d (up to 9.5e-7 relative); an SNR
    // ac / (1 - ac) moves by d / (ac (1 - ac)) relative, and kohya's f32 arithmetic adds a few
    // roundings (5e-7). Every weight is a function of the SNR with relative slope <= 1.
    auto tol = [&](int t) {
        const double ac = ac_gold[size_t(t)];
        return std::abs(s.alphas_cumprod[size_t(t)] - ac) / (ac * (1 - ac)) + 5e-7;
    };
    double worst_formula = 0, worst_snr = 0, worst_w = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
        const double rel = std::abs(s.snr(ts[i]) - snr[i]) / snr[i];
        CHECK(rel <= tol(ts[i]));
        worst_snr = std::max(worst_snr, rel);
    }
    for (const auto& m : g.at("min_snr")) {
        const double gamma = m.at("gamma").get<double>();
        const auto eps = m.at("epsilon").get<std::vector<double>>();
        const auto v = m.at("v").get<std::vector<double>>();
        for (size_t i = 0; i < ts.size(); ++i) {
            // The formula on kohya's own SNR values: exact up to f32 rounding of the golden.
            const double fe = sd::min_snr_weight_from_snr(snr[i], gamma, Prediction::epsilon);
            const double fv = sd::min_snr_weight_from_snr(snr[i], gamma, Prediction::v_prediction);
            worst_formula = std::max({worst_formula, std::abs(fe - eps[i]) / eps[i], std::abs(fv - v[i]) / v[i]});
            // Our table end to end.
            const double we = s.min_snr_weight(ts[i], gamma, Prediction::epsilon);
            const double wv = s.min_snr_weight(ts[i], gamma, Prediction::v_prediction);
            CHECK(std::abs(we - eps[i]) <= tol(ts[i]) * eps[i]);
            CHECK(std::abs(wv - v[i]) <= tol(ts[i]) * v[i]);
            worst_w = std::max({worst_w, std::abs(we - eps[i]) / eps[i], std::abs(wv - v[i]) / v[i]});
        }
    }
    CHECK(worst_formula <= 1e-6);
    MESSAGE("min-SNR: formula max rel. error ", worst_formula, "; SNR table vs kohya's f32 ", worst_snr,
            ", weights ", worst_w);
    // Low-noise timesteps (snr > gamma) are down-weighted; high-noise ones keep weight 1 (epsilon).
    CHECK(s.min_snr_weight(999, 5.0, Prediction::epsilon) == 1.0);
    CHECK(s.min_snr_weight(0, 5.0, Prediction::epsilon) == doctest::Approx(5.0 / s.snr(0)));
    CHECK_THROWS_AS(s.snr(1000), gl::Error);
    CHECK_THROWS_AS(s.min_snr_weight(10, 0.0, Prediction::epsilon), gl::Error);
}

TEST_CASE("ddpm: seeded timesteps, normal noise and offset noise") {
    NoiseRng a{42, 0}, b{42, 0};
    const auto ta = sd::sample_timesteps(4096, 100, 900, 1000, a);
    const auto tb = sd::sample_timesteps(4096, 100, 900, 1000, b);
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
    CHECK(sd::sample_timesteps(16, 0, 1000, 1000, c) != std::vector<int32_t>(ta.begin(), ta.begin() + 16));
    CHECK_THROWS_AS(sd::sample_timesteps(1, 5, 5, 1000, c), gl::Error);
    CHECK_THROWS_AS(sd::sample_timesteps(1, 0, 1001, 1000, c), gl::Error);

    // Normal noise: moments of 20000 draws.
    std::vector<float> z(20000);
    NoiseRng r{7, 0};
    sd::fill_normal(z, r);
    double m1 = 0, m2 = 0;
    for (float v : z) {
        m1 += v;
        m2 += double(v) * v;
    }
    m1 /= double(z.size());
    m2 /= double(z.size());
    CHECK(std::abs(m1) < 0.03);
    CHECK(std::abs(m2 - 1.0) < 0.05);

    // Offset noise: one shift per (sample, channel), the same at every pixel (NHWC).
    const int64_t B = 3, H = 2, W = 5, C = 4;
    std::vector<float> noise(size_t(B * H * W * C), 0.0f);
    NoiseRng o{9, 0};
    sd::apply_noise_offset(noise, B, C, 0.1, o);
    for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t c = 0; c < C; ++c) {
            const float first = noise[size_t(bi * H * W * C + c)];
            CHECK(first != 0.0f);
            CHECK(std::abs(first) < 0.6f);
            for (int64_t p = 1; p < H * W; ++p) CHECK(noise[size_t((bi * H * W + p) * C + c)] == first);
        }
    CHECK(noise[0] != noise[1]);                          // channels differ
    CHECK(noise[0] != noise[size_t(H * W * C)]);          // samples differ
    CHECK_THROWS_AS(sd::apply_noise_offset(noise, 7, C, 0.1, o), gl::Error);

    // add_noise input validation.
    const DdpmSchedule s = DdpmSchedule::sd15();
    std::vector<float> x(8), out(8);
    const std::vector<int32_t> bad_t = {0, 1000};
    CHECK_THROWS_AS(s.add_noise(x, x, bad_t, out), gl::Error);
    const std::vector<int32_t> three = {0, 1, 2};
    CHECK_THROWS_AS(s.add_noise(x, x, three, out), gl::Error);
    CHECK_THROWS_AS(DdpmSchedule::scaled_linear(0.012, 0.00085, 1000), gl::Error);
}
