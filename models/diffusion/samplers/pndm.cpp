// PNDM (diffusers' PNDMScheduler, Liu et al. 2022): pseudo linear multistep (PLMS) steps on the
// discrete training schedule, each a DDIM-like transfer x_t -> x_prev driven by a combination of
// the last model outputs (Adams-Bashforth weights 1, 3/2, 23/12, 55/24). With skip_prk_steps (SD's
// scheduler_config.json, what A1111 calls PLMS) the first step is redone with the mean of its
// own and the next call's output (n + 1 calls); without it (the class's default, kohya's) the
// last four timesteps are walked first by twelve Runge-Kutta calls (three pseudo RK4 steps of
// half steps), then n - 3 PLMS calls follow: n + 9 calls, and the class needs 4 steps at least.
#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"
#include "models/diffusion/sampler.h"
#include "models/diffusion/samplers/schedule_math.h"

namespace diffusion {

namespace {

constexpr int kPrkCalls = 12;

struct PndmPlan final : SamplerPlan {
    // Per model call: the timesteps whose alphas_cumprod the transfer goes from and to (to < 0:
    // the final alpha).
    std::vector<int> from, to;
    int prk_calls = 0;
    double final_ac = 1.0;
    Prediction prediction = Prediction::epsilon;

    // diffusers' _get_prev_sample: x_prev from x at `t` and the noise estimate e (or v).
    void transfer(std::span<const float> base, int t, int prev, std::span<const double> e, std::span<float> x) const {
        const std::vector<double>& ac = schedule::sd15_tables().alphas_cumprod;
        const double a = ac[size_t(t)], a_prev = prev >= 0 ? ac[size_t(prev)] : final_ac;
        const double b = 1 - a, b_prev = 1 - a_prev;
        const double sample_coeff = std::sqrt(a_prev / a);
        const double denom = a * std::sqrt(b_prev) + std::sqrt(a * b * a_prev);
        for (size_t i = 0; i < x.size(); i++) {
            const double xi = base[i];
            const double eps = prediction == Prediction::epsilon ? e[i] : std::sqrt(a) * e[i] + std::sqrt(b) * xi;
            x[i] = float(sample_coeff * xi - (a_prev - a) * eps / denom);
        }
    }

    void run(std::span<float> x, const ModelFn& model, const NoiseFn&, const StepFn& on_step) const override {
        const size_t n = x.size();
        std::vector<float> out(n), saved(n);
        std::vector<double> e(n), rk_sum(n);
        std::vector<std::vector<float>> ets;  // the outputs the multistep combines, oldest first (at most 4)
        for (size_t k = 0; k < timesteps.size(); k++) {
            model(x, timesteps[k], out);
            std::span<const float> base = x;
            if (int(k) < prk_calls) {
                // Runge-Kutta: the four calls of a step weigh 1/6, 1/3, 1/3, 1/6, each transfer from
                // the step's start; the first call's output also seeds the multistep history.
                const size_t phase = k % 4;
                if (phase == 0) {
                    std::copy(x.begin(), x.end(), saved.begin());
                    ets.emplace_back(out.begin(), out.end());
                }
                for (size_t i = 0; i < n; i++) {
                    const double w = phase == 0 || phase == 3 ? 1.0 / 6 : 1.0 / 3;
                    rk_sum[i] = phase == 0 ? w * out[i] : rk_sum[i] + w * out[i];
                    e[i] = phase == 3 ? rk_sum[i] : double(out[i]);
                }
                base = saved;
            } else {
                // The second PLMS call (without RK) redoes the first step with the mean output and
                // is not kept in the history.
                const bool redo = k == 1;
                if (!redo) {
                    if (ets.size() == 4) ets.erase(ets.begin());
                    ets.emplace_back(out.begin(), out.end());
                }
                const size_t m = ets.size();
                for (size_t i = 0; i < n; i++) {
                    auto h = [&](size_t back) { return double(ets[m - 1 - back][i]); };
                    if (redo) e[i] = (double(out[i]) + h(0)) / 2;
                    else if (m == 1) e[i] = h(0);
                    else if (m == 2) e[i] = (3 * h(0) - h(1)) / 2;
                    else if (m == 3) e[i] = (23 * h(0) - 16 * h(1) + 5 * h(2)) / 12;
                    else e[i] = (55 * h(0) - 59 * h(1) + 37 * h(2) - 9 * h(3)) / 24;
                }
                if (k == 0) std::copy(x.begin(), x.end(), saved.begin());
                if (redo) base = saved;
            }
            transfer(base, from[k], to[k], e, x);
            if (on_step) on_step(int(k), x);
        }
    }
};

std::unique_ptr<const SamplerPlan> plan(const SamplerOptions& o, int n) {
    GL_CHECK(o.skip_prk_steps || n >= 4, "sampler pndm: ", n, " steps with the Runge-Kutta warm-up (skip_prk_steps "
             "off, PNDMScheduler's default, kohya's) need 4 steps at least");
    std::vector<int> asc;
    for (double t : schedule::discrete_timesteps(o, n)) asc.insert(asc.begin(), int(t));
    const int ratio = schedule::kTrainSteps / n;
    auto p = std::make_unique<PndmPlan>();
    std::vector<int> calls;
    if (!o.skip_prk_steps) {
        // The last four timesteps and their half steps, newest first, each inner point twice.
        std::vector<int> v;
        for (size_t i = asc.size() - 4; i < asc.size(); i++) v.insert(v.end(), {asc[i], asc[i] + ratio / 2});
        v.pop_back();
        for (size_t i = v.size(); i-- > 0;) calls.insert(calls.end(), i == 0 || i == v.size() - 1 ? 1 : 2, v[i]);
        for (int k = 0; k < kPrkCalls; k++) {
            p->from.push_back(calls[size_t(k / 4 * 4)]);
            p->to.push_back(calls[size_t(k)] - (k % 2 ? 0 : ratio / 2));
        }
        p->prk_calls = kPrkCalls;
        for (size_t i = asc.size() - 3; i-- > 0;) calls.push_back(asc[i]);
    } else {
        calls.assign(asc.rbegin(), asc.rend());
        if (n >= 2) calls.insert(calls.begin() + 2, asc[asc.size() - 2]);
    }
    for (size_t k = size_t(p->prk_calls); k < calls.size(); k++) {
        const bool redo = k == 1;
        p->from.push_back(redo ? calls[k] + ratio : calls[k]);
        p->to.push_back(redo ? calls[k] : calls[k] - ratio);
    }
    p->timesteps.assign(calls.begin(), calls.end());
    p->final_ac = o.set_alpha_to_one ? 1.0 : schedule::sd15_tables().alphas_cumprod.front();
    p->prediction = o.prediction;
    return p;
}

}  // namespace

constexpr SamplerDef sampler_pndm{
    .name = "pndm",
    .a1111_name = "PLMS",
    .spacing = TimestepSpacing::leading,
    .set_alpha_to_one_default = false,
    .plan = &plan,
};

}  // namespace diffusion
