// DDIM (diffusers' DDIMScheduler, Song et al. 2020): eta 0 is deterministic, eta > 0 adds fresh
// noise of eta times the DDPM posterior's deviation every step. Timesteps on the discrete training
// schedule, "leading" by default (as the class's default config); x0 clamped with clip_sample.
#include <algorithm>
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

struct DdimPlan final : SamplerPlan {
    int stride = 0;         // training steps between two inference steps
    double final_ac = 1.0;  // alphas_cumprod of the step past t = 0
    double eta = 0.0;
    bool clip_sample = false;
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn& noise, const StepFn& on_step) const override {
        const std::vector<double>& ac = schedule::sd15_tables().alphas_cumprod;
        const size_t n = x.size();
        std::vector<float> out(n), z(eta > 0 ? n : 0);
        for (size_t k = 0; k < timesteps.size(); k++) {
            const int t = int(timesteps[k]), prev = t - stride;
            model(x, double(t), out);
            const double a = ac[size_t(t)], a_prev = prev >= 0 ? ac[size_t(prev)] : final_ac;
            const double sa = std::sqrt(a), sb = std::sqrt(1 - a);
            const double variance = (1 - a_prev) / (1 - a) * (1 - a / a_prev);
            const double std_dev = eta * std::sqrt(variance);
            const double dir = std::sqrt(1 - a_prev - std_dev * std_dev), sa_prev = std::sqrt(a_prev);
            if (eta > 0) noise(z);
            for (size_t i = 0; i < n; i++) {
                const double xi = x[i], oi = out[i];
                double x0, eps;
                if (prediction == Prediction::epsilon) x0 = (xi - sb * oi) / sa, eps = oi;
                else x0 = sa * xi - sb * oi, eps = sa * oi + sb * xi;
                if (clip_sample) x0 = std::clamp(x0, -1.0, 1.0);
                double v = sa_prev * x0 + dir * eps;
                if (eta > 0) v += std_dev * double(z[i]);
                x[i] = float(v);
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    auto p = std::make_unique<DdimPlan>();
    p->timesteps = schedule::discrete_timesteps(o, n);
    p->stride = schedule::kTrainSteps / n;
    p->final_ac = o.set_alpha_to_one ? 1.0 : schedule::sd15_tables().alphas_cumprod.front();
    p->eta = o.eta;
    p->clip_sample = o.clip_sample;
    p->prediction = o.prediction;
    p->draws_noise = o.eta > 0;
    return p;
}

}  // namespace

constexpr SamplerDef sampler_ddim{
    .name = "ddim",
    .a1111_name = "DDIM",
    .a1111_eta_key = "Eta DDIM",
    .takes_eta = true,
    .reads_clip_sample = true,
    .spacing = TimestepSpacing::leading,
    .plan = &plan,
};

}  // namespace diffusion
