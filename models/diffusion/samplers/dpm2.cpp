// DPM2 (diffusers' KDPM2DiscreteScheduler, k-diffusion's sample_dpm_2): an Euler step to the
// sigma halfway in log space between this one and the next, a second model call there, and the
// step from the saved sample with that midpoint's slope; the last step is Euler only, so n steps
// call the model 2n - 1 times. The sigmas, the interpolated sigmas and their timesteps are
// interleaved as diffusers lays them out.
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

struct Dpm2Plan final : SamplerPlan {
    // Doubled as diffusers' self.sigmas and self.sigmas_interpol: index k is model call k's.
    std::vector<double> sigmas, sigmas_interpol;
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn&, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> in(n), out(n);
        std::vector<double> saved(n);
        for (size_t k = 0; k < timesteps.size(); k++) {
            const bool first = k % 2 == 0;
            schedule::scale_model_input(x, first ? sigmas[k] : sigmas_interpol[k], in);
            model(in, timesteps[k], out);
            const double sigma = first ? sigmas[k] : sigmas[k - 1];
            const double next = first ? sigmas[k + 1] : sigmas[k];
            const double mid = first ? sigmas_interpol[k + 1] : sigmas_interpol[k];
            // The first call's model input sat at sigma, the second one's at the midpoint.
            const double at = first ? sigma : mid;
            for (size_t i = 0; i < n; i++) {
                const double xi = x[i];
                const double d = (xi - schedule::x0_of(xi, out[i], at, prediction)) / at;
                double v;
                if (first) {
                    saved[i] = xi;
                    v = xi + d * (mid - sigma);
                } else {
                    v = saved[i] + d * (next - sigma);
                }
                x[i] = float(v);
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    // DPM2 rounds the Karras timesteps (and then keeps the interpolated timesteps in float64 too).
    const schedule::SigmaSchedule sched = schedule::sigma_schedule(o, n, schedule::KarrasTimesteps::rounded);
    const std::vector<double>& s = sched.sigmas;
    const std::vector<double>& t = sched.timesteps;
    std::vector<double> interp(s.size());
    for (size_t i = 0; i < s.size(); i++) {
        const double prev = s[(i + s.size() - 1) % s.size()];
        interp[i] = schedule::f32(std::exp(0.5 * (std::log(s[i]) + std::log(prev))));
    }
    auto p = std::make_unique<Dpm2Plan>();
    p->sigmas = {s.front()};
    p->sigmas_interpol = {interp.front()};
    for (size_t i = 1; i < s.size(); i++) {
        p->sigmas.insert(p->sigmas.end(), 2, s[i]);
        p->sigmas_interpol.insert(p->sigmas_interpol.end(), 2, interp[i]);
    }
    p->sigmas.push_back(s.back());
    p->sigmas_interpol.push_back(interp.back());
    const std::vector<double>& log_sigmas = schedule::sd15_tables().log_sigmas;
    p->timesteps = {t.front()};
    for (size_t i = 1; i < size_t(n); i++) {
        const double ti = schedule::sigma_to_t(interp[i], log_sigmas);
        p->timesteps.push_back(o.karras ? ti : schedule::f32(ti));
        p->timesteps.push_back(t[i]);
    }
    p->init_noise_sigma = schedule::init_noise_sigma(o, p->sigmas);
    p->prediction = o.prediction;
    return p;
}

constexpr std::string_view kAliases[] = {"k_dpm_2"};

}  // namespace

constexpr SamplerDef sampler_dpm2{
    .name = "dpm_2",
    .aliases = kAliases,
    .a1111_name = "DPM2",
    .a1111_karras_name = "DPM2 Karras",
    .takes_karras = true,
    .plan = &plan,
};

}  // namespace diffusion
