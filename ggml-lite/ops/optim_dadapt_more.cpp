// D-Adaptation SGD, AdaGrad and Adan (Defazio & Mishchenko 2023) as dadaptation 3.2's DAdaptSGD,
// DAdaptAdaGrad and DAdaptAdan step(), and its experimental DAdaptAdamPreprint and DAdaptAdanIP, split into in-place ops so a step stays one capturable graph
// (the layout of DAdaptAdam's, ops/optim_dadapt.cpp; the state and d rules: ops/optim_dadapt_more.h):
//   <rule>_accum  (per param, dadaptation's first loop)  the state EMAs / sums and three sums -> acc
//   dadapt_sum_d  (once)                                 sums acc in slot order, updates d in dstate
//   <rule>_step   (per param, its second loop)           the param update from the state
// Node order carries the ordering: every accum before the d op before every step. Elementwise f32
// arithmetic follows torch's (scalars computed in double, applied as f32); sums are double.
#include "ggml-lite/ops/optim_dadapt_more.h"

#include "ggml-lite/ops/optim_common.h"

namespace gl {

namespace {

// Params: i[0] the rule, i[1] the slot (accum) or flags (adan step: 1 = no_prox; preprint step: 1 =
// decouple), i[2] flags of an accum (preprint: 1 = decouple), i[3..5] doubles as bits (dadapt_sum_d:
// beta3; the Adan, AdanIP and preprint accum: beta1, beta2, beta3); f[0] growth_rate, f[1] beta3 (f32).
Params dsum_params(DSumRule rule, int slot, float growth = INFINITY, float beta3 = 0.0f, int64_t flags = 0) {
    Params p;
    p.i[0] = int64_t(rule);
    p.i[1] = slot;
    p.i[2] = flags;
    p.f[0] = growth;
    p.f[1] = beta3;
    return p;
}

void check_dsum_state(const OpCall& c, int i) {
    check_state_f32(c, i, "dstate");
    c.check(c.shape(i).numel() == kDsSize, "dstate must hold ", int(kDsSize), " floats");
}

// Inputs [0, n_same) f32 of the param's element count, named; then hyper inputs, dstate, acc.
void check_elems(const OpCall& c, std::initializer_list<const char*> names) {
    const int64_t n = c.shape(0).numel();
    int i = 0;
    for (const char* what : names) {
        check_state_f32(c, i, what);
        c.check(c.shape(i).numel() == n, what, " must have the parameter's element count");
        i++;
    }
}

void check_acc(const OpCall& c, int i) {
    check_state_f32(c, i, "acc");
    c.check(c.p.i[1] >= 0 && kDsAccWidth * (c.p.i[1] + 1) <= c.shape(i).numel(), "slot ", c.p.i[1],
            " is outside acc (", int(kDsAccWidth), " floats per slot)");
}

void put_acc(float* acc, int64_t slot, double a, double b, double c) {
    ds_put(acc, int(kDsAccWidth * slot), a);
    ds_put(acc, int(kDsAccWidth * slot + 2), b);
    ds_put(acc, int(kDsAccWidth * slot + 4), c);
}

}  // namespace

// ------- dadapt_sgd_accum(param, grad, s, hyper, lead, dstate, acc[, gstat]) -------

static std::vector<OutSpec> sgd_accum_infer(const OpCall& c) {
    check_gstat_input(c, 7);
    check_elems(c, {"param", "grad", "s"});
    check_hyper_input(c, 3);
    check_hyper_input(c, 4);
    check_dsum_state(c, 5);
    check_acc(c, 6);
    return {};
}

static void sgd_accum_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 7);
    if (gate.skip) return;
    const float* p = c.in_f32(0);
    const float* g = c.in_f32(1);
    float* s = mut_f32(c, 2);
    const float* h = c.in_f32(3);
    const float* ds = c.in_f32(5);
    float* acc = mut_f32(c, 6);
    const float wd = h[kWeightDecay], gs = h[kGradScale];
    const bool first = ds[kDsSteps] == 0.0f;
    const double dlr = first ? 0.0 : ds_get(ds, kDsD) * double(c.in_f32(4)[kLr]) / ds_get(ds, kDsG0);
    const float fdlr = float(dlr);
    double a = 0.0, b = 0.0;
    if (h[kLr] > 0.0f) {  // dadaptation leaves a group at lr 0 out of the sums and its s alone
        for (int64_t i = 0, n = c.in[0].numel(); i < n; i++) {
            const float gi = (g[i] * gs) * gate.mul;
            const float gd = wd != 0.0f ? gi + wd * p[i] : gi;
            if (first) {
                a += double(gi) * double(gi);
                s[i] = gd;
                b += double(gd) * double(gd);
            } else {
                a += double(gd) * double(s[i]);
                s[i] = s[i] + fdlr * gd;
                b += double(s[i]) * double(s[i]);
            }
        }
    }
    put_acc(acc, c.p().i[1], first ? a : dlr * a, b, 0.0);
}

void dadapt_sgd_accum(Graph& g, ValueId param, ValueId grad, ValueId s, ValueId hyper, ValueId lead, ValueId dstate,
                      ValueId acc, int slot, ValueId gstat) {
    g.apply(Op::dadapt_sgd_accum, present({param, grad, s, hyper, lead, dstate, acc, gstat}),
            dsum_params(DSumRule::sgd, slot));
}

// ------- dadapt_sgd_step(param, s, x0, hyper, dstate[, gstat]) -------

static std::vector<OutSpec> sgd_step_infer(const OpCall& c) {
    check_gstat_input(c, 5);
    check_elems(c, {"param", "s", "x0"});
    check_hyper_input(c, 3);
    check_dsum_state(c, 4);
    return {};
}

static void sgd_step_cpu(CpuCtx& c) {
    const float* ds = c.in_f32(4);
    if (grad_gate(c, 5).skip || ds[kDsApplied] == 0.0f) return;
    float* p = mut_f32(c, 0);
    float* s = mut_f32(c, 1);
    const float* x0 = c.in_f32(2);
    const double ck = 1.0 - double(c.in_f32(3)[kBeta1]);
    const float keep = float(1.0 - ck), take = float(ck);
    const bool first = ds[kDsFirst] != 0.0f;
    const float fdlr = float(ds_get(ds, kDsDlr));
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            if (first) s[i] = 0.0f + fdlr * s[i];
            const float z = x0[i] - s[i];
            p[i] = p[i] * keep + take * z;
        }
    });
}

void dadapt_sgd_step(Graph& g, ValueId param, ValueId s, ValueId x0, ValueId hyper, ValueId dstate, ValueId gstat) {
    g.apply(Op::dadapt_sgd_step, present({param, s, x0, hyper, dstate, gstat}), dsum_params(DSumRule::sgd, 0));
}

// ------- dadapt_adagrad_accum(param, grad, alpha, sk, hyper, lead, dstate, acc[, gstat]) -------

static std::vector<OutSpec> adagrad_accum_infer(const OpCall& c) {
    check_gstat_input(c, 8);
    check_elems(c, {"param", "grad", "alpha", "sk"});
    check_hyper_input(c, 4);
    check_hyper_input(c, 5);
    check_dsum_state(c, 6);
    check_acc(c, 7);
    return {};
}

static void adagrad_accum_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 8);
    if (gate.skip) return;
    const float* p = c.in_f32(0);
    const float* g = c.in_f32(1);
    float* alpha = mut_f32(c, 2);
    float* sk = mut_f32(c, 3);
    const float* h = c.in_f32(4);
    const float* ds = c.in_f32(6);
    const float wd = h[kWeightDecay], gs = h[kGradScale], eps = h[kEps];
    const float fdlr = float(ds_get(ds, kDsD) * double(c.in_f32(5)[kLr]));
    double gsq = 0.0, old_sq = 0.0, new_sq = 0.0, old_l1 = 0.0, new_l1 = 0.0;
    for (int64_t i = 0, n = c.in[0].numel(); i < n; i++) {
        float gi = (g[i] * gs) * gate.mul;
        if (wd != 0.0f) gi = gi + wd * p[i];
        const float old_den = std::sqrt(alpha[i]) + eps;
        old_sq += double((sk[i] * sk[i]) / old_den);
        old_l1 += double(std::fabs(sk[i]));
        alpha[i] = alpha[i] + gi * gi;
        const float den = std::sqrt(alpha[i]) + eps;
        gsq += double((gi * gi) / den);
        sk[i] = sk[i] + fdlr * gi;
        new_sq += double((sk[i] * sk[i]) / den);
        new_l1 += double(std::fabs(sk[i]));
    }
    put_acc(mut_f32(c, 7), c.p().i[1], gsq, new_sq - old_sq, new_l1 - old_l1);
}

void dadapt_adagrad_accum(Graph& g, ValueId param, ValueId grad, ValueId alpha, ValueId sk, ValueId hyper,
                          ValueId lead, ValueId dstate, ValueId acc, int slot, ValueId gstat) {
    g.apply(Op::dadapt_adagrad_accum, present({param, grad, alpha, sk, hyper, lead, dstate, acc, gstat}),
            dsum_params(DSumRule::adagrad, slot));
}

// ------- dadapt_adagrad_step(param, alpha, sk, x0, hyper, dstate[, gstat]) -------

static std::vector<OutSpec> adagrad_step_infer(const OpCall& c) {
    check_gstat_input(c, 6);
    check_elems(c, {"param", "alpha", "sk", "x0"});
    check_hyper_input(c, 4);
    check_dsum_state(c, 5);
    return {};
}

static void adagrad_step_cpu(CpuCtx& c) {
    const float* ds = c.in_f32(5);
    if (grad_gate(c, 6).skip || ds[kDsApplied] == 0.0f) return;
    float* p = mut_f32(c, 0);
    const float* alpha = c.in_f32(1);
    const float* sk = c.in_f32(2);
    const float* x0 = c.in_f32(3);
    const float* h = c.in_f32(4);
    const float eps = h[kEps];
    const bool momentum = h[kBeta1] != 0.0f;
    const double ck = 1.0 - double(h[kBeta1]);
    const float keep = float(1.0 - ck), take = float(ck);
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const float z = x0[i] - sk[i] / (std::sqrt(alpha[i]) + eps);
            p[i] = momentum ? p[i] * keep + take * z : z;
        }
    });
}

void dadapt_adagrad_step(Graph& g, ValueId param, ValueId alpha, ValueId sk, ValueId x0, ValueId hyper, ValueId dstate,
                         ValueId gstat) {
    g.apply(Op::dadapt_adagrad_step, present({param, alpha, sk, x0, hyper, dstate, gstat}),
            dsum_params(DSumRule::adagrad, 0));
}

// ------- dadapt_adan_accum(param, grad, m, diff, v, s, pre, hyper, lead, dstate, acc[, gstat]) -------

static std::vector<OutSpec> adan_accum_infer(const OpCall& c) {
    check_gstat_input(c, 11);
    check_elems(c, {"param", "grad", "m", "diff", "v", "s", "pre"});
    check_hyper_input(c, 7);
    check_hyper_input(c, 8);
    check_dsum_state(c, 9);
    check_acc(c, 10);
    c.check(c.p.f[1] >= 0.0f && c.p.f[1] < 1.0f, "beta3 must lie in [0, 1)");
    return {};
}

// What dadapt_adan_accum and dadapt_adan_ip_accum share: their inputs, the step's coefficients and
// the per-element Adan EMAs (m, diff, v: pre on the first step, the gradient's difference and the
// Nesterov update); the two differ only in their sums and where the d estimate reads s and v.
namespace {

struct AdanAccum {
    GradGate gate;
    const float* g;
    float *m, *diff, *v, *s, *pre;
    float gs, eps, b1, b2, b3, c1, c2, c3, cs;
    bool first;

    explicit AdanAccum(CpuCtx& c) : gate(grad_gate(c, 11)) {
        if (gate.skip) return;
        g = c.in_f32(1);
        m = mut_f32(c, 2);
        diff = mut_f32(c, 3);
        v = mut_f32(c, 4);
        s = mut_f32(c, 5);
        pre = mut_f32(c, 6);
        const float* h = c.in_f32(7);
        const float* lead = c.in_f32(8);
        const float* ds = c.in_f32(9);
        gs = h[kGradScale];
        eps = h[kEps];
        b1 = lead[kBeta1];
        b2 = lead[kBeta2];
        b3 = c.p().f[1];
        const double b1d = ds_bits_double(c.p().i[3]), b2d = ds_bits_double(c.p().i[4]);
        const double b3d = ds_bits_double(c.p().i[5]);
        const double dlr = ds_get(ds, kDsD) * double(lead[kLr]);
        c1 = float(dlr * (1.0 - b1d));
        c2 = float(dlr * (1.0 - b2d));
        c3 = float(1.0 - b3d);
        cs = float(dlr * (1.0 - b3d));
        first = ds[kDsSteps] == 0.0f;
    }
    float grad(int64_t i) const { return (g[i] * gs) * gate.mul; }
    // m, diff and v of element i from its scaled gradient gi (s is left to the caller).
    void emas(int64_t i, float gi) const {
        if (first) pre[i] = gi;
        const float gd = gi - pre[i];
        const float up = gi + b2 * gd;
        m[i] = m[i] * b1 + c1 * gi;
        diff[i] = diff[i] * b2 + c2 * gd;
        v[i] = v[i] * b3 + c3 * (up * up);
    }
};

}  // namespace

static void adan_accum_cpu(CpuCtx& c) {
    const AdanAccum a(c);
    if (a.gate.skip) return;
    double gsq = 0.0, ssq = 0.0, l1 = 0.0;
    for (int64_t i = 0, n = c.in[0].numel(); i < n; i++) {
        const float gi = a.grad(i);
        a.emas(i, gi);
        const float den = std::sqrt(a.v[i]) + a.eps;
        gsq += double((gi * gi) / den);
        a.s[i] = a.s[i] * a.b3 + a.cs * gi;
        ssq += double((a.s[i] * a.s[i]) / den);
        l1 += double(std::fabs(a.s[i]));
    }
    put_acc(mut_f32(c, 10), c.p().i[1], gsq, ssq, l1);
}

void dadapt_adan_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId diff, ValueId v, ValueId s,
                       ValueId pre, ValueId hyper, ValueId lead, ValueId dstate, ValueId acc, int slot, double beta1,
                       double beta2, double beta3, ValueId gstat) {
    Params p = dsum_params(DSumRule::adan, slot, INFINITY, float(beta3));
    p.i[3] = ds_double_bits(beta1);
    p.i[4] = ds_double_bits(beta2);
    p.i[5] = ds_double_bits(beta3);
    g.apply(Op::dadapt_adan_accum, present({param, grad, m, diff, v, s, pre, hyper, lead, dstate, acc, gstat}), p);
}

// ------- dadapt_adan_step(param, grad, m, diff, v, pre, hyper, lead, dstate[, gstat]) -------

static std::vector<OutSpec> adan_step_infer(const OpCall& c) {
    check_gstat_input(c, 9);
    check_elems(c, {"param", "grad", "m", "diff", "v", "pre"});
    check_hyper_input(c, 6);
    check_hyper_input(c, 7);
    check_dsum_state(c, 8);
    return {};
}

static void adan_step_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 9);
    const float* ds = c.in_f32(8);
    if (gate.skip || ds[kDsApplied] == 0.0f) return;
    float* p = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    const float* m = c.in_f32(2);
    const float* diff = c.in_f32(3);
    const float* v = c.in_f32(4);
    float* pre = mut_f32(c, 5);
    const float* h = c.in_f32(6);
    const float b2 = c.in_f32(7)[kBeta2], eps = h[kEps], gs = h[kGradScale];
    const double dlr_wd = ds_get(ds, kDsDlr) * double(h[kWeightDecay]);
    const bool no_prox = c.p().i[1] & 1;
    const float mul_by = float(1.0 - dlr_wd), div_by = float(1.0 + dlr_wd);
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const float up = (m[i] + b2 * diff[i]) / (std::sqrt(v[i]) + eps);
            p[i] = no_prox ? p[i] * mul_by - up : (p[i] - up) / div_by;
            pre[i] = (g[i] * gs) * gate.mul;
        }
    });
}

void dadapt_adan_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId diff, ValueId v, ValueId pre,
                      ValueId hyper, ValueId lead, ValueId dstate, bool no_prox, ValueId gstat) {
    g.apply(Op::dadapt_adan_step, present({param, grad, m, diff, v, pre, hyper, lead, dstate, gstat}),
            dsum_params(DSumRule::adan, no_prox ? 1 : 0));
}

// ------- dadapt_adam_preprint_accum(param, grad, m, v, s, hyper, lead, dstate, acc[, gstat]) -------

static std::vector<OutSpec> preprint_accum_infer(const OpCall& c) {
    check_gstat_input(c, 9);
    check_elems(c, {"param", "grad", "m", "v", "s"});
    check_hyper_input(c, 5);
    check_hyper_input(c, 6);
    check_dsum_state(c, 7);
    check_acc(c, 8);
    return {};
}

static void preprint_accum_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 9);
    if (gate.skip) return;
    const float* h = c.in_f32(5);
    if (!(h[kLr] > 0.0f)) {  // dadaptation leaves a group at lr 0 out of the sums and its state alone
        put_acc(mut_f32(c, 8), c.p().i[1], 0.0, 0.0, 0.0);
        return;
    }
    const float* p = c.in_f32(0);
    const float* g = c.in_f32(1);
    float* m = mut_f32(c, 2);
    float* v = mut_f32(c, 3);
    float* s = mut_f32(c, 4);
    const float* lead = c.in_f32(6);
    const float* ds = c.in_f32(7);
    const bool coupled = !(c.p().i[2] & 1);
    const float wd = h[kWeightDecay], gs = h[kGradScale], eps = h[kEps];
    const float b1 = lead[kBeta1], b2 = lead[kBeta2];
    const double b1d = ds_bits_double(c.p().i[3]), b2d = ds_bits_double(c.p().i[4]);
    const double dlr = ds_get(ds, kDsD) * double(lead[kLr]);
    const float c1 = float(dlr * (1.0 - b1d)), c2 = float(1.0 - b2d), cs = float(dlr * (1.0 - b2d));
    double gsq = 0.0, ssq = 0.0, l1 = 0.0;
    for (int64_t i = 0, n = c.in[0].numel(); i < n; i++) {
        float gi = (g[i] * gs) * gate.mul;
        if (coupled && wd != 0.0f) gi = gi + wd * p[i];
        const float gg = gi * gi;
        m[i] = m[i] * b1 + c1 * gi;
        v[i] = v[i] * b2 + c2 * gg;
        const float den = std::sqrt(v[i]) + eps;
        gsq += double(gg / den);
        s[i] = s[i] * b2 + cs * gi;
        ssq += double((s[i] * s[i]) / den);
        l1 += double(std::fabs(s[i]));
    }
    put_acc(mut_f32(c, 8), c.p().i[1], gsq, ssq, l1);
}

void dadapt_adam_preprint_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId s, ValueId hyper,
                                ValueId lead, ValueId dstate, ValueId acc, int slot, double beta1, double beta2,
                                bool decouple, ValueId gstat) {
    Params p = dsum_params(DSumRule::adam_preprint, slot, INFINITY, 0.0f, decouple ? 1 : 0);
    p.i[3] = ds_double_bits(beta1);
    p.i[4] = ds_double_bits(beta2);
    g.apply(Op::dadapt_adam_preprint_accum, present({param, grad, m, v, s, hyper, lead, dstate, acc, gstat}), p);
}

// ------- dadapt_adam_preprint_step(param, m, v, hyper, dstate[, gstat]) -------

static std::vector<OutSpec> preprint_step_infer(const OpCall& c) {
    check_gstat_input(c, 5);
    check_elems(c, {"param", "m", "v"});
    check_hyper_input(c, 3);
    check_dsum_state(c, 4);
    return {};
}

static void preprint_step_cpu(CpuCtx& c) {
    const float* ds = c.in_f32(4);
    if (grad_gate(c, 5).skip || ds[kDsApplied] == 0.0f) return;
    float* p = mut_f32(c, 0);
    const float* m = c.in_f32(1);
    const float* v = c.in_f32(2);
    const float* h = c.in_f32(3);
    const float eps = h[kEps];
    const bool decay = (c.p().i[1] & 1) && h[kWeightDecay] != 0.0f && h[kLr] > 0.0f;
    const float by = float(-double(h[kWeightDecay]) * ds_get(ds, kDsDlr));
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const float pi = decay ? p[i] + by * p[i] : p[i];
            p[i] = pi - m[i] / (std::sqrt(v[i]) + eps);
        }
    });
}

void dadapt_adam_preprint_step(Graph& g, ValueId param, ValueId m, ValueId v, ValueId hyper, ValueId dstate,
                               bool decouple, ValueId gstat) {
    g.apply(Op::dadapt_adam_preprint_step, present({param, m, v, hyper, dstate, gstat}),
            dsum_params(DSumRule::adam_preprint, decouple ? 1 : 0));
}

// ------- dadapt_adan_ip_accum(param, grad, m, diff, v, s, pre, hyper, lead, dstate, acc[, gstat]) -------

static void adan_ip_accum_cpu(CpuCtx& c) {
    const AdanAccum a(c);
    if (a.gate.skip) return;
    double dot = 0.0, l1 = 0.0;
    for (int64_t i = 0, n = c.in[0].numel(); i < n; i++) {
        const float gi = a.grad(i);
        dot += double(gi) * double(a.s[i] / (std::sqrt(a.v[i]) + a.eps));  // s and v before the update
        a.emas(i, gi);
        a.s[i] = a.s[i] * a.b3 + a.cs * gi;
        l1 += double(std::fabs(a.s[i]));
    }
    put_acc(mut_f32(c, 10), c.p().i[1], dot, 0.0, l1);
}

void dadapt_adan_ip_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId diff, ValueId v, ValueId s,
                          ValueId pre, ValueId hyper, ValueId lead, ValueId dstate, ValueId acc, int slot, double beta1,
                          double beta2, double beta3, ValueId gstat) {
    Params p = dsum_params(DSumRule::adan_ip, slot, INFINITY, float(beta3));
    p.i[3] = ds_double_bits(beta1);
    p.i[4] = ds_double_bits(beta2);
    p.i[5] = ds_double_bits(beta3);
    g.apply(Op::dadapt_adan_ip_accum, present({param, grad, m, diff, v, s, pre, hyper, lead, dstate, acc, gstat}), p);
}

// ------- dadapt_sum_d(dstate, acc, lead[, gstat]) -------

static std::vector<OutSpec> sum_d_infer(const OpCall& c) {
    check_gstat_input(c, 3);
    check_dsum_state(c, 0);
    check_state_f32(c, 1, "acc");
    c.check(c.shape(1).numel() % kDsAccWidth == 0 && c.shape(1).numel() > 0, "acc must hold ", int(kDsAccWidth),
            " floats per parameter slot");
    check_hyper_input(c, 2);
    c.check(c.p.i[0] >= 0 && c.p.i[0] < kDsRuleCount, "unknown D-Adaptation rule ", c.p.i[0]);
    c.check(c.p.f[0] >= 1.0f, "growth_rate must be >= 1 (inf: unbounded)");
    c.check(c.p.f[1] >= 0.0f && c.p.f[1] < 1.0f, "beta3 must lie in [0, 1)");
    return {};
}

static void sum_d_cpu(CpuCtx& c) {
    if (grad_gate(c, 3).skip) return;
    const float* acc = c.in_f32(1);
    double sum[3] = {0.0, 0.0, 0.0};
    for (int64_t k = 0, n = c.in[1].numel() / kDsAccWidth; k < n; k++)
        for (int j = 0; j < 3; j++) sum[j] += ds_get(acc, int(kDsAccWidth * k + 2 * j));
    dadapt_sum_update_d(mut_f32(c, 0), DSumRule(c.p().i[0]), sum, c.in_f32(2)[kLr], c.p().f[0],
                        ds_bits_double(c.p().i[3]));
}

static Cost sum_d_cost(const OpCall& c) { return {2.0 * double(c.shape(1).numel()), 4.0 * double(c.shape(1).numel())}; }

void dadapt_sum_d(Graph& g, ValueId dstate, ValueId acc, ValueId lead, DSumRule rule, float growth_rate, double beta3,
                  ValueId gstat) {
    Params p = dsum_params(rule, 0, growth_rate, float(beta3));
    p.i[3] = ds_double_bits(beta3);
    g.apply(Op::dadapt_sum_d, present({dstate, acc, lead, gstat}), p);
}

constexpr uint32_t kStepFlags = kOpNoGrad | kOpMutates;
const OpDef def_dadapt_sgd_accum{"dadapt_sgd_accum", "optim_dadapt_more", sgd_accum_infer, step_cost, nullptr,
                                 sgd_accum_cpu, kStepFlags};
const OpDef def_dadapt_sgd_step{"dadapt_sgd_step", "optim_dadapt_more", sgd_step_infer, step_cost, nullptr,
                                sgd_step_cpu, kStepFlags};
const OpDef def_dadapt_adagrad_accum{"dadapt_adagrad_accum", "optim_dadapt_more", adagrad_accum_infer, step_cost,
                                     nullptr, adagrad_accum_cpu, kStepFlags};
const OpDef def_dadapt_adagrad_step{"dadapt_adagrad_step", "optim_dadapt_more", adagrad_step_infer, step_cost, nullptr,
                                    adagrad_step_cpu, kStepFlags};
const OpDef def_dadapt_adan_accum{"dadapt_adan_accum", "optim_dadapt_more", adan_accum_infer, step_cost, nullptr,
                                  adan_accum_cpu, kStepFlags};
const OpDef def_dadapt_adan_step{"dadapt_adan_step", "optim_dadapt_more", adan_step_infer, step_cost, nullptr,
                                 adan_step_cpu, kStepFlags};
const OpDef def_dadapt_adam_preprint_accum{"dadapt_adam_preprint_accum", "optim_dadapt_more", preprint_accum_infer,
                                           step_cost, nullptr, preprint_accum_cpu, kStepFlags};
const OpDef def_dadapt_adam_preprint_step{"dadapt_adam_preprint_step", "optim_dadapt_more", preprint_step_infer,
                                          step_cost, nullptr, preprint_step_cpu, kStepFlags};
const OpDef def_dadapt_adan_ip_accum{"dadapt_adan_ip_accum", "optim_dadapt_more", adan_accum_infer, step_cost, nullptr,
                                     adan_ip_accum_cpu, kStepFlags};
const OpDef def_dadapt_sum_d{"dadapt_sum_d", "optim_dadapt_more", sum_d_infer, sum_d_cost, nullptr, sum_d_cpu,
                             kStepFlags};

}  // namespace gl
