// DPM2 ancestral (diffusers' KDPM2AncestralDiscreteScheduler, k-diffusion's
// sample_dpm_2_ancestral): each step splits the move to the next sigma into sigma_down (the
// deterministic part) and sigma_up (fresh noise), takes a DPM2 step to sigma_down (an Euler step
// to the log-space midpoint of sigma and sigma_down, a second model call there, the step from the
// saved sample with that slope) and adds noise times sigma_up. The last step is Euler to 0 alone,
// so n steps call the model 2n - 1 times; the noise is drawn on every call and used by the second
// ones. The sigmas are laid out doubled and the midpoints' timesteps interleaved as diffusers does.
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

struct Dpm2AncestralPlan final : SamplerPlan {
    // Per step j (one per step, then the final 0): sigma, the midpoint, sigma_up and sigma_down.
    std::vector<double> sigmas, mids, ups, downs;
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> in(n), out(n), z(n);
        std::vector<double> saved(n);
        for (size_t k = 0; k < timesteps.size(); k++) {
            const bool first = k % 2 == 0;
            const size_t j = k / 2;
            const double sigma = sigmas[j], mid = mids[j];
            // The first call's model input sits at sigma, the second one's at the midpoint.
            const double at = first ? sigma : mid;
            schedule::scale_model_input(x, at, in);
            model(in, timesteps[k], out);
            noise(z);
            for (size_t i = 0; i < n; i++) {
                const double xi = x[i];
                const double d = (xi - schedule::x0_of(xi, out[i], at, prediction)) / at;
                double v;
                if (first) {
                    saved[i] = xi;
                    v = xi + d * (mid - sigma);
                } else {
                    v = saved[i] + d * (downs[j] - sigma) + double(z[i]) * ups[j];
                }
                x[i] = float(v);
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    // Like DPM2, the Karras timesteps are rounded and the midpoints' kept in float64.
    const schedule::SigmaSchedule sched = schedule::sigma_schedule(o, n, schedule::KarrasTimesteps::rounded);
    const std::vector<double>& s = sched.sigmas;
    auto p = std::make_unique<Dpm2AncestralPlan>();
    p->sigmas = s;
    for (size_t j = 0; j < s.size(); j++) {
        // The final sigma 0 has no step of its own.
        const double next = j + 1 < s.size() ? s[j + 1] : 0.0;
        const double up = next > 0 ? schedule::f32(std::sqrt(next * next * (s[j] * s[j] - next * next) / (s[j] * s[j])))
                                   : 0.0;
        const double down = schedule::f32(std::sqrt(next * next - up * up));
        p->ups.push_back(up);
        p->downs.push_back(down);
        // The midpoint in log space; diffusers zeroes the last two (the final Euler step goes to 0).
        p->mids.push_back(j + 2 < s.size() ? schedule::f32(std::exp(0.5 * (std::log(s[j]) + std::log(down)))) : 0.0);
    }
    const std::vector<double>& log_sigmas = schedule::sd15_tables().log_sigmas;
    p->timesteps = {sched.timesteps.front()};
    for (size_t j = 1; j < size_t(n); j++) {
        const double tm = schedule::sigma_to_t(p->mids[j - 1], log_sigmas);
        p->timesteps.push_back(o.karras ? tm : schedule::f32(tm));
        p->timesteps.push_back(sched.timesteps[j]);
    }
    p->init_noise_sigma = schedule::init_noise_sigma(o, p->sigmas);
    p->prediction = o.prediction;
    p->draws_noise = true;
    return p;
}

constexpr std::string_view kAliases[] = {"k_dpm_2_a"};

}  // namespace

constexpr SamplerDef sampler_dpm2_ancestral{
    .name = "dpm_2_a",
    .aliases = kAliases,
    .a1111_name = "DPM2 a",
    .a1111_karras_name = "DPM2 a Karras",
    .takes_karras = true,
    .plan = &plan,
};

}  // namespace diffusion
