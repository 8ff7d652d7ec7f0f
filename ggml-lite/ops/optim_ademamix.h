// AdEMAMix (Pagliardini et al. 2024) as bitsandbytes' AdEMAMix / AdEMAMix8bit kernels compute it: what
// the ops (ops/optim_ademamix.cpp; CUDA: cuda/optim_ademamix.cu for fp32 state, cuda/adam8bit.cu for
// 8-bit) share, the per-step constants with the alpha and beta3 warm-ups (computed in double from the
// hyper's step on both backends, as bitsandbytes' AdEMAMix.update_step computes them in Python) and
// the element update.
//   m1 = b1 m1 + (1 - b1) g, m2 = b3 m2 + (1 - b3) g, nu = b2 nu + (1 - b2) g^2
//   p -= lr (m1 / c1 + alpha m2) / (sqrt(nu) / c2 + eps), c1 = 1 - b1^t, c2 = sqrt(1 - b2^t)
//   then p *= 1 - lr wd when wd > 0
// with t_alpha: alpha_t = min(t alpha / t_alpha, alpha); with t_beta3: beta3_t = min(exp(ln b1 ln b3 /
// ((1 - t / t_beta3) ln b3 + t / t_beta3 ln b1)), b3).
#pragma once
#include <cmath>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "ggml-lite/ops/optim_types.h"
#include "ggml-lite/ops/rng.h"  // GL_HD

namespace gl {

// bitsandbytes' AdEMAMix arguments beyond the hyper's (lr, betas[0..1], eps, weight_decay): t_alpha,
// t_beta3 0 for None.
struct AdemamixOptions {
    float alpha = 5.0f, beta3 = 0.9999f, t_alpha = 0.0f, t_beta3 = 0.0f;
};

// ---- builder calls. hyper: lr, beta1, beta2, eps, weight_decay, step (1-based, bias corrections
// and warm-ups), grad_scale; gstat optional ----
// fp32 state (bitsandbytes' 32-bit kernel, tensors under min_8bit_size).
void ademamix_step(Graph& g, ValueId param, ValueId grad, ValueId m1, ValueId m2, ValueId nu, ValueId hyper,
                   const AdemamixOptions& o, ValueId gstat = kNoValue);
// Block-wise 8-bit state, the N tensors of a group in one node: m1, m2 u8 codes of the signed map,
// nu of the unsigned one; absmax_* f32 [ceil(n / 256)] each.
void ademamix8bit_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                       const std::vector<ValueId>& m1, const std::vector<ValueId>& m2, const std::vector<ValueId>& nu,
                       const std::vector<ValueId>& absmax_m1, const std::vector<ValueId>& absmax_m2,
                       const std::vector<ValueId>& absmax_nu, ValueId hyper, const AdemamixOptions& o,
                       ValueId gstat = kNoValue);

// The op's Params f: alpha, beta3, t_alpha, t_beta3 (0: None).
struct AdemamixConsts {
    float lr, b1, b2, b3, alpha, eps, gs, c1m, c2m, c3m, corr1, corr2, decay;
    bool decays;
};

GL_HD AdemamixConsts ademamix_consts(const float* h, const float* f) {
    AdemamixConsts k;
    const double t = h[kStep];
    k.lr = h[kLr];
    k.b1 = h[kBeta1];
    k.b2 = h[kBeta2];
    k.eps = h[kEps];
    k.gs = h[kGradScale];
    double alpha = f[0], b3 = f[1];
    if (f[2] > 0.0f) alpha = fmin(t * alpha / double(f[2]), alpha);
    if (f[3] > 0.0f) {
        const double ln1 = log(double(k.b1)), ln3 = log(b3), s = t / double(f[3]);
#ifdef __CUDA_ARCH__  // no FMA contraction: the CPU's doubles
        const double den = __dadd_rn(__dmul_rn(1.0 - s, ln3), __dmul_rn(s, ln1));
        b3 = fmin(exp(__dmul_rn(ln1, ln3) / den), b3);
#else
        b3 = fmin(exp((ln1 * ln3) / ((1.0 - s) * ln3 + s * ln1)), b3);
#endif
    }
    k.alpha = float(alpha);
    k.b3 = float(b3);
    k.c1m = 1.0f - k.b1;
    k.c2m = 1.0f - k.b2;
    k.c3m = 1.0f - k.b3;
    k.corr1 = float(1.0 - pow(double(k.b1), t));
    k.corr2 = float(sqrt(1.0 - pow(double(k.b2), t)));
    const float wd = h[kWeightDecay];
    k.decays = wd > 0.0f;
#ifdef __CUDA_ARCH__
    k.decay = __fsub_rn(1.0f, __fmul_rn(k.lr, wd));
#else
    k.decay = 1.0f - k.lr * wd;
#endif
    return k;
}

// The moments' update for gradient gi (bitsandbytes' order of operations; f32, no contraction).
GL_HD void ademamix_moments(const AdemamixConsts& k, float gi, float& m1, float& m2, float& nu) {
#ifdef __CUDA_ARCH__
    m1 = __fadd_rn(__fmul_rn(m1, k.b1), __fmul_rn(k.c1m, gi));
    m2 = __fadd_rn(__fmul_rn(m2, k.b3), __fmul_rn(k.c3m, gi));
    nu = __fadd_rn(__fmul_rn(nu, k.b2), __fmul_rn(__fmul_rn(k.c2m, gi), gi));
#else
    m1 = m1 * k.b1 + k.c1m * gi;
    m2 = m2 * k.b3 + k.c3m * gi;
    nu = nu * k.b2 + (k.c2m * gi) * gi;
#endif
}

// The parameter after its step from the updated moments.
GL_HD float ademamix_param(const AdemamixConsts& k, float p, float m1, float m2, float nu) {
#ifdef __CUDA_ARCH__
    const float num = __fadd_rn(__fdiv_rn(m1, k.corr1), __fmul_rn(k.alpha, m2));
    const float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(nu), k.corr2), k.eps);
    p = __fsub_rn(p, __fmul_rn(k.lr, __fdiv_rn(num, den)));
    return k.decays ? __fmul_rn(p, k.decay) : p;
#else
    p = p - k.lr * ((m1 / k.corr1 + k.alpha * m2) / (std::sqrt(nu) / k.corr2 + k.eps));
    return k.decays ? p * k.decay : p;
#endif
}

}  // namespace gl
