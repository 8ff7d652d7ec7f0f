// Optimizer steps as ops: AdamW and grad_stats, the global gradient statistics (norm for clipping,
// loss-scale undo, inf/NaN detection) that every step op can take as an optional trailing input.
// The elementwise steps (AdamW, Lion, 8-bit AdamW) take all tensors of a parameter group at once.
// (Lion, Adafactor, Prodigy: ops/optim_<name>.cpp; 8-bit AdamW: ops/adam8bit.cpp.) The steps update
// the parameter and its state in place and have no outputs, so a training step (forward, backward,
// update) is one graph that a backend can capture whole.
#include <algorithm>

#include "ggml-lite/ops/optim_common.h"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

// ------- adamw_step(params..., grads..., m..., v..., hyper[, gstat]); p.i[0] = decay_after, p.i[1] = N -------
// N tensors of one parameter group in one node (one launch on CUDA), each element updated as the
// single-tensor step does. A non-finite gradient element makes its parameter and moments NaN; pass
// gstat to skip such steps.

static std::vector<OutSpec> adamw_infer(const OpCall& c) {
    const int n = multi_count(c, 4);
    check_gstat_input(c, 4 * n + 1);
    for (int k = 0; k < n; k++) {
        check_state_f32(c, k, "param");
        check_state_f32(c, n + k, "grad");
        check_state_f32(c, 2 * n + k, "m");
        check_state_f32(c, 3 * n + k, "v");
        const int64_t e = c.shape(k).numel();
        for (int i = 1; i < 4; i++)
            c.check(c.shape(i * n + k).numel() == e, "grad, m and v must have the parameter's element count");
    }
    check_hyper_input(c, 4 * n);
    return {};
}

static void adamw_cpu(CpuCtx& c) {
    const int n = int(c.p().i[1]);
    const GradGate gate = grad_gate(c, 4 * n + 1);
    if (gate.skip) return;
    const float* h = c.in_f32(4 * n);
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], eps = h[kEps], wd = h[kWeightDecay], gs = h[kGradScale];
    const double t = h[kStep];
    const float step_size = float(lr / (1.0 - std::pow(double(b1), t)));
    const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(b2), t)));
    const float decay = 1.0f - lr * wd;
    const bool after = c.p().i[0] != 0;
    for (int k = 0; k < n; k++) {
        float* p = mut_f32(c, k);
        const float* g = c.in_f32(n + k);
        float* m = mut_f32(c, 2 * n + k);
        float* v = mut_f32(c, 3 * n + k);
        parallel_for(c.in[size_t(k)].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; i++) {
                float gi = (g[i] * gs) * gate.mul;
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
}

void adamw_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                const std::vector<ValueId>& m, const std::vector<ValueId>& v, ValueId hyper, bool decay_after,
                ValueId gstat) {
    Params p;
    p.i[0] = decay_after ? 1 : 0;
    p.i[1] = int64_t(params.size());
    g.apply(Op::adamw_step, multi_inputs({&params, &grads, &m, &v}, {hyper, gstat}), p);
}

void adamw_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId hyper, bool decay_after,
                ValueId gstat) {
    adamw_step(g, std::vector<ValueId>{param}, {grad}, {m}, {v}, hyper, decay_after, gstat);
}

const OpDef def_adamw_step{"adamw_step", "optim", adamw_infer, multi_step_cost, nullptr, adamw_cpu, kOpNoGrad | kOpMutates};

// ------- grad_stats(grads...[, loss_scale]) -> gstat f32[4]; p.i[0] = has loss scale, p.f[0] = max_norm -------

static std::vector<OutSpec> grad_stats_infer(const OpCall& c) {
    const bool has_ls = c.p.i[0] != 0;
    const int n_grads = c.n_in() - (has_ls ? 1 : 0);
    c.check(n_grads >= 1, "needs at least one gradient");
    for (int i = 0; i < n_grads; i++) c.check(c.dtype(i) == DType::f32, "gradients must be f32");
    if (has_ls) {
        c.check(c.dtype(n_grads) == DType::f32 && c.shape(n_grads).numel() == 1, "loss_scale must be one f32");
    }
    c.check(std::isfinite(c.p.f[0]), "max_norm must be finite (<= 0: no clipping)");
    return {dense(DType::f32, Shape{kGstatSize})};
}

static Cost grad_stats_cost(const OpCall& c) {
    double n = 0;
    for (int i = 0; i < c.n_in(); i++) n += double(c.shape(i).numel());
    return {2.0 * n, 4.0 * n};
}

// Sum of squares in double, tensor by tensor in input order, element by element: the order the
// CUDA kernel's fixed partition reproduces up to double rounding.
static void grad_stats_cpu(CpuCtx& c) {
    const bool has_ls = c.p().i[0] != 0;
    const int n_grads = c.n_in() - (has_ls ? 1 : 0);
    double sumsq = 0.0;
    for (int k = 0; k < n_grads; k++) {
        const float* x = c.in_f32(k);
        const int64_t n = c.in[size_t(k)].numel();
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) s += double(x[i]) * double(x[i]);
        sumsq += s;
    }
    const float ls = has_ls ? c.in_f32(n_grads)[0] : 1.0f;
    gstat_finish(sumsq, ls, c.p().f[0], c.out_f32(0));
}

ValueId grad_stats(Graph& g, const std::vector<ValueId>& grads, ValueId loss_scale, float max_norm) {
    Params p;
    p.i[0] = loss_scale != kNoValue ? 1 : 0;
    p.f[0] = max_norm;
    std::vector<ValueId> in = grads;
    if (loss_scale != kNoValue) in.push_back(loss_scale);
    return g.apply1(Op::grad_stats, in, p);
}

const OpDef def_grad_stats{"grad_stats", "optim", grad_stats_infer, grad_stats_cost, nullptr, grad_stats_cpu, kOpNoGrad};

}  // namespace gl
