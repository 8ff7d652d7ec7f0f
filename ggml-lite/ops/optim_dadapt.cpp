// D-Adaptation Adam (Defazio & Mishchenko 2023, "Learning-Rate-Free Learning by D-Adaptation") as
// dadaptation 3.2's DAdaptAdam.step(), split into in-place ops so a step stays one capturable graph
// (the layout of Prodigy's, ops/optim_prodigy.cpp):
//   dadapt_adam_accum  (per param, first loop)  dlr * dot(g, s / (sqrt(v) + eps)) with the old s, v;
//                                               then the EMAs m (scaled by dlr), v and s; sum|s| -> acc
//   dadapt_adam_d      (once)                   sums the slots in slot order, updates d in dstate
//   dadapt_adam_step   (per param, second loop) decoupled decay by the step's dlr, p -= m / (sqrt(v) + eps)
// Node order carries the ordering: every accum before the d op before every step.
// DAdaptLion (dadaptation 3.2) updates each param in its one loop, so a step is dadapt_lion_step per
// param (the sign step, m, s, and the sums into acc), then the same dadapt_adam_d (growth unbounded,
// no bias correction: DAdaptLion's d rule is DAdaptAdam's without them).
#include <algorithm>

#include "ggml-lite/ops/optim_common.h"
#include "ggml-lite/ops/optim_dadapt.h"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

// Params of all three: i[0] flags, i[1] the slot (accum); f[0] growth_rate.
constexpr int64_t kDaDecouple = 1, kDaBiasCorrection = 2;

static Params dadapt_params(const DAdaptOptions& o, int slot) {
    Params p;
    p.i[0] = (o.decouple ? kDaDecouple : 0) | (o.use_bias_correction ? kDaBiasCorrection : 0);
    p.i[1] = slot;
    p.f[0] = o.growth_rate;
    return p;
}

static void check_dstate(const OpCall& c, int i) {
    check_state_f32(c, i, "dstate");
    c.check(c.shape(i).numel() == kDAdaptStateSize, "dstate must hold ", int(kDAdaptStateSize), " floats");
    c.check(c.p.f[0] >= 1.0f, "growth_rate must be >= 1 (inf: unbounded)");
}

// ------- dadapt_adam_accum(param, grad, m, v, s, hyper, dstate, acc[, gstat]) -------

static std::vector<OutSpec> accum_infer(const OpCall& c) {
    check_gstat_input(c, 8);
    const int64_t n = c.shape(0).numel();
    check_state_f32(c, 0, "param");
    const std::pair<int, const char*> same[] = {{1, "grad"}, {2, "m"}, {3, "v"}, {4, "s"}};
    for (auto [i, what] : same) {
        check_state_f32(c, i, what);
        c.check(c.shape(i).numel() == n, what, " must have the parameter's element count");
    }
    check_hyper_input(c, 5);
    check_dstate(c, 6);
    check_state_f32(c, 7, "acc");
    c.check(c.p.i[1] >= 0 && 2 * c.p.i[1] + 1 < c.shape(7).numel(), "slot ", c.p.i[1], " is outside acc");
    return {};
}

static void accum_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 8);
    if (gate.skip) return;
    const int64_t flags = c.p().i[0];
    const float* p = c.in_f32(0);
    const float* g = c.in_f32(1);
    float* m = mut_f32(c, 2);
    float* v = mut_f32(c, 3);
    float* s = mut_f32(c, 4);
    const float* h = c.in_f32(5);
    const float* ds = c.in_f32(6);
    float* acc = mut_f32(c, 7);
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], eps = h[kEps], wd = h[kWeightDecay], gs = h[kGradScale];
    const double dlr = prodigy_dlr(ds[kDaD], lr, b1, b2, h[kStep], flags & kDaBiasCorrection);
    const double sqrt_b2 = std::sqrt(double(b2));
    const float cm = float(dlr * (1.0 - double(b1))), cs = float(dlr * (1.0 - sqrt_b2)), fb2 = float(sqrt_b2);
    const bool coupled = !(flags & kDaDecouple) && wd != 0.0f;
    double dot = 0.0, sabs = 0.0;
    if (lr > 0.0f) {  // a group at lr 0 keeps its state (dadaptation skips it in the first loop)
        for (int64_t i = 0, n = c.in[0].numel(); i < n; i++) {
            float gi = (g[i] * gs) * gate.mul;
            if (coupled) gi = gi + wd * p[i];
            const float denom = std::sqrt(v[i]) + eps;
            dot += double(gi) * double(s[i] / denom);
            m[i] = m[i] * b1 + cm * gi;
            v[i] = v[i] * b2 + (1.0f - b2) * (gi * gi);
            s[i] = s[i] * fb2 + cs * gi;
            sabs += double(std::fabs(s[i]));
        }
    }
    acc[2 * c.p().i[1]] = float(dlr * dot);
    acc[2 * c.p().i[1] + 1] = float(sabs);
}

void dadapt_adam_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId s, ValueId hyper,
                       ValueId dstate, ValueId acc, int slot, const DAdaptOptions& o, ValueId gstat) {
    g.apply(Op::dadapt_adam_accum, present({param, grad, m, v, s, hyper, dstate, acc, gstat}), dadapt_params(o, slot));
}

// ---------------- dadapt_adam_d(dstate, acc, hyper[, gstat]) ----------------

static std::vector<OutSpec> d_infer(const OpCall& c) {
    check_gstat_input(c, 3);
    check_dstate(c, 0);
    check_state_f32(c, 1, "acc");
    c.check(c.shape(1).numel() % 2 == 0 && c.shape(1).numel() > 0, "acc must hold two floats per parameter slot");
    check_hyper_input(c, 2);
    return {};
}

static void d_cpu(CpuCtx& c) {
    if (grad_gate(c, 3).skip) return;
    float* ds = mut_f32(c, 0);
    const float* acc = c.in_f32(1);
    const float* h = c.in_f32(2);
    double num = 0.0, sabs = 0.0;
    for (int64_t k = 0, n = c.in[1].numel() / 2; k < n; k++) {
        num += double(acc[2 * k]);
        sabs += double(acc[2 * k + 1]);
    }
    dadapt_adam_update_d(ds, num, sabs, h[kLr], h[kBeta1], h[kBeta2], h[kStep], c.p().f[0],
                         c.p().i[0] & kDaBiasCorrection);
}

static Cost d_cost(const OpCall& c) { return {2.0 * double(c.shape(1).numel()), 4.0 * double(c.shape(1).numel())}; }

void dadapt_adam_d(Graph& g, ValueId dstate, ValueId acc, ValueId hyper, const DAdaptOptions& o, ValueId gstat) {
    g.apply(Op::dadapt_adam_d, present({dstate, acc, hyper, gstat}), dadapt_params(o, 0));
}

// ---------------- dadapt_adam_step(param, m, v, hyper, dstate[, gstat]) ----------------

static std::vector<OutSpec> step_infer(const OpCall& c) {
    check_gstat_input(c, 5);
    const int64_t n = c.shape(0).numel();
    check_state_f32(c, 0, "param");
    for (int i = 1; i < 3; i++) {
        check_state_f32(c, i, "moment");
        c.check(c.shape(i).numel() == n, "m and v must have the parameter's element count");
    }
    check_hyper_input(c, 3);
    check_dstate(c, 4);
    return {};
}

static void step_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 5);
    const float* ds = c.in_f32(4);
    if (gate.skip || ds[kDaApplied] == 0.0f) return;
    float* p = mut_f32(c, 0);
    const float* m = c.in_f32(1);
    const float* v = c.in_f32(2);
    const float* h = c.in_f32(3);
    const float eps = h[kEps], wd = h[kWeightDecay];
    const bool decay = (c.p().i[0] & kDaDecouple) && wd != 0.0f;
    const float decay_by = float(-double(wd) * double(ds[kDaDlr]));
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            float pi = p[i];
            if (decay) pi = pi + decay_by * pi;
            p[i] = pi - m[i] / (std::sqrt(v[i]) + eps);
        }
    });
}

void dadapt_adam_step(Graph& g, ValueId param, ValueId m, ValueId v, ValueId hyper, ValueId dstate,
                      const DAdaptOptions& o, ValueId gstat) {
    g.apply(Op::dadapt_adam_step, present({param, m, v, hyper, dstate, gstat}), dadapt_params(o, 0));
}

// ------- dadapt_lion_step(param, grad, m, s, hyper, lead_hyper, dstate, acc[, gstat]) -------
// hyper: the param's group (betas, weight decay, grad scale); lead_hyper: the group with the largest
// lr, whose lr sets dlr = d * lr for every group (DAdaptLion steps groups at lr 0 too).

static std::vector<OutSpec> lion_infer(const OpCall& c) {
    check_gstat_input(c, 8);
    const int64_t n = c.shape(0).numel();
    check_state_f32(c, 0, "param");
    const std::pair<int, const char*> same[] = {{1, "grad"}, {2, "m"}, {3, "s"}};
    for (auto [i, what] : same) {
        check_state_f32(c, i, what);
        c.check(c.shape(i).numel() == n, what, " must have the parameter's element count");
    }
    check_hyper_input(c, 4);
    check_hyper_input(c, 5);
    check_dstate(c, 6);
    check_state_f32(c, 7, "acc");
    c.check(c.p.i[1] >= 0 && 2 * c.p.i[1] + 1 < c.shape(7).numel(), "slot ", c.p.i[1], " is outside acc");
    return {};
}

static void lion_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 8);
    if (gate.skip) return;
    float* p = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    float* m = mut_f32(c, 2);
    float* s = mut_f32(c, 3);
    const float* h = c.in_f32(4);
    const float* ds = c.in_f32(6);
    float* acc = mut_f32(c, 7);
    const DaLionConsts k = dadapt_lion_consts(h, c.in_f32(5), ds);
    double dot = 0.0, sabs = 0.0;
    for (int64_t i = 0, n = c.in[0].numel(); i < n; i++) {
        const float gi = (g[i] * k.gs) * gate.mul;
        const float ci = m[i] * k.b1 + k.c1 * gi;
        const float u = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
        p[i] = p[i] * k.decay + k.step * u;
        m[i] = m[i] * k.b2 + k.cm * gi;
        dot += double(u) * double(s[i]);
        s[i] = s[i] * k.sqrt_b2 + k.cs * u;
        sabs += double(std::fabs(s[i]));
    }
    acc[2 * c.p().i[1]] = float(k.dlr * dot);
    acc[2 * c.p().i[1] + 1] = float(sabs);
}

void dadapt_lion_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId s, ValueId hyper, ValueId lead_hyper,
                      ValueId dstate, ValueId acc, int slot, ValueId gstat) {
    DAdaptOptions o;  // DAdaptLion: growth unbounded, no bias correction
    g.apply(Op::dadapt_lion_step, present({param, grad, m, s, hyper, lead_hyper, dstate, acc, gstat}),
            dadapt_params(o, slot));
}

const OpDef def_dadapt_lion_step{"dadapt_lion_step", "optim_dadapt", lion_infer, step_cost, nullptr, lion_cpu,
                                 kOpNoGrad | kOpMutates};
const OpDef def_dadapt_adam_accum{"dadapt_adam_accum", "optim_dadapt", accum_infer, step_cost, nullptr, accum_cpu,
                                  kOpNoGrad | kOpMutates};
const OpDef def_dadapt_adam_d{"dadapt_adam_d", "optim_dadapt", d_infer, d_cost, nullptr, d_cpu, kOpNoGrad | kOpMutates};
const OpDef def_dadapt_adam_step{"dadapt_adam_step", "optim_dadapt", step_infer, step_cost, nullptr, step_cpu,
                                 kOpNoGrad | kOpMutates};

}  // namespace gl
