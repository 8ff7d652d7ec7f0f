// What the schedule-free ops (ops/optim_schedulefree.cpp, cuda/optim_schedulefree.cu) share with the
// code that builds them: the layout of a parameter group's state and the per-step scalars, computed
// on both backends from the same device tensors, in double as schedulefree 1.4 computes them in
// Python floats.
#pragma once
#include <cmath>

#include "ggml-lite/ops/optim_types.h"
#include "ggml-lite/ops/rng.h"  // GL_HD

namespace gl {

// sfstate f32 [kSfStateSize], one per parameter group: the weight sum (hi + lo, so it keeps a
// double's precision as the Python float it mirrors), lr_max (-1 at first, as schedulefree's), and the
// last applied step's ckp1 (the weight of the newest point in the average). Initialise {0, 0, -1, 0}.
enum SfSlot { kSfWeightSumHi = 0, kSfWeightSumLo, kSfLrMax, kSfCkp1, kSfStateSize = 4 };

// schedulefree's arguments that shape the average; adam: AdamWScheduleFree (else SGDScheduleFree);
// radam (with adam): RAdamScheduleFree, whose lr is rectified (radam_rect) and whose step is SGD's
// while the rectification is undefined (rho_t <= 4); it has no warm-up.
struct ScheduleFreeOptions {
    bool adam = true, radam = false, silent_sgd_phase = true;
    float r = 0.0f, weight_lr_power = 2.0f, warmup_steps = 0.0f;
};

// RAdamScheduleFree's rectification of step `step` (1-based): sqrt((rho_t - 4)(rho_t - 2) rho_inf /
// ((rho_inf - 4)(rho_inf - 2) rho_t)) when rho_t > 4 (adaptive: the step divides by sqrt(v)), else 0
// with silent_sgd_phase (1 without), as schedulefree 1.4 computes it in Python floats.
GL_HD double radam_rect(float beta2, double step, bool silent_sgd_phase, bool* adaptive) {
    const double b2 = beta2, b2t = pow(b2, step), bc2 = 1.0 - b2t;
    const double rho_inf = 2.0 / (1.0 - b2) - 1.0, rho_t = rho_inf - 2.0 * step * b2t / bc2;
    *adaptive = rho_t > 4.0;
    if (!*adaptive) return silent_sgd_phase ? 0.0 : 1.0;
    return sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t));
}

struct SfScalars {
    double lr;          // the step's lr after the warm-up
    double lr_max;      // the largest so far
    double weight_sum;  // including this step's weight
    double ckp1;        // this step's weight / weight_sum (0 when the sum is 0, as schedulefree's)
};

// One group's scalars of the step hyper[kStep] (1-based: schedulefree's k + 1); lr_factor multiplies
// the lr (RAdamScheduleFree's radam_rect, else 1).
GL_HD SfScalars schedulefree_scalars(const float* sf, const float* h, float r, float weight_lr_power, float warmup,
                                     double lr_factor = 1.0) {
    const double k = double(h[kStep]) - 1.0;
    const double sched = k < double(warmup) ? (k + 1.0) / double(warmup) : 1.0;
    SfScalars s;
    s.lr = double(h[kLr]) * sched * lr_factor;
    s.lr_max = s.lr > double(sf[kSfLrMax]) ? s.lr : double(sf[kSfLrMax]);
    const double weight = pow(k + 1.0, double(r)) * pow(s.lr_max, double(weight_lr_power));
    s.weight_sum = double(sf[kSfWeightSumHi]) + double(sf[kSfWeightSumLo]) + weight;
    s.ckp1 = s.weight_sum == 0.0 ? 0.0 : weight / s.weight_sum;
    return s;
}

GL_HD void schedulefree_store(float* sf, const SfScalars& s) {
    sf[kSfWeightSumHi] = float(s.weight_sum);
    sf[kSfWeightSumLo] = float(s.weight_sum - double(float(s.weight_sum)));
    sf[kSfLrMax] = float(s.lr_max);
    sf[kSfCkp1] = float(s.ckp1);
}

// torch.lerp's formula (start + w (end - start), or end - (end - start)(1 - w) for |w| >= 0.5), in f32
// (the CUDA kernels spell it with round-to-nearest intrinsics).
inline float torch_lerp(float start, float end, float w) {
    const float d = end - start;
    return fabsf(w) < 0.5f ? start + w * d : end - d * (1.0f - w);
}

}  // namespace gl
