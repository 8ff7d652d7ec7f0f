// Schedule-free AdamW and SGD (Defazio et al. 2024, "The Road Less Scheduled") as schedulefree 1.4's
// AdamWScheduleFree / SGDScheduleFree step(), in place. The parameter holds y, the point where the
// gradient is taken; z is the base sequence; the average x, which is what gets saved, is not stored
// (x = lerp(y, z, 1 - 1/beta1): optim::Optimizer::to_eval). A group's step is schedulefree_step over
// each of its params, then one schedulefree_advance that stores the group's new weight sum: every step
// op reads the old one, so node order carries the ordering.
#include "ggml-lite/ops/optim_common.h"
#include "ggml-lite/ops/optim_schedulefree.h"

namespace gl {

// Params of both: i[0] 0 SGD, 1 AdamW, 2 RAdam; i[1] silent_sgd_phase; f[0] r, f[1] weight_lr_power,
// f[2] warmup_steps.
static Params sf_params(const ScheduleFreeOptions& o) {
    GL_CHECK(o.adam || !o.radam, "schedulefree: RAdam is an Adam variant (set adam too)");
    Params p;
    p.i[0] = o.radam ? 2 : (o.adam ? 1 : 0);
    p.i[1] = o.silent_sgd_phase ? 1 : 0;
    p.f[0] = o.r;
    p.f[1] = o.weight_lr_power;
    p.f[2] = o.warmup_steps;
    return p;
}

static void check_sfstate(const OpCall& c, int i) {
    check_state_f32(c, i, "sfstate");
    c.check(c.shape(i).numel() == kSfStateSize, "sfstate must hold ", int(kSfStateSize), " floats");
    c.check(c.p.f[2] >= 0.0f && std::isfinite(c.p.f[2]), "warmup_steps must be >= 0");
}

static SfScalars sf_scalars(CpuCtx& c, const float* sf, const float* h, bool* adaptive) {
    *adaptive = c.p().i[0] == 1;
    const double factor = c.p().i[0] == 2 ? radam_rect(h[kBeta2], h[kStep], c.p().i[1] != 0, adaptive) : 1.0;
    return schedulefree_scalars(sf, h, c.p().f[0], c.p().f[1], c.p().f[2], factor);
}

// ------- schedulefree_step(param, grad, z, [v,] hyper, sfstate[, gstat]); v only for AdamW -------

static int sf_fixed(const OpCall& c) { return c.p.i[0] ? 6 : 5; }

static std::vector<OutSpec> step_infer(const OpCall& c) {
    const int fixed = sf_fixed(c);
    check_gstat_input(c, fixed);
    const int64_t n = c.shape(0).numel();
    check_state_f32(c, 0, "param");
    for (int i = 1; i < fixed - 2; i++) {
        check_state_f32(c, i, i == 1 ? "grad" : i == 2 ? "z" : "v");
        c.check(c.shape(i).numel() == n, "grad, z and v must have the parameter's element count");
    }
    check_hyper_input(c, fixed - 2);
    check_sfstate(c, fixed - 1);
    return {};
}

static void step_cpu(CpuCtx& c) {
    const bool adam = c.p().i[0] != 0;
    const int fixed = adam ? 6 : 5;
    const GradGate gate = grad_gate(c, fixed);
    if (gate.skip) return;
    float* y = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    float* z = mut_f32(c, 2);
    float* v = adam ? mut_f32(c, 3) : nullptr;
    const float* h = c.in_f32(fixed - 2);
    bool adaptive = false;
    const SfScalars s = sf_scalars(c, c.in_f32(fixed - 1), h, &adaptive);
    const float b1 = h[kBeta1], b2 = h[kBeta2], eps = h[kEps], wd = h[kWeightDecay], gs = h[kGradScale];
    const float ckp1 = float(s.ckp1), lr = float(s.lr), ystep = float(s.lr * (double(b1) * (1.0 - s.ckp1) - 1.0));
    const float cv = float(1.0 - double(b2)), bc2 = float(1.0 - std::pow(double(b2), double(h[kStep])));
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            float gi = (g[i] * gs) * gate.mul;
            if (adam) {
                v[i] = v[i] * b2 + cv * gi * gi;
                if (adaptive) gi = gi / (std::sqrt(v[i] / bc2) + eps);
            }
            if (wd != 0.0f) gi = gi + wd * y[i];
            y[i] = torch_lerp(y[i], z[i], ckp1) + ystep * gi;
            z[i] = z[i] - lr * gi;
        }
    });
}

void schedulefree_step(Graph& g, ValueId param, ValueId grad, ValueId z, ValueId v, ValueId hyper, ValueId sfstate,
                       const ScheduleFreeOptions& o, ValueId gstat) {
    GL_CHECK((v != kNoValue) == o.adam, "schedulefree_step: AdamW takes v, SGD does not");
    g.apply(Op::schedulefree_step, present({param, grad, z, v, hyper, sfstate, gstat}), sf_params(o));
}

// ---------------- schedulefree_advance(sfstate, hyper[, gstat]) ----------------

static std::vector<OutSpec> advance_infer(const OpCall& c) {
    check_gstat_input(c, 2);
    check_sfstate(c, 0);
    check_hyper_input(c, 1);
    return {};
}

static void advance_cpu(CpuCtx& c) {
    if (grad_gate(c, 2).skip) return;
    float* sf = mut_f32(c, 0);
    bool adaptive = false;
    schedulefree_store(sf, sf_scalars(c, sf, c.in_f32(1), &adaptive));
}

static Cost advance_cost(const OpCall&) { return {16.0, 64.0}; }

void schedulefree_advance(Graph& g, ValueId sfstate, ValueId hyper, const ScheduleFreeOptions& o, ValueId gstat) {
    g.apply(Op::schedulefree_advance, present({sfstate, hyper, gstat}), sf_params(o));
}

const OpDef def_schedulefree_step{"schedulefree_step", "optim_schedulefree", step_infer, step_cost, nullptr, step_cpu,
                                  kOpNoGrad | kOpMutates};
const OpDef def_schedulefree_advance{"schedulefree_advance", "optim_schedulefree", advance_infer, advance_cost, nullptr,
                                     advance_cpu, kOpNoGrad | kOpMutates};

}  // namespace gl
