// Adafactor (Shazeer & Stern 2018) as transformers.optimization.Adafactor, the one kohya's
// sd-scripts uses, as an in-place op: factored second moment (row and column running means of
// g^2 + eps1) for params with >= 2 dims, a full one for 1-D params, beta2_t = 1 - t^decay_rate,
// update RMS clipping, optional first moment, relative step / parameter scaling / warmup, weight decay.
// The per-tensor reductions (RMS of the param and of the update, row/column means) happen inside.
#include <algorithm>

#include "ggml-lite/ops/optim_common.h"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

// Params: i[0] flags (kRelative | kScaleParam | kWarmup | kHasM | kFactored), i[1..4] the factoring
// O, R, C, I: the param is [O, R, C, I] in memory and factored as [O*I, R, C] (I = 1 except for conv
// weights [Cout, kh, kw, Cin], which PyTorch holds as [Cout, Cin, kh, kw]); f[0] decay_rate, f[1] eps2,
// f[2] clip_threshold.
constexpr int64_t kRelative = 1, kScaleParam = 2, kWarmup = 4, kHasM = 8, kFactored = 16;

struct AdafactorSlots {
    int m = -1, vr = 0, vc = -1, hyper = 0, n_fixed = 0;
    explicit AdafactorSlots(const Params& p) {
        const bool has_m = p.i[0] & kHasM, factored = p.i[0] & kFactored;
        m = has_m ? 2 : -1;
        vr = has_m ? 3 : 2;
        vc = factored ? vr + 1 : -1;
        hyper = vr + (factored ? 2 : 1);
        n_fixed = hyper + 1;
    }
};

// The factoring of a param shape: {O, R, C, I}; R = C = 0 for a 1-D param (unfactored). With
// factor_as (PyTorch's shape, same element order): its leading dims, then its last two.
static std::array<int64_t, 4> factoring(const Shape& s, const Shape& factor_as = {}) {
    if (factor_as.nd >= 2) {
        GL_CHECK(factor_as.numel() == s.numel(), "adafactor: factor_as ", factor_as.str(), " does not hold the ",
                 s.numel(), " elements of the param ", s.str());
        return {factor_as.numel() / (factor_as.dim(-2) * factor_as.dim(-1)), factor_as.dim(-2), factor_as.dim(-1), 1};
    }
    if (s.nd < 2) return {1, 0, 0, 1};
    if (s.nd == 4) return {s.d[0], s.d[1], s.d[2], s.d[3]};
    int64_t o = 1;
    for (int k = 0; k + 2 < s.nd; k++) o *= s.d[size_t(k)];
    return {o, s.d[size_t(s.nd - 2)], s.d[size_t(s.nd - 1)], 1};
}

std::pair<int64_t, int64_t> adafactor_state_sizes(const Shape& param, const Shape& factor_as) {
    auto [o, r, cc, in] = factoring(param, factor_as);
    if (r == 0) return {param.numel(), 0};
    return {o * in * r, o * in * cc};
}

static std::vector<OutSpec> adafactor_infer(const OpCall& c) {
    const AdafactorSlots s(c.p);
    check_gstat_input(c, s.n_fixed);
    check_state_f32(c, 0, "param");
    check_state_f32(c, 1, "grad");
    const int64_t n = c.shape(0).numel();
    c.check(c.shape(1).numel() == n, "grad must have the parameter's element count");
    if (s.m >= 0) {
        check_state_f32(c, s.m, "m");
        c.check(c.shape(s.m).numel() == n, "m must have the parameter's element count");
    }
    const bool factored = c.p.i[0] & kFactored;
    c.check(factored == (c.shape(0).nd >= 2), "params with >= 2 dims take v_row and v_col, 1-D params one full v");
    const int64_t O = c.p.i[1], R = c.p.i[2], C = c.p.i[3], I = c.p.i[4];  // the factoring (adafactor_step)
    if (factored)
        c.check(O >= 1 && R >= 1 && C >= 1 && I >= 1 && O * R * C * I == n, "the factoring must cover the param");
    const int64_t rows = factored ? O * I * R : n, cols = factored ? O * I * C : 0;
    check_state_f32(c, s.vr, factored ? "v_row" : "v");
    c.check(c.shape(s.vr).numel() == rows, factored ? "v_row" : "v", " must hold ", rows, " floats");
    if (factored) {
        check_state_f32(c, s.vc, "v_col");
        c.check(c.shape(s.vc).numel() == cols, "v_col must hold ", cols, " floats");
    }
    check_hyper_input(c, s.hyper);
    c.check(c.p.f[1] > 0.0f && c.p.f[2] > 0.0f, "eps2 and clip_threshold must be positive");
    return {};
}

static void adafactor_cpu(CpuCtx& c) {
    const AdafactorSlots s(c.p());
    const GradGate gate = grad_gate(c, s.n_fixed);
    if (gate.skip) return;
    const int64_t flags = c.p().i[0];
    float* p = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    float* m = s.m >= 0 ? mut_f32(c, s.m) : nullptr;
    float* vr = mut_f32(c, s.vr);
    float* vc = s.vc >= 0 ? mut_f32(c, s.vc) : nullptr;
    const float* h = c.in_f32(s.hyper);
    const int64_t n = c.in[0].numel();
    const float gs = h[kGradScale], eps1 = h[kEps], b1 = h[kBeta1], wd = h[kWeightDecay];
    const double t = h[kStep];

    double pp = 0.0;
    for (int64_t i = 0; i < n; i++) pp += double(p[i]) * double(p[i]);
    const float lr = adafactor_lr(h[kLr], t, std::sqrt(pp / double(n)), flags & kRelative, flags & kScaleParam,
                                  flags & kWarmup, c.p().f[1]);
    const float beta2t = adafactor_beta2t(t, c.p().f[0]), keep = 1.0f - beta2t;
    auto gi = [&](int64_t i) { return (g[i] * gs) * gate.mul; };
    std::vector<float> u(size_t(n), 0.0f);
    if (vc) {
        const int64_t O = c.p().i[1], R = c.p().i[2], C = c.p().i[3], I = c.p().i[4];
        auto at = [&](int64_t b, int64_t r, int64_t col) { return ((b / I * R + r) * C + col) * I + b % I; };
        for (int64_t b = 0; b < O * I; b++) {
            for (int64_t r = 0; r < R; r++) {
                double acc = 0.0;
                for (int64_t col = 0; col < C; col++) {
                    const float x = gi(at(b, r, col));
                    acc += double(x * x + eps1);
                }
                vr[b * R + r] = vr[b * R + r] * beta2t + keep * float(acc / double(C));
            }
            for (int64_t col = 0; col < C; col++) {
                double acc = 0.0;
                for (int64_t r = 0; r < R; r++) {
                    const float x = gi(at(b, r, col));
                    acc += double(x * x + eps1);
                }
                vc[b * C + col] = vc[b * C + col] * beta2t + keep * float(acc / double(R));
            }
            double rsum = 0.0;
            for (int64_t r = 0; r < R; r++) rsum += double(vr[b * R + r]);
            const float rmean = float(rsum / double(R));
            for (int64_t r = 0; r < R; r++)
                for (int64_t col = 0; col < C; col++) {
                    const int64_t i = at(b, r, col);
                    u[size_t(i)] = (1.0f / std::sqrt(vr[b * R + r] / rmean)) * (1.0f / std::sqrt(vc[b * C + col])) * gi(i);
                }
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            const float x = gi(i);
            vr[i] = vr[i] * beta2t + keep * (x * x + eps1);
            u[size_t(i)] = (1.0f / std::sqrt(vr[i])) * x;
        }
    }
    double uu = 0.0;
    for (int64_t i = 0; i < n; i++) uu += double(u[size_t(i)]) * double(u[size_t(i)]);
    const float rms_u = float(std::sqrt(uu / double(n)));
    const float denom = std::max(1.0f, rms_u / c.p().f[2]);
    const float decay = -wd * lr;
    for (int64_t i = 0; i < n; i++) {
        float ui = (u[size_t(i)] / denom) * lr;
        if (m) {
            m[i] = m[i] * b1 + (1.0f - b1) * ui;
            ui = m[i];
        }
        float pi = p[i];
        if (wd != 0.0f) pi = pi + pi * decay;
        p[i] = pi - ui;
    }
}

void adafactor_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v_row, ValueId v_col, ValueId hyper,
                    const AdafactorOptions& o, ValueId gstat, const Shape& factor_as) {
    Params p;
    const Shape s = g.shape(param);
    GL_CHECK(factor_as.nd == 0 || s.nd >= 2, "adafactor: factor_as is for params with >= 2 dims, got ", s.str());
    auto f = factoring(s, factor_as);
    p.i[0] = (o.relative_step ? kRelative : 0) | (o.scale_parameter ? kScaleParam : 0) | (o.warmup_init ? kWarmup : 0) |
             (m != kNoValue ? kHasM : 0) | (v_col != kNoValue ? kFactored : 0);
    for (int k = 0; k < 4; k++) p.i[size_t(1 + k)] = f[size_t(k)];
    p.f[0] = o.decay_rate;
    p.f[1] = o.eps2;
    p.f[2] = o.clip_threshold;
    g.apply(Op::adafactor_step, present({param, grad, m, v_row, v_col, hyper, gstat}), p);
}

const OpDef def_adafactor_step{"adafactor_step", "optim_adafactor", adafactor_infer, step_cost, nullptr, adafactor_cpu,
                               kOpNoGrad | kOpMutates};

}  // namespace gl
