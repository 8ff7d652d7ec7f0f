// DPM-Solver 2M (diffusers' DPMSolverMultistepScheduler with algorithm_type "dpmsolver",
// solver_order 2, the midpoint solver and lower_order_final; Lu et al. 2022): the multistep DPM++
// 2M takes, on the noise prediction instead of the data prediction. diffusers refuses this
// algorithm with its default final_sigmas_type "zero" (kohya's get_my_scheduler passes only the
// algorithm, so its "dpmsolver" raises in diffusers 0.32.1, the version kohya pins); this is the
// class with final_sigmas_type "sigma_min", the one diffusers asks for: the schedule ends at the
// table's smallest sigma, and the last step is first order below 15 steps only.
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

// diffusers' lower_order_final applies below this many steps when the final sigma is not 0.
constexpr size_t kLowerOrderFinalBelow = 15;

struct DpmSolverPlan final : SamplerPlan {
    std::vector<double> sigmas;  // one per step, then the table's smallest sigma
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn&, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> out(n);
        std::vector<double> eps(n), eps_prev(n);
        const size_t calls = timesteps.size();
        for (size_t k = 0; k < calls; k++) {
            model(x, timesteps[k], out);
            const schedule::VpPoint s0 = schedule::vp_point(sigmas[k]), st = schedule::vp_point(sigmas[k + 1]);
            eps_prev.swap(eps);
            for (size_t i = 0; i < n; i++)
                eps[i] = prediction == Prediction::epsilon ? double(out[i]) : s0.alpha * out[i] + s0.sigma * x[i];
            const double h = st.lambda - s0.lambda;
            const double c_x = st.alpha / s0.alpha, c_d0 = -st.sigma * (std::exp(h) - 1.0);
            const bool first_order = k == 0 || (k == calls - 1 && calls < kLowerOrderFinalBelow);
            if (first_order) {
                for (size_t i = 0; i < n; i++) x[i] = float(c_x * x[i] + c_d0 * eps[i]);
            } else {
                const double r0 = (s0.lambda - schedule::vp_point(sigmas[k - 1]).lambda) / h;
                for (size_t i = 0; i < n; i++) {
                    const double d1 = (eps[i] - eps_prev[i]) / r0;
                    x[i] = float(c_x * x[i] + c_d0 * eps[i] + 0.5 * c_d0 * d1);
                }
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    auto p = std::make_unique<DpmSolverPlan>();
    schedule::SigmaSchedule s = schedule::dpm_solver_schedule(o, n, schedule::sd15_tables().sigmas.front());
    p->timesteps = std::move(s.timesteps);
    p->sigmas = std::move(s.sigmas);
    p->prediction = o.prediction;
    return p;
}

}  // namespace

// A1111 has no DPM-Solver (non-++) multistep sampler; named as its list names DPM++ 2M, with the
// "DPM" it gives k-diffusion's other non-++ DPM-Solvers ("DPM fast", "DPM adaptive").
constexpr SamplerDef sampler_dpmsolver{
    .name = "dpmsolver",
    .a1111_name = "DPM 2M",
    .a1111_karras_name = "DPM 2M Karras",
    .takes_karras = true,
    .plan = &plan,
};

}  // namespace diffusion
