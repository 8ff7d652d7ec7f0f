// SGD with momentum (and Nesterov's variant) as torch.optim.SGD's single-tensor step, in place:
// g += wd * p; buf = g on the first step, else momentum * buf + (1 - dampening) * g; the step is
// g + momentum * buf (nesterov) or buf; p -= lr * step.
#include "ggml-lite/ops/optim_common.h"

namespace gl {

// ---------------- sgd_step(param, grad, buf, hyper[, gstat]) ----------------
// Params: f[0] momentum (> 0), f[1] dampening, i[0] nesterov. hyper: lr, weight_decay, step (1: the
// buffer starts as the gradient, as torch's momentum_buffer None), grad_scale.

static std::vector<OutSpec> sgd_infer(const OpCall& c) {
    check_gstat_input(c, 4);
    check_state_f32(c, 0, "param");
    check_state_f32(c, 1, "grad");
    check_state_f32(c, 2, "buf");
    check_hyper_input(c, 3);
    const int64_t n = c.shape(0).numel();
    for (int i = 1; i < 3; i++) c.check(c.shape(i).numel() == n, "grad and buf must have the parameter's element count");
    c.check(c.p.f[0] > 0.0f && c.p.f[0] <= 1.0f, "momentum must lie in (0, 1]");
    c.check(c.p.i[0] == 0 || c.p.f[1] == 0.0f, "Nesterov momentum requires zero dampening (as torch)");
    return {};
}

static void sgd_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 4);
    if (gate.skip) return;
    float* p = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    float* buf = mut_f32(c, 2);
    const float* h = c.in_f32(3);
    const float lr = h[kLr], wd = h[kWeightDecay], gs = h[kGradScale];
    const float momentum = c.p().f[0], keep = 1.0f - c.p().f[1];
    const bool first = h[kStep] == 1.0f, nesterov = c.p().i[0] != 0;
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            float gi = (g[i] * gs) * gate.mul;
            if (wd != 0.0f) gi = gi + wd * p[i];
            const float b = first ? gi : buf[i] * momentum + keep * gi;
            const float step = nesterov ? gi + momentum * b : b;
            p[i] = p[i] - lr * step;
            buf[i] = b;
        }
    });
}

void sgd_step(Graph& g, ValueId param, ValueId grad, ValueId buf, ValueId hyper, float momentum, float dampening,
              bool nesterov, ValueId gstat) {
    Params p;
    p.f[0] = momentum;
    p.f[1] = dampening;
    p.i[0] = nesterov ? 1 : 0;
    g.apply(Op::sgd_step, present({param, grad, buf, hyper, gstat}), p);
}

const OpDef def_sgd_step{"sgd_step", "optim_sgd", sgd_infer, step_cost, nullptr, sgd_cpu, kOpNoGrad | kOpMutates};

}  // namespace gl
