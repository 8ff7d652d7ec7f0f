// Per-step scalar formulas of the optimizer ops, shared by the CPU reference and the CUDA kernels
// so both backends derive the same constants from the same device tensors (hyper, gstat, pstate).
// Scalars are computed in double, as the Python references compute them.
#pragma once
#include <cmath>

#include "ggml-lite/ops/rng.h"  // GL_HD

namespace gl {

// gstat from the fixed-order sum of squares of the raw (loss-scaled) gradients. The clip factor is
// torch's clip_grad_norm_: max_norm / (norm + 1e-6), clamped to 1, on the unscaled norm.
GL_HD void gstat_finish(double sumsq, float loss_scale, float max_norm, float* out) {
    const bool bad = !(sumsq <= 1.7976931348623157e308);  // inf or NaN
    const float norm = float(sqrt(sumsq) / double(loss_scale));
    const float inv = float(1.0 / double(loss_scale));
    float coef = 1.0f;
    if (max_norm > 0.0f) {
        const float c = max_norm / (norm + 1e-6f);
        coef = c < 1.0f ? c : 1.0f;
    }
    out[0] = bad ? 0.0f : coef * inv;  // kGsMul
    out[1] = bad ? 1.0f : 0.0f;        // kGsNonfinite
    out[2] = norm;                     // kGsNorm
    out[3] = loss_scale;               // kGsLossScale
}

// Adafactor's learning rate of one step (transformers' _get_lr): t is the 1-based step, rms_p the
// parameter's RMS before the update.
GL_HD float adafactor_lr(float lr, double t, double rms_p, bool relative_step, bool scale_parameter, bool warmup_init,
                         float eps2) {
    double rel = lr;
    if (relative_step) {
        const double min_step = warmup_init ? 1e-6 * t : 1e-2;
        const double inv_sqrt = 1.0 / sqrt(t);
        rel = min_step < inv_sqrt ? min_step : inv_sqrt;
    }
    double scale = 1.0;
    if (scale_parameter) scale = double(eps2) > rms_p ? double(eps2) : rms_p;
    return float(scale * rel);
}

// beta2_t = 1 - t^decay_rate.
GL_HD float adafactor_beta2t(double t, float decay_rate) { return float(1.0 - pow(t, double(decay_rate))); }

// Prodigy's dlr = d * lr * bias_correction for the 1-based step t.
GL_HD double prodigy_dlr(double d, float lr, float b1, float b2, double t, bool bias_correction) {
    const double bc = bias_correction ? sqrt(1.0 - pow(double(b2), t)) / (1.0 - pow(double(b1), t)) : 1.0;
    return d * double(lr) * bc;
}

// Prodigy's d update from the step's sums (prodigyopt 1.1 step(), between its two loops). ps holds
// pstate (ProdigySlot order); dot and sabs are the sums over all params of dot(g, p0 - p) and |s|.
GL_HD void prodigy_update_d(float* ps, double dot, double sabs, float lr, float b1, float b2, double t, float beta3,
                            float d0, float d_coef, float growth_rate, bool bias_correction) {
    double d = ps[0], d_max = ps[1];
    const double dlr = prodigy_dlr(d, lr, b1, b2, t, bias_correction);
    const double num = double(beta3) * double(ps[2]) + (d / double(d0)) * dlr * dot;
    ps[5] = float(dlr);
    if (sabs == 0.0) {  // no progress possible: prodigyopt returns before touching d or the params
        ps[6] = 0.0f;
        return;
    }
    double d_hat = d;
    if (lr > 0.0f) {
        d_hat = double(d_coef) * num / sabs;
        if (float(d) == d0) d = d > d_hat ? d : d_hat;
        d_max = d_max > d_hat ? d_max : d_hat;
        const double grown = d * double(growth_rate);
        d = d_max < grown ? d_max : grown;
    }
    ps[0] = float(d);
    ps[1] = float(d_max);
    ps[2] = float(num);
    ps[3] = float(sabs);
    ps[4] = float(d_hat);
    ps[6] = 1.0f;
}

}  // namespace gl
