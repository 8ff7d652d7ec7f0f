// The sampler registry (models/diffusion/samplers/): every registered sampler is checked through
// the same generic paths (its names parse back to it, A1111 names are unique, validate() refuses
// what its definition says it does not take, the presets follow its definition, its schedule's
// model calls are the timesteps the loop runs), and a stand-in sampler defined here and
// registered at run time goes through names, presets, validation, the loop and the infotext
// without any other code knowing it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ggml-lite/core/error.h"
#include "models/diffusion/sampler.h"
#include "pipelines/a1111.h"
#include "test_util.h"

using diffusion::Sampler;
using diffusion::SamplerDef;
using diffusion::SamplerKind;
using diffusion::SamplerOptions;
using gltest::error_of;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> kohya_names(const SamplerDef& d) {
    std::vector<std::string> names = {std::string(d.name)};
    for (std::string_view a : d.aliases) names.emplace_back(a);
    return names;
}

void smooth_model(std::span<const float> x, double t, std::span<float> out) {
    for (size_t i = 0; i < x.size(); i++) out[i] = float(0.3 * std::tanh(double(x[i])) + 1e-4 * t);
}

// Runs `s` on a small batch, checking that the model sees exactly the schedule's timesteps and
// that every model call is followed by one step callback; returns how often noise was drawn.
int run_checked(const Sampler& s) {
    std::vector<float> x(12);
    for (size_t i = 0; i < x.size(); i++) x[i] = float(std::sin(double(i) * 0.9));
    std::vector<double> seen;
    int steps_seen = 0, noise_calls = 0;
    auto model = [&](std::span<const float> in, double t, std::span<float> out) {
        seen.push_back(t);
        smooth_model(in, t, out);
    };
    auto noise = [&](std::span<float> z) {
        noise_calls++;
        std::fill(z.begin(), z.end(), 0.25f);
    };
    s.run(x, model, noise, [&](int k, std::span<const float>) { CHECK(k == steps_seen++); });
    CHECK(seen == s.timesteps());
    CHECK(steps_seen == s.model_calls());
    CHECK(std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); }));
    return noise_calls;
}

}  // namespace

TEST_CASE("sampler registry: every sampler's names, A1111 names, refusals, presets and schedules") {
    const std::vector<SamplerKind> kinds = diffusion::registered_samplers();
    REQUIRE(kinds.size() >= 12);
    CHECK(kinds.front() == SamplerKind::ddim);  // sampler_list.inc's order: the names' order in help texts
    CHECK(has(diffusion::supported_sampler_names(), "ddim, euler, k_euler, euler_a, k_euler_a, dpmsolver++, heun"));
    std::set<std::string> kohya, a1111;
    for (const SamplerKind k : kinds) {
        const SamplerDef& d = k.def();
        CAPTURE(d.name);
        CHECK(k.name() == d.name);
        for (const std::string& n : kohya_names(d)) {
            CHECK_MESSAGE(kohya.insert(n).second, "kohya name ", n, " is not unique");
            CHECK(has(diffusion::supported_sampler_names(), n));
            const diffusion::SamplerName parsed = diffusion::parse_sampler_name(n);
            CHECK(parsed.kind == k);
            CHECK_FALSE(parsed.karras);
            if (d.takes_karras) {
                CHECK(diffusion::parse_sampler_name(n + "_karras").kind == k);
                CHECK(diffusion::parse_sampler_name(n + "_karras").karras);
            } else {
                CHECK(has(error_of([&] { diffusion::parse_sampler_name(n + "_karras"); }), "has no Karras variant"));
            }
        }
        CHECK_MESSAGE(a1111.insert(std::string(d.a1111_name)).second, "A1111 name ", d.a1111_name, " is not unique");
        CHECK(diffusion::a1111_sampler_name(k, false) == d.a1111_name);
        CHECK(d.takes_karras == !d.a1111_karras_name.empty());
        if (d.takes_karras) {
            CHECK_MESSAGE(a1111.insert(std::string(d.a1111_karras_name)).second, d.a1111_karras_name, " is not unique");
            CHECK(diffusion::a1111_sampler_name(k, true) == d.a1111_karras_name);
        }

        // The presets follow the definition: the class's spacing, clip_sample where kohya's is read.
        const SamplerOptions diffusers = SamplerOptions::diffusers_sd15(k), kohya_preset = SamplerOptions::kohya(k);
        CHECK(diffusers.kind == k);
        CHECK(diffusers.spacing == d.spacing);
        CHECK(kohya_preset.spacing == d.spacing);
        CHECK_FALSE(diffusers.clip_sample);
        CHECK(kohya_preset.clip_sample == d.reads_clip_sample);
        CHECK_FALSE(diffusers.set_alpha_to_one);
        CHECK(kohya_preset.set_alpha_to_one == d.set_alpha_to_one_default);
        CHECK(diffusers.skip_prk_steps);
        CHECK_FALSE(kohya_preset.skip_prk_steps);

        // validate() refuses exactly what the definition does not take.
        SamplerOptions karras = kohya_preset;
        karras.karras = true;
        if (d.takes_karras) CHECK_NOTHROW(karras.validate());
        else CHECK(has(error_of([&] { karras.validate(); }), "Karras sigmas are not offered for it"));
        SamplerOptions eta = kohya_preset;
        eta.eta = 0.5;
        if (d.takes_eta) CHECK_NOTHROW(eta.validate());
        else CHECK(has(error_of([&] { eta.validate(); }), "eta applies to ddim only"));
        eta.eta = 1.5;
        CHECK(has(error_of([&] { eta.validate(); }), d.takes_eta ? "must be in [0, 1]" : "eta applies to ddim only"));

        // Its schedules: every model call's timestep on the training schedule, in the order the
        // loop runs them; noise drawn once per model call or never. A class may not build the
        // shortest schedules (PNDM's Runge-Kutta warm-up needs 4 steps): refused, naming the
        // sampler; from 4 steps on every sampler runs.
        for (const bool with_karras : {false, true}) {
            if (with_karras && !d.takes_karras) continue;
            for (SamplerOptions o : {diffusers, kohya_preset}) {
                o.karras = with_karras;
                if (d.takes_eta) o.eta = 0.3;
                for (const int steps : {1, 2, 7, 25}) {
                    CAPTURE(steps);
                    CAPTURE(with_karras);
                    if (steps < 4) {
                        const std::string refusal = error_of([&] { Sampler(o, steps); });
                        CAPTURE(refusal);
                        CHECK((refusal == "(no error)" || has(refusal, gl::cat("sampler ", d.name, ": "))));
                        if (refusal != "(no error)") continue;
                    }
                    const Sampler s(o, steps);
                    CHECK(s.model_calls() == int(s.timesteps().size()));
                    CHECK(s.model_calls() >= steps);
                    CHECK(std::all_of(s.timesteps().begin(), s.timesteps().end(),
                                      [](double t) { return t >= 0 && t <= 999; }));
                    CHECK(std::isfinite(s.init_noise_sigma()));
                    CHECK(s.init_noise_sigma() > 0);
                    const int noise_calls = run_checked(s);
                    CHECK((noise_calls == 0 || noise_calls == s.model_calls()));
                    std::vector<float> x(4, 0.5f);
                    const std::string no_noise = error_of([&] { s.run(x, smooth_model); });
                    CHECK(no_noise == (noise_calls == 0 ? "(no error)" : gl::cat("sampler ", d.name, ": needs a noise function")));
                }
            }
        }
    }
    // Every name kohya's get_my_scheduler knows is a sampler here: its --sample_sampler choices and
    // ddpm (which only a prompt's --ss reaches), each the class kohya picks for it.
    const std::pair<std::string, std::string> kohya_choices[] = {
        {"ddim", "ddim"},       {"ddpm", "ddpm"},           {"pndm", "pndm"},           {"lms", "lms"},
        {"k_lms", "lms"},       {"euler", "euler"},         {"k_euler", "euler"},       {"euler_a", "euler_a"},
        {"k_euler_a", "euler_a"}, {"dpmsolver", "dpmsolver"}, {"dpmsolver++", "dpmsolver++"},
        {"dpmsingle", "dpmsingle"}, {"heun", "heun"},       {"dpm_2", "dpm_2"},         {"k_dpm_2", "dpm_2"},
        {"dpm_2_a", "dpm_2_a"}, {"k_dpm_2_a", "dpm_2_a"},
    };
    for (const auto& [name, sampler] : kohya_choices) {
        CAPTURE(name);
        CHECK(kohya.count(name));
        CHECK(diffusion::parse_sampler_name(name).kind.name() == sampler);
    }
}

namespace {

// The stand-in: n + 1 model calls for n steps (a final call at t = 0), x0 = the model output.
struct StandInPlan final : diffusion::SamplerPlan {
    double eta = 0;

    void run(std::span<float> x, const diffusion::ModelFn& model, const diffusion::NoiseFn& noise,
             const diffusion::StepFn& on_step) const override {
        std::vector<float> out(x.size()), z(x.size());
        for (size_t k = 0; k < timesteps.size(); k++) {
            model(x, timesteps[k], out);
            if (draws_noise) noise(z);
            for (size_t i = 0; i < x.size(); i++) x[i] = float(out[i] + eta * z[i]);
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const diffusion::SamplerPlan> stand_in_plan(const SamplerOptions& o, int steps) {
    auto p = std::make_unique<StandInPlan>();
    for (int i = 0; i < steps; i++) p->timesteps.push_back(999.0 - 999.0 * i / steps);
    p->timesteps.push_back(0.0);
    p->init_noise_sigma = 2.0;
    p->eta = o.eta;
    p->draws_noise = o.eta > 0;
    return p;
}

constexpr std::string_view kStandInAliases[] = {"k_stand_in"};
constexpr SamplerDef kStandIn{
    .name = "stand_in",
    .aliases = kStandInAliases,
    .a1111_name = "Stand-in",
    .a1111_karras_name = "Stand-in Karras",
    .a1111_eta_key = "Eta stand-in",
    .takes_karras = true,
    .takes_eta = true,
    .reads_clip_sample = true,
    .spacing = diffusion::TimestepSpacing::trailing,
    .plan = &stand_in_plan,
};

}  // namespace

TEST_CASE("sampler registry: a stand-in sampler registered at run time is a sampler everywhere") {
    const size_t listed = diffusion::registered_samplers().size();
    CHECK(has(error_of([] { diffusion::parse_sampler_name("stand_in"); }), "unknown sampler 'stand_in'"));
    {
        const diffusion::SamplerRegistration registration(kStandIn);
        REQUIRE(diffusion::registered_samplers().size() == listed + 1);
        const SamplerKind k = diffusion::registered_samplers().back();
        CHECK(&k.def() == &kStandIn);
        CHECK(diffusion::parse_sampler_name("stand_in").kind == k);
        CHECK(diffusion::parse_sampler_name("k_stand_in_karras").karras);
        CHECK(has(diffusion::supported_sampler_names(), ", stand_in, k_stand_in ("));
        CHECK(has(diffusion::supported_sampler_names(),
                  "for euler, dpmsolver++, heun, dpm_2, lms, dpm_2_a, dpmsolver, dpmsingle, stand_in)"));

        SamplerOptions o = SamplerOptions::kohya(k);
        CHECK(o.clip_sample);
        CHECK(o.spacing == diffusion::TimestepSpacing::trailing);
        o.karras = true;
        o.eta = 0.5;
        const Sampler s(o, 4);
        CHECK(s.model_calls() == 5);
        CHECK(s.init_noise_sigma() == 2.0);
        std::vector<float> x = {1.0f, -0.5f};
        std::vector<std::vector<float>> inputs;
        auto identity = [&](std::span<const float> in, double, std::span<float> out) {
            inputs.emplace_back(in.begin(), in.end());
            std::copy(in.begin(), in.end(), out.begin());
        };
        CHECK(has(error_of([&] { s.run(x, identity); }), "sampler stand_in: needs a noise function"));
        int noise_calls = 0;
        s.run(x, identity, [&](std::span<float> z) {
            noise_calls++;
            std::fill(z.begin(), z.end(), 1.0f);
        });
        REQUIRE(inputs.size() == 5);
        CHECK(inputs.front() == std::vector<float>{2.0f, -1.0f});  // the unit noise times init_noise_sigma
        CHECK(noise_calls == 5);
        CHECK(x == std::vector<float>{2.0f + 5 * 0.5f, -1.0f + 5 * 0.5f});

        // The infotext and the eta message ask the definition too.
        sd::GenerationParams p;
        p.prompt = "a cat";
        p.steps = 4;
        p.sampler = o;
        CHECK(sd::a1111_infotext(p, 3, {}) ==
              "a cat\nSteps: 4, Sampler: Stand-in Karras, CFG scale: 7.5, Seed: 3, Size: 512x512, Eta stand-in: 0.5");
        SamplerOptions euler_eta = SamplerOptions::kohya(SamplerKind::euler);
        euler_eta.eta = 0.5;
        CHECK(has(error_of([&] { euler_eta.validate(); }), "eta applies to ddim, stand_in only"));

        // A second registration of the same names, or of a listed sampler's, is refused.
        CHECK(has(error_of([] { diffusion::SamplerRegistration again(kStandIn); }),
                  "sampler definition 'stand_in': name 'stand_in' is taken by sampler 'stand_in'"));
    }
    CHECK(diffusion::registered_samplers().size() == listed);
    CHECK(has(error_of([] { diffusion::parse_sampler_name("k_stand_in"); }), "unknown sampler 'k_stand_in'"));
}

TEST_CASE("sampler registry: incomplete, inconsistent or clashing definitions are refused") {
    const size_t listed = diffusion::registered_samplers().size();
    auto refusal = [](const SamplerDef& d) { return error_of([&] { diffusion::SamplerRegistration r(d); }); };
    constexpr std::string_view euler_alias[] = {"k_euler"};
    SamplerDef d = kStandIn;
    d.aliases = euler_alias;
    CHECK(has(refusal(d), "name 'k_euler' is taken by sampler 'euler'"));
    d = kStandIn;
    d.a1111_karras_name = "DPM++ 2M Karras";
    CHECK(has(refusal(d), "A1111 name 'DPM++ 2M Karras' is taken by sampler 'dpmsolver++'"));
    d = kStandIn;
    d.a1111_karras_name = {};
    CHECK(has(refusal(d), "takes_karras and an A1111 Karras name go together"));
    d = kStandIn;
    d.takes_eta = false;
    CHECK(has(refusal(d), "takes_eta and an A1111 eta key go together"));
    d = kStandIn;
    d.name = "stand_in_karras";
    CHECK(has(refusal(d), "ends in _karras"));
    d = kStandIn;
    d.plan = nullptr;
    CHECK(has(refusal(d), "has no plan function"));
    d = kStandIn;
    d.a1111_name = {};
    CHECK(has(refusal(d), "needs a kohya name and an A1111 name"));
    CHECK(diffusion::registered_samplers().size() == listed);
    CHECK(has(error_of([] { diffusion::parse_sampler_name("stand_in"); }), "unknown sampler"));
}
