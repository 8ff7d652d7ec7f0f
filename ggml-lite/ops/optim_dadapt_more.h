// D-Adaptation SGD, AdaGrad and Adan (dadaptation 3.2's DAdaptSGD, DAdaptAdaGrad, DAdaptAdan) and the
// experimental module's DAdaptAdamPreprint and DAdaptAdanIP as in-place ops (ops/optim_dadapt_more.cpp,
// cuda/optim_dadapt_more.cu), and what they share with the
// code that builds them: the shared state, the d rules (computed in double by both backends from the
// same device tensors), and the builder calls.
//
// One step over all params is <rule>_accum for every param (in node order), ONE dadapt_sum_d, then
// <rule>_step for every param. dadaptation keeps its running scalars in Python floats (double); the
// shared state keeps each as a pair of f32 (hi + lo), so nothing is rounded to f32 between steps.
//   dstate f32 [kDsSize] (DSumSlot): initialise d = d0 (pair), the rest 0.
//   acc    f32 [kDsAccWidth * slots]: per param three sums, each a pair, written by its accum op.
#pragma once
#include <cmath>

#include "ggml-lite/core/graph.h"
#include "ggml-lite/ops/optim_types.h"
#include "ggml-lite/ops/rng.h"  // GL_HD

namespace gl {

// Pairs (hi at the index, lo at index + 1): d, the step's dlr, SGD's g0_norm, and the rule's running
// sums A, B, C (SGD: A numerator_weighted; AdaGrad: A gsq_weighted, B sksq_weighted, C skl1; Adan and
// AdamPreprint: A gsq_weighted; AdanIP: A numerator_weighted). Singles: d_hat, applied (0 when the step returned before its update, as dadaptation
// does when no progress is possible), steps (the updates applied: dadaptation's k), first (SGD: 1
// when this step was its first, whose s the step op scales by dlr).
enum DSumSlot {
    kDsD = 0, kDsDlr = 2, kDsG0 = 4, kDsA = 6, kDsB = 8, kDsC = 10,
    kDsDHat = 12, kDsApplied, kDsSteps, kDsFirst, kDsSize = 16
};
constexpr int kDsAccWidth = 6;  // three pairs per param slot

// adam_preprint's d rule is Adan's with beta3 = beta2 (its gsq_weighted is an EMA by beta2).
enum class DSumRule : int64_t { sgd = 0, adagrad = 1, adan = 2, adam_preprint = 3, adan_ip = 4 };
constexpr int64_t kDsRuleCount = 5;

GL_HD double ds_get(const float* ds, int at) { return double(ds[at]) + double(ds[at + 1]); }
GL_HD void ds_put(float* ds, int at, double x) {
    const float hi = float(x);
    ds[at] = hi;
    ds[at + 1] = x - x == 0.0 ? float(x - double(hi)) : 0.0f;  // 0 for inf / NaN
}

// The d update of dadapt_sum_d: sum[3] the acc sums over every slot (in slot order), lr the lead
// group's lr, beta3 Adan's third beta (AdamPreprint's beta2) as the double dadaptation computes with:
// its d_hat divides by 1 - beta3, so a beta rounded to f32 (0.999 by 1.3e-8) would move d by 1e-5. Writes dstate as dadaptation writes its group scalars.
GL_HD void dadapt_sum_update_d(float* ds, DSumRule rule, const double* sum, float lr, float growth_rate,
                                      double beta3) {
    double d = ds_get(ds, kDsD);
    const double steps = ds[kDsSteps];
    const double lrd = lr;
    double d_hat = d, dlr = d * lrd;
    ds[kDsApplied] = 0.0f;
    ds[kDsFirst] = 0.0f;
    if (rule == DSumRule::sgd) {
        // k == 0: sum[0] is |g|^2 (without decay), sum[1] |g + decay p|^2 (s before its dlr scale).
        const bool first = steps == 0.0;
        const double g0 = first ? sqrt(sum[0]) : ds_get(ds, kDsG0);
        if (!(g0 > 0.0)) return;  // dadaptation divides by it (ZeroDivisionError): no step here
        dlr = d * lrd / g0;
        const double sk_sq = first ? dlr * dlr * sum[1] : sum[1];
        const double num = ds_get(ds, kDsA) + (first ? 0.0 : sum[0]);
        if (sk_sq == 0.0) return;
        if (lr > 0.0f) {
            d_hat = 2.0 * num / sqrt(sk_sq);
            const double grown = d * double(growth_rate), capped = d_hat < grown ? d_hat : grown;
            d = d > capped ? d : capped;
        }
        ds_put(ds, kDsG0, g0);
        ds_put(ds, kDsA, num);
        ds[kDsFirst] = first ? 1.0f : 0.0f;
    } else if (rule == DSumRule::adagrad) {
        const double sksq = ds_get(ds, kDsB) + sum[1], skl1 = ds_get(ds, kDsC) + sum[2];
        if (skl1 == 0.0) return;
        const double gsq = ds_get(ds, kDsA) + dlr * dlr * sum[0];
        if (lr > 0.0f) {
            d_hat = (sksq - gsq) / skl1;
            const double grown = d * double(growth_rate), capped = d_hat < grown ? d_hat : grown;
            d = d > capped ? d : capped;
        }
        ds_put(ds, kDsA, gsq);
        ds_put(ds, kDsB, sksq);
        ds_put(ds, kDsC, skl1);
    } else if (rule == DSumRule::adan_ip) {
        const double b3 = beta3;
        const double num = b3 * ds_get(ds, kDsA) + (1.0 - b3) * (dlr * sum[0]);
        if (sum[2] == 0.0) return;
        if (lr > 0.0f) {
            d_hat = 2.0 * (b3 / (1.0 - b3)) * num / sum[2];
            const double grown = d * double(growth_rate), capped = d_hat < grown ? d_hat : grown;
            d = d > capped ? d : capped;
        }
        ds_put(ds, kDsA, num);
    } else {  // adan, adam_preprint
        const double b3 = beta3;
        const double gsq = b3 * ds_get(ds, kDsA) + sum[0] * (dlr * dlr) * (1.0 - b3);
        if (sum[2] == 0.0) return;
        if (lr > 0.0f) {
            d_hat = (sum[1] / (1.0 - b3) - gsq) / sum[2];
            const double grown = d * double(growth_rate), capped = d_hat < grown ? d_hat : grown;
            d = d > capped ? d : capped;
        }
        ds_put(ds, kDsA, gsq);
    }
    ds_put(ds, kDsD, d);
    ds_put(ds, kDsDlr, dlr);
    ds[kDsDHat] = float(d_hat);
    ds[kDsApplied] = 1.0f;
    ds[kDsSteps] = float(steps + 1.0);
}

// ---- builder calls (grad f32 dense; hyper the param's group; lead the hyper whose lr (and, for
// Adan, betas) the rule reads: DAdaptSGD the group with the largest lr, AdaGrad and Adan the first
// group, as dadaptation reads them; slot the param's index into acc; gstat optional) ----

// DAdaptSGD. accum: k == 0: s = g + decay p and acc = (|g|^2, |s|^2); later s += dlr (g + decay p),
// acc = (dlr dot(g + decay p, s_old), |s|^2) (groups at lr 0: acc 0, s kept). step: at the first
// step s *= dlr; then p = p (1 - ck) + (x0 - s) ck, ck = 1 - momentum (hyper's beta1).
void dadapt_sgd_accum(Graph& g, ValueId param, ValueId grad, ValueId s, ValueId hyper, ValueId lead, ValueId dstate,
                      ValueId acc, int slot, ValueId gstat = kNoValue);
void dadapt_sgd_step(Graph& g, ValueId param, ValueId s, ValueId x0, ValueId hyper, ValueId dstate,
                     ValueId gstat = kNoValue);
// DAdaptAdaGrad: alpha (starting at 1e-6) += g^2, sk += dlr g (g + decay p), acc = (sum g^2 / (sqrt
// alpha + eps), the change of sum sk^2 / (sqrt alpha + eps), the change of sum |sk|). step: z = x0 -
// sk / (sqrt alpha + eps), p = z, or p (1 - ck) + z ck with a momentum (hyper's beta1).
void dadapt_adagrad_accum(Graph& g, ValueId param, ValueId grad, ValueId alpha, ValueId sk, ValueId hyper,
                          ValueId lead, ValueId dstate, ValueId acc, int slot, ValueId gstat = kNoValue);
void dadapt_adagrad_step(Graph& g, ValueId param, ValueId alpha, ValueId sk, ValueId x0, ValueId hyper,
                         ValueId dstate, ValueId gstat = kNoValue);
// DAdaptAdan (betas: lead's beta1, beta2 and beta3): pre (the previous gradient) = g at the first
// step; m, diff, v, s their EMAs; acc = (sum g^2 / denom, sum s^2 / denom, sum |s|). step: p -= (m +
// beta2 diff) / (sqrt v + eps) with decay by dlr (no_prox: p *= 1 - dlr decay first; else p /= 1 +
// dlr decay after), pre = g.
// beta1..3: as dadapt_adam_preprint_accum's below (doubles for the 1 - beta the EMAs add by).
void dadapt_adan_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId diff, ValueId v, ValueId s,
                       ValueId pre, ValueId hyper, ValueId lead, ValueId dstate, ValueId acc, int slot, double beta1,
                       double beta2, double beta3, ValueId gstat = kNoValue);
void dadapt_adan_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId diff, ValueId v, ValueId pre,
                      ValueId hyper, ValueId lead, ValueId dstate, bool no_prox, ValueId gstat = kNoValue);
// DAdaptAdamPreprint (dadaptation.experimental; kohya's "DAdaptation"; betas: lead's; lead the group
// with the largest lr): g += decay p unless decouple; for a group at lr > 0: m = b1 m + dlr (1 - b1) g,
// v = b2 v + (1 - b2) g^2, s = b2 s + dlr (1 - b2) g, acc = (sum g^2 / denom, sum s^2 / denom, sum |s|).
// step: p -= dlr decay p first (decouple, group lr > 0), then p -= m / (sqrt v + eps). Its d rule:
// dadapt_sum_d with DSumRule::adam_preprint and beta3 = beta2.
// beta1, beta2 (and AdanIP's beta3): the betas as doubles (the config's), whose 1 - beta the EMAs
// add by, as torch computes alpha = dlr * (1 - beta) in double; the multipliers are lead's f32 betas.
void dadapt_adam_preprint_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId s, ValueId hyper,
                                ValueId lead, ValueId dstate, ValueId acc, int slot, double beta1, double beta2,
                                bool decouple, ValueId gstat = kNoValue);
void dadapt_adam_preprint_step(Graph& g, ValueId param, ValueId m, ValueId v, ValueId hyper, ValueId dstate,
                               bool decouple, ValueId gstat = kNoValue);
// DAdaptAdanIP (dadaptation.experimental): dadapt_adan_accum's EMAs, but acc = (dot(g, s / denom) with
// s and denom before their updates, 0, sum |s|) for its numerator_weighted d rule (DSumRule::adan_ip);
// its step is dadapt_adan_step's.
void dadapt_adan_ip_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId diff, ValueId v, ValueId s,
                          ValueId pre, ValueId hyper, ValueId lead, ValueId dstate, ValueId acc, int slot, double beta1,
                          double beta2, double beta3, ValueId gstat = kNoValue);
// Sums acc over every slot in slot order and applies `rule`'s d update (dadapt_sum_update_d).
void dadapt_sum_d(Graph& g, ValueId dstate, ValueId acc, ValueId lead, DSumRule rule, float growth_rate,
                  double beta3 = 0.0, ValueId gstat = kNoValue);

// The doubles these ops carry in Params i[3..5] (their bit patterns): dadapt_sum_d's beta3, the
// accum ops' betas.
inline int64_t ds_double_bits(double x) {
    int64_t b;
    __builtin_memcpy(&b, &x, sizeof b);
    return b;
}
inline double ds_bits_double(int64_t b) {
    double x;
    __builtin_memcpy(&x, &b, sizeof x);
    return x;
}

}  // namespace gl
