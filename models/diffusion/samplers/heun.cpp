// Heun (diffusers' HeunDiscreteScheduler, Karras et al. 2022's second-order sampler): an Euler
// step to the next sigma, a second model call there, and the step from the saved sample with the
// mean of both slopes; the last step is Euler only, so n steps call the model 2n - 1 times.
// diffusers lays the schedule out doubled ([s0, s1, s1, ..., s_{n-1}, s_{n-1}, 0] and the same
// for the timesteps); x0 is clamped with clip_sample.
#include <algorithm>
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

struct HeunPlan final : SamplerPlan {
    std::vector<double> sigmas;  // doubled, one per model call, then 0
    bool clip_sample = false;
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn&, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> in(n), out(n);
        std::vector<double> saved(n), d_first(n);
        for (size_t k = 0; k < timesteps.size(); k++) {
            const bool first = k % 2 == 0;
            schedule::scale_model_input(x, sigmas[k], in);
            model(in, timesteps[k], out);
            const double sigma = first ? sigmas[k] : sigmas[k - 1];
            const double next = first ? sigmas[k + 1] : sigmas[k];
            // The first call's model input sat at sigma, the second one's at next.
            const double at = first ? sigma : next;
            for (size_t i = 0; i < n; i++) {
                const double xi = x[i];
                double x0 = schedule::x0_of(xi, out[i], at, prediction);
                if (clip_sample) x0 = std::clamp(x0, -1.0, 1.0);
                const double d = (xi - x0) / at;
                double v;
                if (first) {
                    saved[i] = xi;
                    d_first[i] = d;
                    v = xi + d * (next - sigma);
                } else {
                    v = saved[i] + (d_first[i] + d) / 2 * (next - sigma);
                }
                x[i] = float(v);
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    const schedule::SigmaSchedule s = schedule::sigma_schedule(o, n, schedule::KarrasTimesteps::f32);
    auto p = std::make_unique<HeunPlan>();
    p->sigmas = {s.sigmas.front()};
    p->timesteps = {s.timesteps.front()};
    for (size_t i = 1; i < size_t(n); i++) {
        p->sigmas.insert(p->sigmas.end(), 2, s.sigmas[i]);
        p->timesteps.insert(p->timesteps.end(), 2, s.timesteps[i]);
    }
    p->sigmas.push_back(0.0);
    p->init_noise_sigma = schedule::init_noise_sigma(o, p->sigmas);
    p->clip_sample = o.clip_sample;
    p->prediction = o.prediction;
    return p;
}

}  // namespace

constexpr SamplerDef sampler_heun{
    .name = "heun",
    .a1111_name = "Heun",
    .a1111_karras_name = "Heun Karras",
    .takes_karras = true,
    .reads_clip_sample = true,
    .plan = &plan,
};

}  // namespace diffusion
