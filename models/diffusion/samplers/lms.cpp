// LMS (diffusers' LMSDiscreteScheduler, k-diffusion's sample_lms): a linear multistep method of
// order 4 on the probability-flow ODE dx/dsigma = (x - x0) / sigma over the interpolated sigma
// schedule (or Karras sigmas, whose fractional timesteps it keeps in float64). Each step adds the
// last derivatives weighted by the integrals from this sigma to the next of the Lagrange basis
// polynomials through the last sigmas; the order grows 1, 2, 3, 4 over the first steps. diffusers
// integrates with scipy.integrate.quad; the integrands are polynomials of degree <= 3, integrated
// here exactly (schedule::lagrange_basis_integral).
#include <algorithm>
#include <cmath>

#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

constexpr size_t kOrder = 4;

struct LmsPlan final : SamplerPlan {
    std::vector<double> sigmas;               // one per step, then 0
    std::vector<std::vector<double>> coeffs;  // per step: the weights of its derivatives, newest first
    Prediction prediction = Prediction::epsilon;

    void run(std::span<float> x, const ModelFn& model, const NoiseFn&, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> in(n), out(n);
        std::vector<std::vector<double>> derivatives;  // the last kOrder, oldest first
        for (size_t k = 0; k < timesteps.size(); k++) {
            const double sigma = sigmas[k];
            schedule::scale_model_input(x, sigma, in);
            model(in, timesteps[k], out);
            if (derivatives.size() == kOrder) derivatives.erase(derivatives.begin());
            std::vector<double>& d = derivatives.emplace_back(n);
            for (size_t i = 0; i < n; i++) d[i] = (x[i] - schedule::x0_of(x[i], out[i], sigma, prediction)) / sigma;
            const std::vector<double>& c = coeffs[k];
            for (size_t i = 0; i < n; i++) {
                double v = x[i];
                for (size_t j = 0; j < c.size(); j++) v += c[j] * derivatives[derivatives.size() - 1 - j][i];
                x[i] = float(v);
            }
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    schedule::SigmaSchedule s = schedule::sigma_schedule(o, n, schedule::KarrasTimesteps::f64);
    auto p = std::make_unique<LmsPlan>();
    p->timesteps = std::move(s.timesteps);
    p->sigmas = std::move(s.sigmas);
    for (size_t k = 0; k < size_t(n); k++) {
        // The nodes are this step's sigma and those before it, newest first.
        const size_t order = std::min(k + 1, kOrder);
        std::vector<double> nodes(order);
        for (size_t j = 0; j < order; j++) nodes[j] = p->sigmas[k - j];
        std::vector<double>& c = p->coeffs.emplace_back(order);
        for (size_t j = 0; j < order; j++)
            c[j] = schedule::lagrange_basis_integral(nodes, j, p->sigmas[k], p->sigmas[k + 1]);
    }
    p->init_noise_sigma = schedule::init_noise_sigma(o, p->sigmas);
    p->prediction = o.prediction;
    return p;
}

constexpr std::string_view kAliases[] = {"k_lms"};

}  // namespace

constexpr SamplerDef sampler_lms{
    .name = "lms",
    .aliases = kAliases,
    .a1111_name = "LMS",
    .a1111_karras_name = "LMS Karras",
    .takes_karras = true,
    .plan = &plan,
};

}  // namespace diffusion
