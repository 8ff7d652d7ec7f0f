// The DDPM golden of the schedule and objective tests: diffusers' DDPMScheduler (SD1.5 config) and
// kohya's SNR table (tests/golden/make_schedule_golden.py -> tests/golden/data/schedule/ddpm.json).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/diffusion/noise.h"
#include "test_util.h"

namespace gltest {

inline nlohmann::json ddpm_golden() {
    std::ifstream in(golden_dir("schedule") + "ddpm.json");
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
}

// kohya's SNR table: its timesteps and values, and how far ours may lie from them.
struct SnrGolden {
    std::vector<int> ts;
    std::vector<double> snr, alphas_cumprod;

    explicit SnrGolden(const nlohmann::json& g)
        : ts(g.at("snr_t").get<std::vector<int>>()), snr(g.at("snr").get<std::vector<double>>()),
          alphas_cumprod(g.at("alphas_cumprod").get<std::vector<double>>()) {}

    // Our alphas_cumprod differs from diffusers' f32 cumprod by d (up to 9.5e-7 relative); an SNR
    // ac / (1 - ac) moves by d / (ac (1 - ac)) relative, and kohya's f32 arithmetic adds a few
    // roundings (5e-7).
    double tolerance(const diffusion::DdpmSchedule& s, int t) const {
        const double ac = alphas_cumprod[size_t(t)];
        return std::abs(s.alphas_cumprod[size_t(t)] - ac) / (ac * (1 - ac)) + 5e-7;
    }
};

}  // namespace gltest
