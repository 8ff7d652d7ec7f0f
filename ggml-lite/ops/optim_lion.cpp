// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as lion-pytorch's
// update_fn, as an in-place op: decay, sign step, then the momentum update.
#include "ggml-lite/ops/optim_common.h"

namespace gl {

// ---------------- lion_step(params..., grads..., m..., hyper[, gstat]); p.i[1] = N ----------------
// N tensors of one parameter group in one node (one launch on CUDA). sign(0) = 0 (torch's sgn); a
// NaN interpolation also gives 0, but the NaN still reaches m, so pass gstat to skip steps with
// non-finite gradients.

static std::vector<OutSpec> lion_infer(const OpCall& c) {
    const int n = multi_count(c, 3);
    check_gstat_input(c, 3 * n + 1);
    for (int k = 0; k < n; k++) {
        check_state_f32(c, k, "param");
        check_state_f32(c, n + k, "grad");
        check_state_f32(c, 2 * n + k, "m");
        const int64_t e = c.shape(k).numel();
        for (int i = 1; i < 3; i++)
            c.check(c.shape(i * n + k).numel() == e, "grad and m must have the parameter's element count");
    }
    check_hyper_input(c, 3 * n);
    return {};
}

static void lion_cpu(CpuCtx& c) {
    const int n = int(c.p().i[1]);
    const GradGate gate = grad_gate(c, 3 * n + 1);
    if (gate.skip) return;
    const float* h = c.in_f32(3 * n);
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], gs = h[kGradScale];
    const float decay = 1.0f - lr * h[kWeightDecay];
    for (int k = 0; k < n; k++) {
        float* p = mut_f32(c, k);
        const float* g = c.in_f32(n + k);
        float* m = mut_f32(c, 2 * n + k);
        parallel_for(c.in[size_t(k)].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; i++) {
                const float gi = (g[i] * gs) * gate.mul;
                const float ci = m[i] * b1 + (1.0f - b1) * gi;
                const float u = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
                p[i] = p[i] * decay - lr * u;
                m[i] = m[i] * b2 + (1.0f - b2) * gi;
            }
        });
    }
}

void lion_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
               const std::vector<ValueId>& m, ValueId hyper, ValueId gstat) {
    Params p;
    p.i[1] = int64_t(params.size());
    g.apply(Op::lion_step, multi_inputs({&params, &grads, &m}, {hyper, gstat}), p);
}

void lion_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId hyper, ValueId gstat) {
    lion_step(g, std::vector<ValueId>{param}, {grad}, {m}, hyper, gstat);
}

const OpDef def_lion_step{"lion_step", "optim_lion", lion_infer, multi_step_cost, nullptr, lion_cpu,
                          kOpNoGrad | kOpMutates};

}  // namespace gl
