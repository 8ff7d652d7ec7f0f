// The DDPM noise schedule against diffusers' DDPMScheduler (SD1.5 config) and kohya's SNR table
// (tests/golden/make_schedule_golden.py -> tests/golden/data/schedule/ddpm.json); the noise
// generator. The objective built on them (min-SNR weights, draws): test_objective.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ddpm_golden.h"
#include "ggml-lite/core/error.h"
#include "models/diffusion/noise.h"
#include "test_util.h"

using diffusion::DdpmSchedule;
using diffusion::NoiseRng;

using gltest::ddpm_golden;

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

TEST_CASE("ddpm: SNR as kohya computes it") {
    const DdpmSchedule s = DdpmSchedule::sd15();
    const gltest::SnrGolden kohya(ddpm_golden());
    const std::vector<int>& ts = kohya.ts;
    const std::vector<double>& snr = kohya.snr;
    auto tol = [&](int t) { return kohya.tolerance(s, t); };
    double worst_snr = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
        const double rel = std::abs(s.snr(ts[i]) - snr[i]) / snr[i];
        CHECK(rel <= tol(ts[i]));
        worst_snr = std::max(worst_snr, rel);
    }
    MESSAGE("SNR table vs kohya's f32: max rel. error ", worst_snr);
    CHECK_THROWS_AS(s.snr(1000), gl::Error);
}

TEST_CASE("ddpm: normal noise and add_noise input validation") {
    // Normal noise: moments of 20000 draws.
    std::vector<float> z(20000);
    NoiseRng r{7, 0};
    diffusion::fill_normal(z, r);
    double m1 = 0, m2 = 0;
    for (float v : z) {
        m1 += v;
        m2 += double(v) * v;
    }
    m1 /= double(z.size());
    m2 /= double(z.size());
    CHECK(std::abs(m1) < 0.03);
    CHECK(std::abs(m2 - 1.0) < 0.05);

    // add_noise input validation.
    const DdpmSchedule s = DdpmSchedule::sd15();
    std::vector<float> x(8), out(8);
    const std::vector<int32_t> bad_t = {0, 1000};
    CHECK_THROWS_AS(s.add_noise(x, x, bad_t, out), gl::Error);
    const std::vector<int32_t> three = {0, 1, 2};
    CHECK_THROWS_AS(s.add_noise(x, x, three, out), gl::Error);
    CHECK_THROWS_AS(DdpmSchedule::scaled_linear(0.012, 0.00085, 1000), gl::Error);
}
