// DPM++ 2S (diffusers' DPMSolverSinglestepScheduler with its defaults: solver_order 2,
// algorithm dpmsolver++, the midpoint solver; Lu et al. 2022): the steps go in pairs, a first
// order step from the pair's start and a second order step that goes from the same start with
// the data predictions of both calls; an odd last step, and the last pair's second step (the
// schedule ends at sigma 0, where diffusers forces lower_order_final), are first order. The class
// has no timestep_spacing option: its timesteps are always linspace, n + 1 with the last dropped.
#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"
#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

struct DpmSinglePlan final : SamplerPlan {
    std::vector<double> sigmas;  // one per step, then 0
    std::vector<bool> second_order;
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn&, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> out(n), start(n);
        std::vector<double> x0(n), x0_prev(n);
        for (size_t k = 0; k < timesteps.size(); k++) {
            model(x, timesteps[k], out);
            const schedule::VpPoint s0 = schedule::vp_point(sigmas[k]), st = schedule::vp_point(sigmas[k + 1]);
            x0_prev.swap(x0);
            for (size_t i = 0; i < n; i++)
                x0[i] = prediction == Prediction::epsilon ? (double(x[i]) - s0.sigma * out[i]) / s0.alpha
                                                          : s0.alpha * double(x[i]) - s0.sigma * out[i];
            if (!second_order[k]) {
                std::copy(x.begin(), x.end(), start.begin());
                const double h = st.lambda - s0.lambda;
                const double c_x = st.sigma / s0.sigma, c_d0 = -st.alpha * (std::exp(-h) - 1.0);
                for (size_t i = 0; i < n; i++) x[i] = float(c_x * x[i] + c_d0 * x0[i]);
            } else {
                // From the pair's start s1 to t, with this call's point s0 between them.
                const schedule::VpPoint s1 = schedule::vp_point(sigmas[k - 1]);
                const double h = st.lambda - s1.lambda, r0 = (s0.lambda - s1.lambda) / h;
                const double c_x = st.sigma / s1.sigma, c_d0 = -st.alpha * (std::exp(-h) - 1.0);
                for (size_t i = 0; i < n; i++) {
                    const double d1 = (x0[i] - x0_prev[i]) / r0;
                    x[i] = float(c_x * start[i] + c_d0 * x0_prev[i] + 0.5 * c_d0 * d1);
                }
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    GL_CHECK(o.spacing == TimestepSpacing::linspace,
             "sampler dpmsingle: DPMSolverSinglestepScheduler spaces its timesteps by linspace only");
    auto p = std::make_unique<DpmSinglePlan>();
    schedule::SigmaSchedule s = schedule::dpm_solver_schedule(o, n, 0.0);
    p->timesteps = std::move(s.timesteps);
    p->sigmas = std::move(s.sigmas);
    // diffusers' order list with lower_order_final: [1, 2] pairs, the last step first order.
    for (int k = 0; k < n; k++) p->second_order.push_back(k % 2 == 1 && k != n - 1);
    p->prediction = o.prediction;
    return p;
}

}  // namespace

// A1111 lists only the ancestral form ("DPM++ 2S a"); this is the same name without the "a".
constexpr SamplerDef sampler_dpmsingle{
    .name = "dpmsingle",
    .a1111_name = "DPM++ 2S",
    .a1111_karras_name = "DPM++ 2S Karras",
    .takes_karras = true,
    .plan = &plan,
};

}  // namespace diffusion
