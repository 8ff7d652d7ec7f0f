// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as lion-pytorch's
// update_fn, as an in-place op: decay, sign step, then the momentum update.
#include "ggml-lite/ops/optim_common.h"

namespace gl {

// ---------------- lion_step(param, grad, m, hyper[, gstat]) ----------------
// sign(0) = 0 (torch's sgn); a NaN interpolation also gives 0, but the NaN still reaches m, so
// pass gstat to skip steps with non-finite gradients.

static std::vector<OutSpec> lion_infer(const OpCall& c) {
    check_gstat_input(c, 4);
    check_state_f32(c, 0, "param");
    check_state_f32(c, 1, "grad");
    check_state_f32(c, 2, "m");
    check_hyper_input(c, 3);
    int64_t n = c.shape(0).numel();
    for (int i = 1; i < 3; i++) c.check(c.shape(i).numel() == n, "grad and m must have the parameter's element count");
    return {};
}

static void lion_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 4);
    if (gate.skip) return;
    float* p = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    float* m = mut_f32(c, 2);
    const float* h = c.in_f32(3);
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], gs = h[kGradScale];
    const float decay = 1.0f - lr * h[kWeightDecay];
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const float gi = (g[i] * gs) * gate.mul;
            const float ci = m[i] * b1 + (1.0f - b1) * gi;
            const float u = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
            p[i] = p[i] * decay - lr * u;
            m[i] = m[i] * b2 + (1.0f - b2) * gi;
        }
    });
}

void lion_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId hyper, ValueId gstat) {
    g.apply(Op::lion_step, present({param, grad, m, hyper, gstat}));
}

const OpDef def_lion_step{"lion_step", "optim_lion", lion_infer, step_cost, nullptr, lion_cpu, kOpNoGrad | kOpMutates};

}  // namespace gl
