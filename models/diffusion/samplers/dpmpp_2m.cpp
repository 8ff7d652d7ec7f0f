// DPM++ 2M (diffusers' DPMSolverMultistepScheduler with solver_order 2, algorithm dpmsolver++, the
// midpoint solver and lower_order_final; Lu et al. 2022): the data prediction of this step and the
// last combined in log-SNR time, first order on the first and the last step. Timesteps n + 1
// spaced with the last dropped; sigmas interpolated at them, or Karras sigmas with rounded
// timesteps.
#include <algorithm>
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

struct DpmppPlan final : SamplerPlan {
    std::vector<double> sigmas;  // one per step, then 0
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn&, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> out(n);
        std::vector<double> x0(n), x0_prev(n);
        // alpha_t = 1 / sqrt(sigma^2 + 1), sigma_t = sigma alpha_t, lambda = log alpha_t - log sigma_t.
        auto alpha_of = [](double s) { return 1 / std::sqrt(s * s + 1); };
        auto lambda_of = [&](double s) { return std::log(alpha_of(s)) - std::log(s * alpha_of(s)); };
        const size_t calls = timesteps.size();
        for (size_t k = 0; k < calls; k++) {
            model(x, timesteps[k], out);
            const double s0 = sigmas[k], st = sigmas[k + 1];
            const double a0 = alpha_of(s0), sig0 = s0 * a0, at = alpha_of(st), sigt = st * at;
            x0_prev.swap(x0);
            for (size_t i = 0; i < n; i++)
                x0[i] = prediction == Prediction::epsilon ? (double(x[i]) - sig0 * out[i]) / a0
                                                          : a0 * double(x[i]) - sig0 * out[i];
            const double h = lambda_of(st) - lambda_of(s0);
            const double c_x = sigt / sig0, c_d0 = -at * (std::exp(-h) - 1.0);
            if (k == 0 || k == calls - 1) {
                for (size_t i = 0; i < n; i++) x[i] = float(c_x * x[i] + c_d0 * x0[i]);
            } else {
                const double h0 = lambda_of(s0) - lambda_of(sigmas[k - 1]);
                const double r0 = h0 / h;
                for (size_t i = 0; i < n; i++) {
                    const double d1 = (x0[i] - x0_prev[i]) / r0;
                    x[i] = float(c_x * x[i] + c_d0 * x0[i] + 0.5 * c_d0 * d1);
                }
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    const schedule::TrainTables& tables = schedule::sd15_tables();
    auto p = std::make_unique<DpmppPlan>();
    std::vector<double>& t = p->timesteps;
    if (o.spacing == TimestepSpacing::leading) {
        t = schedule::leading(n + 1, o.steps_offset);
    } else {
        t = schedule::linspace_descending(n + 1);
        for (double& v : t) v = std::nearbyint(v);
    }
    t.pop_back();
    std::vector<double>& s = p->sigmas;
    if (o.karras) {
        s = schedule::karras_sigmas(tables.sigmas.front(), tables.sigmas.back(), n);
        for (size_t i = 0; i < s.size(); i++) t[i] = std::nearbyint(schedule::sigma_to_t(s[i], tables.log_sigmas));
    } else {
        s.resize(size_t(n));
        for (size_t i = 0; i < s.size(); i++) s[i] = schedule::np_interp(t[i], tables.sigmas);
    }
    s.push_back(0.0);
    for (double& v : s) v = schedule::f32(v);
    schedule::check_first_timestep(o, n, t.front());
    p->prediction = o.prediction;
    return p;
}

}  // namespace

constexpr SamplerDef sampler_dpmpp_2m{
    .name = "dpmsolver++",
    .a1111_name = "DPM++ 2M",
    .a1111_karras_name = "DPM++ 2M Karras",
    .takes_karras = true,
    .plan = &plan,
};

}  // namespace diffusion
