// DDPM (diffusers' DDPMScheduler, Ho et al. 2020, variance "fixed_small"): each step draws x_prev
// from the posterior q(x_prev | x_t, x0) with x0 predicted by the model (clamped with
// clip_sample, which the class has on by default), the posterior's variance between this
// timestep and the next one of the schedule; no noise is added at t = 0. kohya offers it only
// through a prompt's --ss (its --sample_sampler choices leave it out: DDPM wants hundreds of steps).
#include <algorithm>
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

struct DdpmPlan final : SamplerPlan {
    bool clip_sample = false;
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const override {
        const std::vector<double>& ac = schedule::sd15_tables().alphas_cumprod;
        const size_t n = x.size();
        std::vector<float> out(n), z(n);
        for (size_t k = 0; k < timesteps.size(); k++) {
            const int t = int(timesteps[k]);
            const int prev = k + 1 < timesteps.size() ? int(timesteps[k + 1]) : -1;
            model(x, double(t), out);
            // The noise of every call is drawn (the plan's contract) and used where t > 0.
            noise(z);
            const double a = ac[size_t(t)], a_prev = prev >= 0 ? ac[size_t(prev)] : 1.0;
            const double b = 1 - a, b_prev = 1 - a_prev;
            const double alpha = a / a_prev, beta = 1 - alpha;
            const double c_x0 = std::sqrt(a_prev) * beta / b, c_x = std::sqrt(alpha) * b_prev / b;
            // diffusers clamps the variance at 1e-20 (so the step to t = -1 keeps a trace of it).
            const double std_dev = t > 0 ? std::sqrt(std::max(b_prev / b * beta, 1e-20)) : 0.0;
            for (size_t i = 0; i < n; i++) {
                const double xi = x[i], oi = out[i];
                double x0 = prediction == Prediction::epsilon ? (xi - std::sqrt(b) * oi) / std::sqrt(a)
                                                              : std::sqrt(a) * xi - std::sqrt(b) * oi;
                if (clip_sample) x0 = std::clamp(x0, -1.0, 1.0);
                x[i] = float(c_x0 * x0 + c_x * xi + std_dev * double(z[i]));
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    auto p = std::make_unique<DdpmPlan>();
    p->timesteps = schedule::discrete_timesteps(o, n);
    p->clip_sample = o.clip_sample;
    p->prediction = o.prediction;
    p->draws_noise = true;
    return p;
}

}  // namespace

// A1111 has no DDPM sampler; its list would show it by the scheduler's name, as it shows DDIM.
constexpr SamplerDef sampler_ddpm{
    .name = "ddpm",
    .a1111_name = "DDPM",
    .reads_clip_sample = true,
    .spacing = TimestepSpacing::leading,
    .plan = &plan,
};

}  // namespace diffusion
