// Euler and Euler ancestral (diffusers' EulerDiscreteScheduler and EulerAncestralDiscreteScheduler):
// one model call and one first-order step x += (x - x0) / sigma * (next - sigma) per step on the
// interpolated sigma schedule. The ancestral sampler steps down to sigma_down instead and adds
// fresh noise of sigma_up every step; diffusers offers Karras sigmas for Euler only.
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

struct EulerPlan final : SamplerPlan {
    std::vector<double> sigmas;  // one per step, then 0
    bool ancestral = false;
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> in(n), out(n), z(ancestral ? n : 0);
        for (size_t k = 0; k < timesteps.size(); k++) {
            const double sigma = sigmas[k], next = sigmas[k + 1];
            schedule::scale_model_input(x, sigma, in);
            model(in, timesteps[k], out);
            double to = next, up = 0;
            if (ancestral) {
                up = std::sqrt(next * next * (sigma * sigma - next * next) / (sigma * sigma));
                to = std::sqrt(next * next - up * up);
                noise(z);
            }
            for (size_t i = 0; i < n; i++) {
                const double xi = x[i];
                const double d = (xi - schedule::x0_of(xi, out[i], sigma, prediction)) / sigma;
                x[i] = float(xi + d * (to - sigma) + (ancestral ? double(z[i]) * up : 0.0));
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan_of(const SamplerOptions& o, int n, bool ancestral) {
    auto p = std::make_unique<EulerPlan>();
    schedule::SigmaSchedule s = schedule::sigma_schedule(o, n, schedule::KarrasTimesteps::f32);
    p->timesteps = std::move(s.timesteps);
    p->sigmas = std::move(s.sigmas);
    p->init_noise_sigma = schedule::init_noise_sigma(o, p->sigmas);
    p->ancestral = ancestral;
    p->prediction = o.prediction;
    p->draws_noise = ancestral;
    return p;
}

std::unique_ptr<const SamplerPlan> euler_plan(const SamplerOptions& o, int n) { return plan_of(o, n, false); }
std::unique_ptr<const SamplerPlan> ancestral_plan(const SamplerOptions& o, int n) { return plan_of(o, n, true); }

constexpr std::string_view kEulerAliases[] = {"k_euler"};
constexpr std::string_view kAncestralAliases[] = {"k_euler_a"};

}  // namespace

constexpr SamplerDef sampler_euler{
    .name = "euler",
    .aliases = kEulerAliases,
    .a1111_name = "Euler",
    .a1111_karras_name = "Euler Karras",
    .takes_karras = true,
    .plan = &euler_plan,
};

constexpr SamplerDef sampler_euler_ancestral{
    .name = "euler_a",
    .aliases = kAncestralAliases,
    .a1111_name = "Euler a",
    .plan = &ancestral_plan,
};

}  // namespace diffusion
