// The DDPM noise schedule against diffusers' DDPMScheduler (SD1.5 config) and kohya's SNR table
// (tests/golden/make_schedule_golden.py -> tests/golden/data/schedule/ddpm.json); the noise
// generator and the portable normal the step graph draws with (ops/rng_normal.h). The objective
// built on them (min-SNR weights, draws): test_objective.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/rng_normal.h"
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

TEST_CASE("noise: the portable normal (gl::rng_normal) gives libm's Box-Muller floats, on the same draws") {
    // 2^22 draws: every float equals the host formula's (diffusion::NoiseRng::normal uses the platform's
    // log and cos); the doubles differ, where libm's log or cos is an ulp off (about 0.15 % of the
    // draws), by at most two ulps of the product.
    const uint64_t n = uint64_t(1) << 22;
    NoiseRng host{1234, 0};
    uint64_t doubles_differ = 0;
    for (uint64_t i = 0; i < n; i++) {
        const double want = host.normal(), got = gl::rng_normal(1234, 2 * i);
        if (float(got) != float(want)) FAIL("draw ", i, ": ", got, " vs libm's ", want);
        if (got != want) {
            doubles_differ++;
            CHECK(std::fabs(got - want) <= std::fabs(want) * 0x1p-51);
        }
    }
    CHECK(doubles_differ < n / 100);
    MESSAGE("portable normal: ", doubles_differ, " of ", n, " doubles differ from libm's, no float");
}

TEST_CASE("noise: the portable log and cosine are within an ulp of libm's over their whole ranges") {
    using gl::rng_math::cos;
    using gl::rng_math::log;
    CHECK(log(1.0) == 0.0);
    CHECK(log(0.5) == std::log(0.5));
    CHECK(log(0x1p-53) == std::log(0x1p-53));
    CHECK(cos(0.0) == 1.0);
    CHECK(cos(std::nextafter(6.283185307179586, 0.0)) == std::cos(std::nextafter(6.283185307179586, 0.0)));
    const auto ulps = [](double a, double b) { return std::fabs(a - b) / std::fabs(std::nextafter(b, 0.0) - b); };
    std::mt19937_64 rng(5);
    double worst_log = 0, worst_cos = 0;
    for (int i = 0; i < 200000; i++) {
        // Every binade of (0, 1] and beyond it for log; [0, 2 pi), near the quadrant edges too, for cos.
        const double x = std::ldexp(1.0 + double(rng() >> 11) * 0x1p-53, int(rng() % 1100) - 1021);
        worst_log = std::max(worst_log, ulps(log(x), std::log(x)));
        const double q = double(rng() % 4 + 1) * 1.5707963267948966;
        const double y = i % 2 ? std::fmod(double(rng() >> 11) * 0x1p-53 * 6.283185307179586, 6.283185307179586)
                               : std::nextafter(q, double(rng() % 2)) - double(rng() % 64) * 0x1p-50;
        if (y >= 0.0 && y < 6.283185307179586) worst_cos = std::max(worst_cos, ulps(cos(y), std::cos(y)));
    }
    CHECK(worst_log <= 1.0);
    CHECK(worst_cos <= 1.0);
    MESSAGE("portable log / cos: worst ", worst_log, " / ", worst_cos, " ulp from libm");
}
