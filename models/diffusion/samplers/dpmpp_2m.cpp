// DPM++ 2M (diffusers' DPMSolverMultistepScheduler with solver_order 2, algorithm dpmsolver++, the
// midpoint solver and lower_order_final; Lu et al. 2022): the data prediction of this step and the
// last combined in log-SNR time, first order on the first and the last step, on DPM-Solver's
// schedule (schedule::dpm_solver_schedule) ending at sigma 0.
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
        const size_t calls = timesteps.size();
        for (size_t k = 0; k < calls; k++) {
            model(x, timesteps[k], out);
            const schedule::VpPoint s0 = schedule::vp_point(sigmas[k]), st = schedule::vp_point(sigmas[k + 1]);
            const double a0 = s0.alpha, sig0 = s0.sigma, at = st.alpha, sigt = st.sigma;
            x0_prev.swap(x0);
            for (size_t i = 0; i < n; i++)
                x0[i] = prediction == Prediction::epsilon ? (double(x[i]) - sig0 * out[i]) / a0
                                                          : a0 * double(x[i]) - sig0 * out[i];
            const double h = st.lambda - s0.lambda;
            const double c_x = sigt / sig0, c_d0 = -at * (std::exp(-h) - 1.0);
            if (k == 0 || k == calls - 1) {
                for (size_t i = 0; i < n; i++) x[i] = float(c_x * x[i] + c_d0 * x0[i]);
            } else {
                const double h0 = s0.lambda - schedule::vp_point(sigmas[k - 1]).lambda;
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
    auto p = std::make_unique<DpmppPlan>();
    schedule::SigmaSchedule s = schedule::dpm_solver_schedule(o, n, 0.0);
    p->timesteps = std::move(s.timesteps);
    p->sigmas = std::move(s.sigmas);
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
