// What D-Adaptation Adam's ops (ops/optim_dadapt.cpp, cuda/optim_dadapt.cu) share with the code that
// builds them: the layout of the shared state, the options, and the d update both backends compute
// from the same device tensors (in double, as dadaptation computes its scalars).
#pragma once
#include <cmath>

#include "ggml-lite/ops/optim_types.h"
#include "ggml-lite/ops/rng.h"  // GL_HD

namespace gl {

// dstate f32 [kDAdaptStateSize]: initialise d = d0, the rest 0. kDaDlr is the step's d * lr * bias
// correction (with the d before the update), kDaApplied 0 when the step made no progress possible.
enum DAdaptSlot { kDaD = 0, kDaNumerator, kDaDlr, kDaApplied, kDaDHat, kDaSkL1, kDAdaptStateSize = 8 };

struct DAdaptOptions {
    float growth_rate = INFINITY;
    bool decouple = false, use_bias_correction = false;
};

// dadaptation 3.2's DAdaptAdam, between its two loops: num is the step's sum of dlr * dot(g, s / denom),
// sk_l1 the sum of |s| over every param (after their updates); lr the largest group lr, t the 1-based step.
GL_HD void dadapt_adam_update_d(float* ds, double num, double sk_l1, float lr, float b1, float b2, double t,
                                float growth_rate, bool bias_correction) {
    double d = ds[kDaD];
    const double bc = bias_correction ? sqrt(1.0 - pow(double(b2), t)) / (1.0 - pow(double(b1), t)) : 1.0;
    ds[kDaDlr] = float(d * double(lr) * bc);
    const double sqrt_b2 = sqrt(double(b2));
    const double weighted = sqrt_b2 * double(ds[kDaNumerator]) + (1.0 - sqrt_b2) * num;
    if (sk_l1 == 0.0) {  // no progress possible: dadaptation returns before storing anything
        ds[kDaApplied] = 0.0f;
        return;
    }
    double d_hat = d;
    if (lr > 0.0f) {
        d_hat = weighted / ((1.0 - sqrt_b2) * sk_l1);
        const double grown = d * double(growth_rate);
        const double capped = d_hat < grown ? d_hat : grown;
        d = d > capped ? d : capped;
    }
    ds[kDaD] = float(d);
    ds[kDaNumerator] = float(weighted);
    ds[kDaDHat] = float(d_hat);
    ds[kDaSkL1] = float(sk_l1);
    ds[kDaApplied] = 1.0f;
}

// DAdaptLion's per-step constants (f32 where torch applies them to f32 tensors): h is the param's
// group hyper, lead the hyper of the group with the largest lr, ds the dstate before the d update.
struct DaLionConsts {
    double dlr;
    float decay, step, b1, c1, b2, cm, sqrt_b2, cs, gs;
};
GL_HD DaLionConsts dadapt_lion_consts(const float* h, const float* lead, const float* ds) {
    DaLionConsts k;
    k.dlr = double(ds[kDaD]) * double(lead[kLr]);
    const double b1 = h[kBeta1], b2 = h[kBeta2], sqrt_b2 = sqrt(b2);
    k.decay = float(1.0 - k.dlr * double(h[kWeightDecay]));
    k.step = float(-k.dlr);
    k.b1 = h[kBeta1];
    k.c1 = float(1.0 - b1);
    k.b2 = h[kBeta2];
    k.cm = float((1.0 - b2) * k.dlr);
    k.sqrt_b2 = float(sqrt_b2);
    k.cs = float((1.0 - sqrt_b2) * k.dlr);
    k.gs = h[kGradScale];
    return k;
}

}  // namespace gl
