// Optimizer steps as ops (8-bit AdamW lives in ops/adam8bit.cpp). They update the
// parameter and its state in place and have no outputs, so a training step (forward,
// backward, update) is one graph that a backend can capture whole.
#include <algorithm>
#include <mutex>

#include "ggml-lite/ops/optim_common.h"

namespace gl {

// ---------------- adamw_step(param, grad, m, v, hyper); p.i[0] = decay_after ----------------

static std::vector<OutSpec> adamw_infer(const OpCall& c) {
    c.check(c.n_in() == 5, "takes param, grad, m, v, hyper");
    check_state_f32(c, 0, "param");
    check_state_f32(c, 1, "grad");
    check_state_f32(c, 2, "m");
    check_state_f32(c, 3, "v");
    check_hyper_input(c, 4);
    int64_t n = c.shape(0).numel();
    for (int i = 1; i < 4; i++) c.check(c.shape(i).numel() == n, "grad, m and v must have the parameter's element count");
    return {};
}

static void adamw_cpu(CpuCtx& c) {
    float* p = static_cast<float*>(c.in[0].data) + c.in[0].layout.offset;
    const float* g = c.in_f32(1);
    float* m = static_cast<float*>(c.in[2].data) + c.in[2].layout.offset;
    float* v = static_cast<float*>(c.in[3].data) + c.in[3].layout.offset;
    const float* h = c.in_f32(4);
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], eps = h[kEps], wd = h[kWeightDecay], gs = h[kGradScale];
    const double t = h[kStep];
    const float step_size = float(lr / (1.0 - std::pow(double(b1), t)));
    const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(b2), t)));
    const float decay = 1.0f - lr * wd;
    const bool after = c.p().i[0] != 0;
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            float gi = g[i] * gs;
            float pi = after ? p[i] : p[i] * decay;
            float mi = m[i] + (1.0f - b1) * (gi - m[i]);
            float vi = v[i] * b2 + (1.0f - b2) * (gi * gi);
            float denom = std::sqrt(vi) / bc2_sqrt + eps;
            pi = pi - step_size * (mi / denom);
            p[i] = after ? pi * decay : pi;
            m[i] = mi;
            v[i] = vi;
        }
    });
}

void adamw_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId hyper, bool decay_after) {
    Params p;
    p.i[0] = decay_after ? 1 : 0;
    g.apply(Op::adamw_step, {param, grad, m, v, hyper}, p);
}

const OpDef def_adamw_step{"adamw_step", "optim", adamw_infer, step_cost, nullptr, adamw_cpu, kOpNoGrad | kOpMutates};

}  // namespace gl
