// The samplers against diffusers' schedulers (tests/golden/make_sampler_golden.py ->
// tests/golden/data/sampler/schedulers.safetensors): the same fake model, the same initial noise
// and injected step noise; the timesteps of every model call, init_noise_sigma and the latents
// after every step must agree, for every sampler of sampler_list.inc. LMS's integrated
// coefficients against scipy's. Also names, presets and refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"
#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"
#include "test_util.h"

using diffusion::Sampler;
using diffusion::SamplerKind;
using diffusion::SamplerOptions;

namespace {

std::string golden_path() { return gltest::golden_dir("sampler") + "schedulers.safetensors"; }

std::vector<double> tensor_f64(const gl::io::SafetensorsFile& f, const std::string& name) {
    std::vector<double> v(size_t(f.info(name).numel()));
    // The timesteps are stored in f64; read through f32 would round fractional ones.
    const auto* raw = static_cast<const unsigned char*>(f.raw(name));
    REQUIRE(f.nbytes(name) == v.size() * 8);
    for (size_t i = 0; i < v.size(); i++) std::memcpy(&v[i], raw + 8 * i, 8);
    return v;
}

// The golden fake model: tanh(x) (0.8 + 0.2 cos(t / 150)) + 0.05 sin(3x), in double.
void fake_model(std::span<const float> x, double t, std::span<float> out) {
    const double c = 0.8 + 0.2 * std::cos(t / 150.0);
    for (size_t i = 0; i < x.size(); i++) out[i] = float(std::tanh(double(x[i])) * c + 0.05 * std::sin(3.0 * x[i]));
}

SamplerKind kind_of(const std::string& s) { return diffusion::parse_sampler_name(s).kind; }

// ||a - b|| / ||b||.
double rel_norm(std::span<const float> a, std::span<const float> b) {
    double d = 0, r = 0;
    for (size_t i = 0; i < a.size(); i++) {
        d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        r += double(b[i]) * b[i];
    }
    return std::sqrt(d / std::max(r, 1e-300));
}

}  // namespace

TEST_CASE("sampler: every scheduler case matches diffusers step by step") {
    const gl::io::SafetensorsFile f(golden_path());
    const auto cases = nlohmann::json::parse(f.metadata().at("cases"));
    REQUIRE(cases.size() >= 46);
    std::vector<SamplerKind> covered;
    for (const auto& c : cases) {
        const std::string name = c.at("name");
        CAPTURE(name);
        const SamplerKind kind = kind_of(c.at("kind"));
        covered.push_back(kind);
        SamplerOptions o = c.at("preset") == "kohya" ? SamplerOptions::kohya(kind) : SamplerOptions::diffusers_sd15(kind);
        o.karras = c.at("karras").get<bool>();
        o.eta = c.at("eta").get<double>();
        o.prediction = c.at("prediction") == "epsilon" ? diffusion::Prediction::epsilon : diffusion::Prediction::v_prediction;
        const Sampler s(o, c.at("steps").get<int>());

        const std::vector<double> want_t = tensor_f64(f, name + ".timesteps");
        REQUIRE(s.timesteps().size() == want_t.size());
        for (size_t i = 0; i < want_t.size(); i++)
            CHECK_MESSAGE(std::abs(s.timesteps()[i] - want_t[i]) <= 1e-4 * std::max(1.0, want_t[i]), "call ", i, ": ",
                          s.timesteps()[i], " vs ", want_t[i]);
        CHECK(std::abs(s.init_noise_sigma() - c.at("init_noise_sigma").get<double>()) <=
              1e-6 * c.at("init_noise_sigma").get<double>());

        std::vector<float> x = gltest::read_f32(f, name + ".x0");
        const size_t n = x.size();
        const std::vector<float> want = gltest::read_f32(f, name + ".latents");
        REQUIRE(want.size() == n * want_t.size());
        std::vector<float> noise;
        if (f.has(name + ".noise")) noise = gltest::read_f32(f, name + ".noise");
        int noise_calls = 0;
        // The injected noise is stored per model call; steps draw it in call order.
        auto noise_fn = [&](std::span<float> z) {
            REQUIRE(!noise.empty());
            std::copy_n(noise.begin() + ptrdiff_t(size_t(noise_calls) * n), n, z.begin());
            noise_calls++;
        };
        double worst = 0;
        int calls = 0;
        s.run(x, fake_model, noise_fn, [&](int k, std::span<const float> lat) {
            CHECK(k == calls);
            worst = std::max(worst, rel_norm(lat, std::span<const float>(want).subspan(size_t(k) * n, n)));
            calls++;
        });
        CHECK(calls == s.model_calls());
        MESSAGE(name, ": worst step rel. error ", worst);
        // Measured <= 4.2e-7 (double vs torch f32 ops), DPM2 a with v-prediction 1.0e-6; the issue asks 1e-4.
        CHECK(worst <= 1e-5);
    }
    // Every sampler of sampler_list.inc has its cases.
    for (const SamplerKind k : diffusion::registered_samplers())
        CHECK_MESSAGE(std::find(covered.begin(), covered.end(), k) != covered.end(), k.name(), " has no golden case");
}

TEST_CASE("sampler: LMS's coefficients are diffusers' integrals (scipy.integrate.quad) to 1e-6") {
    // The integral over [sigma_k, sigma_k+1] of each Lagrange basis polynomial through the last
    // min(k + 1, 4) sigmas, newest first, on diffusers' own sigmas.
    const gl::io::SafetensorsFile f(golden_path());
    int checked = 0;
    double worst = 0;
    for (const auto& c : nlohmann::json::parse(f.metadata().at("cases"))) {
        if (c.at("kind") != "lms") continue;
        const std::string name = c.at("name");
        CAPTURE(name);
        const std::vector<double> sigmas = tensor_f64(f, name + ".sigmas"), want = tensor_f64(f, name + ".lms_coeffs");
        const size_t steps = sigmas.size() - 1;
        REQUIRE(want.size() == steps * 4);
        for (size_t k = 0; k < steps; k++) {
            const size_t order = std::min<size_t>(k + 1, 4);
            std::vector<double> nodes(order);
            for (size_t j = 0; j < order; j++) nodes[j] = sigmas[k - j];
            for (size_t j = 0; j < order; j++) {
                const double got = diffusion::schedule::lagrange_basis_integral(nodes, j, sigmas[k], sigmas[k + 1]);
                const double w = want[k * 4 + j];
                CHECK_MESSAGE(std::abs(got - w) <= 1e-6 * std::abs(w), "step ", k, " basis ", j, ": ", got, " vs ", w);
                worst = std::max(worst, std::abs(got - w) / std::abs(w));
                checked++;
            }
        }
    }
    MESSAGE("LMS coefficients: worst rel. error ", worst, " over ", checked);  // measured 1.3e-7 (quad on f32)
    CHECK(checked > 100);
    // Exact on polynomials: the basis functions sum to 1, so their integrals sum to b - a.
    const double nodes[] = {14.6, 9.2, 6.1, 3.3};
    double sum = 0;
    for (size_t j = 0; j < 4; j++) sum += diffusion::schedule::lagrange_basis_integral(nodes, j, 2.5, 0.0);
    CHECK(std::abs(sum + 2.5) <= 1e-14);
    CHECK(std::abs(diffusion::schedule::lagrange_basis_integral(std::span(nodes, 1), 0, 1.0, 3.0) - 2.0) <= 1e-14);
    const double nine[9] = {};
    CHECK(gltest::error_of([&] { diffusion::schedule::lagrange_basis_integral(nine, 0, 0.0, 1.0); })
              .find("at most 8") != std::string::npos);
}

TEST_CASE("sampler: names, presets and refusals") {
    using gltest::error_of;
    CHECK(diffusion::parse_sampler_name("k_euler_a").kind == SamplerKind::euler_ancestral);
    CHECK(diffusion::parse_sampler_name("dpmsolver++_karras").karras);
    CHECK(diffusion::parse_sampler_name("dpm_2").kind == SamplerKind::dpm2);
    CHECK(diffusion::parse_sampler_name("k_lms").kind == SamplerKind::lms);
    CHECK(diffusion::parse_sampler_name("k_dpm_2_a_karras").kind == SamplerKind::dpm2_ancestral);
    CHECK(diffusion::parse_sampler_name("k_dpm_2_a_karras").karras);
    CHECK(diffusion::parse_sampler_name("dpmsingle_karras").kind == SamplerKind::dpmsingle);
    CHECK(diffusion::parse_sampler_name("dpmsolver").kind == SamplerKind::dpmsolver);
    CHECK(diffusion::parse_sampler_name("ddpm").kind == SamplerKind::ddpm);
    CHECK(error_of([] { diffusion::parse_sampler_name("warp"); })
              .find("unknown sampler 'warp'; supported: ddim, euler, k_euler, euler_a, k_euler_a, dpmsolver++, heun, "
                    "dpm_2, k_dpm_2, pndm, lms, k_lms, dpm_2_a, k_dpm_2_a, dpmsolver, dpmsingle, ddpm (and "
                    "<name>_karras for euler, dpmsolver++, heun, dpm_2, lms, dpm_2_a, dpmsolver, dpmsingle)") !=
          std::string::npos);
    CHECK(error_of([] { diffusion::parse_sampler_name("euler_a_karras"); }).find("has no Karras variant") != std::string::npos);
    CHECK(error_of([] { diffusion::parse_sampler_name("pndm_karras"); }).find("has no Karras variant") != std::string::npos);
    CHECK(diffusion::a1111_sampler_name(SamplerKind::dpmpp_2m, true) == "DPM++ 2M Karras");
    CHECK(diffusion::a1111_sampler_name(SamplerKind::euler_ancestral, false) == "Euler a");
    CHECK(diffusion::a1111_sampler_name(SamplerKind::pndm, false) == "PLMS");
    CHECK(diffusion::a1111_sampler_name(SamplerKind::lms, true) == "LMS Karras");
    CHECK(diffusion::a1111_sampler_name(SamplerKind::dpm2_ancestral, false) == "DPM2 a");
    CHECK(diffusion::a1111_sampler_name(SamplerKind::dpm2_ancestral, true) == "DPM2 a Karras");

    // PNDM: SD's config skips the Runge-Kutta warm-up (n + 1 calls), kohya's defaults run it (n + 9
    // calls), which PNDMScheduler cannot lay out below 4 steps.
    CHECK(Sampler(SamplerOptions::diffusers_sd15(SamplerKind::pndm), 3).model_calls() == 4);
    CHECK(Sampler(SamplerOptions::kohya(SamplerKind::pndm), 4).model_calls() == 13);
    CHECK(error_of([] { Sampler(SamplerOptions::kohya(SamplerKind::pndm), 3); })
              .find("sampler pndm: 3 steps with the Runge-Kutta warm-up (skip_prk_steps off, PNDMScheduler's "
                    "default, kohya's) need 4 steps at least") != std::string::npos);
    SamplerOptions single = SamplerOptions::kohya(SamplerKind::dpmsingle);
    single.spacing = diffusion::TimestepSpacing::leading;
    CHECK(error_of([&] { Sampler(single, 10); }).find("spaces its timesteps by linspace only") != std::string::npos);

    // Steps out of range, eta on another sampler, the leading offset past the schedule.
    CHECK(error_of([] { Sampler(SamplerOptions::kohya(SamplerKind::euler), 0); }).find("steps 0 must be in [1, 1000]") !=
          std::string::npos);
    SamplerOptions e = SamplerOptions::kohya(SamplerKind::euler);
    e.eta = 0.5;
    CHECK(error_of([&] { Sampler(e, 10); }).find("eta applies to ddim only") != std::string::npos);
    CHECK(error_of([] { Sampler(SamplerOptions::diffusers_sd15(SamplerKind::ddim), 1000); })
              .find("reach timestep 1000") != std::string::npos);
    CHECK(Sampler(SamplerOptions::kohya(SamplerKind::ddim), 1000).timesteps().front() == 999);
    SamplerOptions a = SamplerOptions::kohya(SamplerKind::euler_ancestral);
    std::vector<float> x(8, 0.5f);
    CHECK(error_of([&] { Sampler(a, 4).run(x, fake_model); }).find("needs a noise function") != std::string::npos);
}

TEST_CASE("sampler: a batch is elementwise, so images sample independently of their batch") {
    // Two images run together give what each gives alone (the pipeline relies on it for seeds).
    const Sampler s(SamplerOptions::diffusers_sd15(SamplerKind::dpmpp_2m), 12);
    std::vector<float> both(32), one(16), two(16);
    for (size_t i = 0; i < 32; i++) both[i] = float(std::sin(double(i) * 1.7));
    std::copy_n(both.begin(), 16, one.begin());
    std::copy_n(both.begin() + 16, 16, two.begin());
    s.run(both, fake_model);
    s.run(one, fake_model);
    s.run(two, fake_model);
    CHECK(std::equal(one.begin(), one.end(), both.begin()));
    CHECK(std::equal(two.begin(), two.end(), both.begin() + 16));
}
