// Prodigy (Mishchenko & Defazio 2023, "Prodigy: An Expeditiously Adaptive Parameter-Free Learner") as
// prodigyopt 1.1's step(), split into in-place ops so a step stays one capturable graph:
//   prodigy_accum  (per param, first loop)  Adam EMAs and s with the old d; the param's dot(g, p0 - p)
//                                           and sum|s| into its own slot of acc (no float atomics)
//   prodigy_d      (once)                   sums the slots in slot order, updates d in pstate
//   prodigy_step   (per param, second loop) the update with the new d and the step's dlr
// Node order carries the ordering: every accum before prodigy_d before every step.
#include <algorithm>

#include "ggml-lite/ops/optim_common.h"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

// Params of all three: i[0] flags, i[1] the slot (accum); f[0] beta3 (< 0: sqrt(beta2)), f[1] d0,
// f[2] d_coef, f[3] growth_rate.
constexpr int64_t kPdHasM = 1, kPdDecouple = 2, kPdBiasCorrection = 4, kPdSafeguard = 8;

static Params prodigy_params(const ProdigyOptions& o, bool has_m, int slot) {
    Params p;
    p.i[0] = (has_m ? kPdHasM : 0) | (o.decouple ? kPdDecouple : 0) | (o.use_bias_correction ? kPdBiasCorrection : 0) |
             (o.safeguard_warmup ? kPdSafeguard : 0);
    p.i[1] = slot;
    p.f = {o.beta3, o.d0, o.d_coef, o.growth_rate};
    return p;
}

static double beta3_of(const Params& p, const float* h) { return p.f[0] < 0.0f ? std::sqrt(double(h[kBeta2])) : double(p.f[0]); }

static void check_pstate(const OpCall& c, int i) {
    check_state_f32(c, i, "pstate");
    c.check(c.shape(i).numel() == kProdigyStateSize, "pstate must hold ", int(kProdigyStateSize), " floats");
}

static void check_options(const OpCall& c) {
    c.check(c.p.f[1] > 0.0f && std::isfinite(c.p.f[1]), "d0 must be positive and finite");
    c.check(c.p.f[2] > 0.0f && std::isfinite(c.p.f[2]), "d_coef must be positive and finite");
    c.check(c.p.f[3] >= 1.0f, "growth_rate must be >= 1 (inf: unbounded)");
}

// ------- prodigy_accum(param, grad, [m], v, s, p0, hyper, pstate, acc[, gstat]) -------

struct AccumSlots {
    int m, v, s, p0, hyper, pstate, acc, n_fixed;
    explicit AccumSlots(const Params& p) {
        const int has_m = (p.i[0] & kPdHasM) ? 1 : 0;
        m = has_m ? 2 : -1;
        v = 2 + has_m;
        s = v + 1;
        p0 = v + 2;
        hyper = v + 3;
        pstate = v + 4;
        acc = v + 5;
        n_fixed = v + 6;
    }
};

static std::vector<OutSpec> accum_infer(const OpCall& c) {
    const AccumSlots k(c.p);
    check_gstat_input(c, k.n_fixed);
    check_options(c);
    const int64_t n = c.shape(0).numel();
    check_state_f32(c, 0, "param");
    check_state_f32(c, 1, "grad");
    const std::pair<int, const char*> same[] = {{1, "grad"}, {k.m, "m"}, {k.v, "v"}, {k.s, "s"}, {k.p0, "p0"}};
    for (auto [i, what] : same) {
        if (i < 0) continue;
        check_state_f32(c, i, what);
        c.check(c.shape(i).numel() == n, what, " must have the parameter's element count");
    }
    check_hyper_input(c, k.hyper);
    check_pstate(c, k.pstate);
    check_state_f32(c, k.acc, "acc");
    c.check(c.p.i[1] >= 0 && 2 * c.p.i[1] + 1 < c.shape(k.acc).numel(), "slot ", c.p.i[1], " is outside acc");
    return {};
}

static void accum_cpu(CpuCtx& c) {
    const AccumSlots k(c.p());
    const GradGate gate = grad_gate(c, k.n_fixed);
    if (gate.skip) return;
    const int64_t flags = c.p().i[0];
    float* p = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    float* m = k.m >= 0 ? mut_f32(c, k.m) : nullptr;
    float* v = mut_f32(c, k.v);
    float* s = mut_f32(c, k.s);
    const float* p0 = c.in_f32(k.p0);
    const float* h = c.in_f32(k.hyper);
    const float* ps = c.in_f32(k.pstate);
    float* acc = mut_f32(c, k.acc);
    const float b1 = h[kBeta1], b2 = h[kBeta2], wd = h[kWeightDecay], gs = h[kGradScale], d0 = c.p().f[1];
    const double d = ps[kPdD];
    const double dlr = prodigy_dlr(d, h[kLr], b1, b2, h[kStep], flags & kPdBiasCorrection);
    const float beta3 = float(beta3_of(c.p(), h));
    const float cm = float(d * (1.0 - double(b1))), cv = float(d * d * (1.0 - double(b2)));
    const float cs = float((d / double(d0)) * ((flags & kPdSafeguard) ? d : dlr));
    const bool coupled = !(flags & kPdDecouple) && wd != 0.0f;
    double dot = 0.0, sabs = 0.0;
    for (int64_t i = 0, n = c.in[0].numel(); i < n; i++) {
        float gi = (g[i] * gs) * gate.mul;
        if (coupled) gi = gi + wd * p[i];
        dot += double(gi) * double(p0[i] - p[i]);
        if (m) m[i] = m[i] * b1 + cm * gi;
        v[i] = v[i] * b2 + cv * (gi * gi);
        s[i] = s[i] * beta3 + cs * gi;
        sabs += double(std::fabs(s[i]));
    }
    acc[2 * c.p().i[1]] = float(dot);
    acc[2 * c.p().i[1] + 1] = float(sabs);
}

void prodigy_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId s, ValueId p0, ValueId hyper,
                   ValueId pstate, ValueId acc, int slot, const ProdigyOptions& o, ValueId gstat) {
    g.apply(Op::prodigy_accum, present({param, grad, m, v, s, p0, hyper, pstate, acc, gstat}),
            prodigy_params(o, m != kNoValue, slot));
}

// ---------------- prodigy_d(pstate, acc, hyper[, gstat]) ----------------

static std::vector<OutSpec> d_infer(const OpCall& c) {
    check_gstat_input(c, 3);
    check_options(c);
    check_pstate(c, 0);
    check_state_f32(c, 1, "acc");
    c.check(c.shape(1).numel() % 2 == 0 && c.shape(1).numel() > 0, "acc must hold two floats per parameter slot");
    check_hyper_input(c, 2);
    return {};
}

static void d_cpu(CpuCtx& c) {
    if (grad_gate(c, 3).skip) return;
    float* ps = mut_f32(c, 0);
    const float* acc = c.in_f32(1);
    const float* h = c.in_f32(2);
    double dot = 0.0, sabs = 0.0;
    for (int64_t k = 0, n = c.in[1].numel() / 2; k < n; k++) {
        dot += double(acc[2 * k]);
        sabs += double(acc[2 * k + 1]);
    }
    const Params& p = c.p();
    prodigy_update_d(ps, dot, sabs, h[kLr], h[kBeta1], h[kBeta2], h[kStep], float(beta3_of(p, h)), p.f[1], p.f[2], p.f[3],
                     p.i[0] & kPdBiasCorrection);
}

static Cost d_cost(const OpCall& c) { return {2.0 * double(c.shape(1).numel()), 4.0 * double(c.shape(1).numel())}; }

void prodigy_d(Graph& g, ValueId pstate, ValueId acc, ValueId hyper, const ProdigyOptions& o, ValueId gstat) {
    g.apply(Op::prodigy_d, present({pstate, acc, hyper, gstat}), prodigy_params(o, false, 0));
}

// ---------------- prodigy_step(param, grad, [m], v, hyper, pstate[, gstat]) ----------------

static std::vector<OutSpec> step_infer(const OpCall& c) {
    const int has_m = (c.p.i[0] & kPdHasM) ? 1 : 0;
    check_gstat_input(c, 5 + has_m);
    check_options(c);
    const int64_t n = c.shape(0).numel();
    check_state_f32(c, 0, "param");
    for (int i = 1; i < 3 + has_m; i++) {
        check_state_f32(c, i, i == 1 ? "grad" : "moment");
        c.check(c.shape(i).numel() == n, "grad, m and v must have the parameter's element count");
    }
    check_hyper_input(c, 3 + has_m);
    check_pstate(c, 4 + has_m);
    return {};
}

static void step_cpu(CpuCtx& c) {
    const int64_t flags = c.p().i[0];
    const int has_m = (flags & kPdHasM) ? 1 : 0;
    const GradGate gate = grad_gate(c, 5 + has_m);
    const float* ps = c.in_f32(4 + has_m);
    if (gate.skip || ps[kPdApplied] == 0.0f) return;
    float* p = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    const float* m = has_m ? c.in_f32(2) : nullptr;
    const float* v = c.in_f32(2 + has_m);
    const float* h = c.in_f32(3 + has_m);
    const double d = ps[kPdD], dlr = ps[kPdDlr];
    const float wd = h[kWeightDecay], gs = h[kGradScale];
    const float deps = float(d * double(h[kEps]));
    const bool decouple = flags & kPdDecouple;
    const float decay = float(-double(wd) * dlr), step = float(-dlr), step_g = float(-dlr * d);
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const float denom = std::sqrt(v[i]) + deps;
            float pi = p[i];
            if (m) {
                if (decouple && wd != 0.0f) pi = pi + decay * pi;
                p[i] = pi + step * (m[i] / denom);
            } else {
                float gi = (g[i] * gs) * gate.mul;
                if (!decouple && wd != 0.0f) gi = gi + wd * pi;
                if (decouple && wd != 0.0f) pi = pi + decay * pi;
                p[i] = pi + step_g * (gi / denom);
            }
        }
    });
}

void prodigy_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId hyper, ValueId pstate,
                  const ProdigyOptions& o, ValueId gstat) {
    g.apply(Op::prodigy_step, present({param, grad, m, v, hyper, pstate, gstat}), prodigy_params(o, m != kNoValue, 0));
}

const OpDef def_prodigy_accum{"prodigy_accum", "optim_prodigy", accum_infer, step_cost, nullptr, accum_cpu,
                              kOpNoGrad | kOpMutates};
const OpDef def_prodigy_d{"prodigy_d", "optim_prodigy", d_infer, d_cost, nullptr, d_cpu, kOpNoGrad | kOpMutates};
const OpDef def_prodigy_step{"prodigy_step", "optim_prodigy", step_infer, step_cost, nullptr, step_cpu,
                             kOpNoGrad | kOpMutates};

}  // namespace gl
