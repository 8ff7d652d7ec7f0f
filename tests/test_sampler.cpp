// The samplers against diffusers' schedulers (tests/golden/make_sampler_golden.py ->
// tests/golden/data/sampler/schedulers.safetensors): the same fake model, the same initial noise
// and injected step noise; the timesteps of every model call, init_noise_sigma and the latents
// after every step must agree. Also names, presets and refusals.
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
    REQUIRE(cases.size() >= 20);
    for (const auto& c : cases) {
        const std::string name = c.at("name");
        CAPTURE(name);
        const SamplerKind kind = kind_of(c.at("kind"));
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
        CHECK(worst <= 1e-5);  // measured <= 4e-7 (double vs torch f32 ops); the issue asks 1e-4
    }
}

TEST_CASE("sampler: names, presets and refusals") {
    using gltest::error_of;
    CHECK(diffusion::parse_sampler_name("k_euler_a").kind == SamplerKind::euler_ancestral);
    CHECK(diffusion::parse_sampler_name("dpmsolver++_karras").karras);
    CHECK(diffusion::parse_sampler_name("dpm_2").kind == SamplerKind::dpm2);
    CHECK(error_of([] { diffusion::parse_sampler_name("pndm"); }).find("sampler 'pndm' (kohya's pndm) is not supported") !=
          std::string::npos);
    CHECK(error_of([] { diffusion::parse_sampler_name("k_lms"); }).find("not supported; supported: ddim, euler") !=
          std::string::npos);
    CHECK(error_of([] { diffusion::parse_sampler_name("warp"); }).find("unknown sampler 'warp'") != std::string::npos);
    CHECK(error_of([] { diffusion::parse_sampler_name("euler_a_karras"); }).find("has no Karras variant") != std::string::npos);
    CHECK(diffusion::a1111_sampler_name(SamplerKind::dpmpp_2m, true) == "DPM++ 2M Karras");
    CHECK(diffusion::a1111_sampler_name(SamplerKind::euler_ancestral, false) == "Euler a");

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
