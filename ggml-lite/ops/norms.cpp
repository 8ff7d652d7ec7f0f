// Normalisation and softmax: group_norm (NHWC, optional fused SiLU), layer_norm (last dim),
// softmax (last dim), and their gradient helpers. Forward ops also output the per-group or
// per-row mean and 1/std in f32 so that backward does not recompute the statistics.
// Statistics accumulate in double; y is computed from the f32-rounded mean and rstd that are
// saved, so forward and backward see exactly the same normalisation.
#include "ggml-lite/ops/family.h"
#include "ggml-lite/ops/norm_params.h"
#include "ggml-lite/ops/residual.h"

namespace gl {

namespace {

bool finite_f(float v) { return std::isfinite(v); }

double sigmoid(double h) { return 1.0 / (1.0 + std::exp(-h)); }

// Dense f32 view of [N, P, C] where P is every position between the batch and channel dims.
struct GnDims {
    int64_t N, P, C, G, Cg;
};
GnDims gn_dims(const Shape& x, int64_t groups) {
    GnDims d{};
    d.N = x[0];
    d.C = x.last();
    d.P = x.numel() / (d.N * d.C);
    d.G = groups;
    d.Cg = d.C / groups;
    return d;
}

// Checks that input xi is floating point and inputs gi, bi (gamma, beta) are floating point [C].
void check_affine(const OpCall& c, int xi, int gi, int bi, int64_t C) {
    c.check(dtype_is_float(c.dtype(gi)) && dtype_is_float(c.dtype(bi)), "gamma and beta must be floating point");
    c.check(c.shape(gi) == Shape{C}, "gamma must be [", C, "], got ", c.shape(gi));
    c.check(c.shape(bi) == Shape{C}, "beta must be [", C, "], got ", c.shape(bi));
    c.check(dtype_is_float(c.dtype(xi)), "x must be floating point");
}

// The grad ops' inputs: (gy, x, gamma, beta, mean, rstd), then a residual when dx comes alone.
void check_norm_grad_call(const OpCall& c) {
    const int64_t dx_only = c.p.i[size_t(kNormDxOnly)];
    c.check(dx_only == 0 || dx_only == 1, "the dx-only flag must be 0 or 1");
    c.check(dx_only || !has_residual(c.p), "a residual needs dx alone (frozen gamma and beta)");
    c.check(c.n_in() == 6 + (has_residual(c.p) ? 1 : 0),
            has_residual(c.p) ? "takes (gy, x, gamma, beta, mean, rstd, residual)" : "takes (gy, x, gamma, beta, mean, rstd)");
}

// {dx, dgamma, dbeta}, or {dx} alone; dx then may take a residual.
std::vector<OutSpec> norm_grad_outputs(const OpCall& c) {
    std::vector<OutSpec> out{dense(c.dtype(1), c.shape(1))};
    if (norm_dx_only(c.p)) {
        check_residual(c, out[0]);
        return out;
    }
    out.push_back(dense(c.dtype(2), c.shape(2)));
    out.push_back(dense(c.dtype(3), c.shape(3)));
    return out;
}

}  // namespace

// ---------------- group_norm: p.i[0] groups, p.i[1] fused SiLU (0/1), p.f[0] eps ----------------
// inputs (x [N, ..., C], gamma [C], beta [C]); outputs {y (x's dtype and shape), mean [N, G] f32, rstd [N, G] f32}

static void gn_check_common(const OpCall& c) {
    const Shape& x = c.shape(0);
    c.check(x.nd >= 2, "x must be [N, ..., C] with at least 2 dims");
    c.check(x.numel() > 0, "x must not be empty");
    int64_t G = c.p.i[0];
    c.check(G >= 1, "groups must be >= 1, got ", G);
    c.check(x.last() % G == 0, "channels ", x.last(), " are not divisible by groups ", G);
    c.check(finite_f(c.p.f[0]) && c.p.f[0] >= 0.0f, "eps must be finite and >= 0");
}

static std::vector<OutSpec> group_norm_infer(const OpCall& c) {
    c.check(c.n_in() == 3, "takes (x, gamma, beta)");
    gn_check_common(c);
    const Shape& x = c.shape(0);
    check_affine(c, 0, 1, 2, x.last());
    Shape st{x[0], c.p.i[0]};
    return {dense(c.dtype(0), x), dense(DType::f32, st), dense(DType::f32, st)};
}
static Cost group_norm_cost(const OpCall& c) {
    double n = double(c.shape(0).numel());
    double flops = (c.p.i[1] ? 10.0 : 6.0) * n;  // two statistics passes plus the affine map (+ SiLU)
    double st = 2.0 * 4.0 * double(c.shape(0)[0] * c.p.i[0]);
    return {flops, 2.0 * call_bytes_in(c, 0) + call_bytes_in(c, 1) + call_bytes_in(c, 2) + st};
}

static void group_norm_cpu(CpuCtx& c) {
    const GnDims D = gn_dims(c.in_shape(0), c.p().i[0]);
    const bool act = c.p().i[1] != 0;
    const float eps = c.p().f[0];
    const float* x = c.in_f32(0);
    const float* gm = c.in_f32(1);
    const float* bt = c.in_f32(2);
    float* y = c.out_f32(0);  // may alias x (in-place): each element is read before it is written
    float* mean = c.out_f32(1);
    float* rstd = c.out_f32(2);
    const double M = double(D.P * D.Cg);
    parallel_for(D.N * D.G, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; t++) {
            const int64_t n = t / D.G, c0 = (t % D.G) * D.Cg;
            const float* xs = x + n * D.P * D.C + c0;
            double s = 0;
            for (int64_t p = 0; p < D.P; p++)
                for (int64_t k = 0; k < D.Cg; k++) s += xs[p * D.C + k];
            const double mu_d = s / M;
            double v = 0;
            for (int64_t p = 0; p < D.P; p++)
                for (int64_t k = 0; k < D.Cg; k++) {
                    double e = xs[p * D.C + k] - mu_d;
                    v += e * e;
                }
            const float mu = float(mu_d);
            const float rs = float(1.0 / std::sqrt(v / M + double(eps)));
            mean[t] = mu;
            rstd[t] = rs;
            float* ys = y + n * D.P * D.C + c0;
            for (int64_t p = 0; p < D.P; p++)
                for (int64_t k = 0; k < D.Cg; k++) {
                    float xh = (xs[p * D.C + k] - mu) * rs;
                    float h = xh * gm[c0 + k] + bt[c0 + k];
                    ys[p * D.C + k] = act ? float(h * sigmoid(h)) : h;
                }
        }
    });
}

// group_norm and layer_norm share one backward shape: their grad op takes (gy, x, gamma, beta,
// mean, rstd) and returns (dx, dgamma, dbeta). Only y's gradient flows; mean and rstd are saved
// statistics, not differentiable outputs. With gamma and beta frozen (a LoRA's base) the grad op
// makes dx alone (p.i[kNormDxOnly]): no column sums over every row, and with one output it can
// take a residual (ops/residual.h) that the fusion pass folds a gradient sum into.
static void affine_norm_backward(BackwardCtx& b, Op grad_op) {
    if (b.grad(0) == kNoValue) return;
    Params p = b.p();
    const bool dx_only = !b.wants(1) && !b.wants(2);
    p.i[size_t(kNormDxOnly)] = dx_only ? 1 : 0;
    auto r = b.g.apply(grad_op, {b.grad(0), b.in(0), b.in(1), b.in(2), b.out(1), b.out(2)}, p);
    for (int i = 0; i < (dx_only ? 1 : 3); i++) b.add(i, r[size_t(i)]);
}

static void group_norm_backward(BackwardCtx& b) { affine_norm_backward(b, Op::group_norm_grad); }

ValueId group_norm(Graph& g, ValueId x, ValueId gamma, ValueId beta, int groups, float eps, bool silu) {
    Params p;
    p.i[0] = groups;
    p.i[1] = silu ? 1 : 0;
    p.f[0] = eps;
    return g.apply(Op::group_norm, {x, gamma, beta}, p)[0];
}

const OpDef def_group_norm{"group_norm", "norms", group_norm_infer, group_norm_cost, group_norm_backward,
                           group_norm_cpu, kOpInplace | kOpCheapRecompute};

// ---------------- group_norm_grad: params as group_norm ----------------
// inputs (gy, x, gamma, beta, mean, rstd); outputs {dx (x's dtype), dgamma (gamma's), dbeta (beta's)}.
// With fused SiLU the pre-activation h = xhat * gamma + beta is recomputed (hence beta).

static std::vector<OutSpec> group_norm_grad_infer(const OpCall& c) {
    check_norm_grad_call(c);
    const Shape& x = c.shape(1);
    c.check(x.nd >= 2 && x.numel() > 0, "x must be [N, ..., C]");
    c.check(c.shape(0) == x && dtype_is_float(c.dtype(0)), "gy must be floating point and shaped like x");
    int64_t G = c.p.i[0];
    c.check(G >= 1 && x.last() % G == 0, "channels ", x.last(), " are not divisible by groups ", G);
    check_affine(c, 1, 2, 3, x.last());
    Shape st{x[0], G};
    for (int i : {4, 5})
        c.check(c.dtype(i) == DType::f32 && c.shape(i) == st, "mean and rstd must be f32 ", st);
    return norm_grad_outputs(c);
}
static Cost group_norm_grad_cost(const OpCall& c) {
    double n = double(c.shape(1).numel());
    return {(c.p.i[1] ? 18.0 : 12.0) * n, 3.0 * call_bytes_in(c, 1) + 4.0 * call_bytes_in(c, 2)};
}

static void group_norm_grad_cpu(CpuCtx& c) {
    const GnDims D = gn_dims(c.in_shape(1), c.p().i[0]);
    const bool act = c.p().i[1] != 0;
    const float* gy = c.in_f32(0);
    const float* x = c.in_f32(1);
    const float* gm = c.in_f32(2);
    const float* bt = c.in_f32(3);
    const float* mean = c.in_f32(4);
    const float* rstd = c.in_f32(5);
    float* dx = c.out_f32(0);  // holds dx-hat until the group sums are known: r is taken first
    std::vector<float> r_copy;
    const float* res = cpu_residual(c, dx, r_copy);
    // Per-sample partial sums for dgamma and dbeta, each (n, g) task owning its slice; they are
    // summed over n in a fixed order afterwards so the result does not depend on the threading.
    std::vector<double> pg(size_t(D.N * D.C), 0.0), pb(size_t(D.N * D.C), 0.0);
    const double M = double(D.P * D.Cg);
    parallel_for(D.N * D.G, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; t++) {
            const int64_t n = t / D.G, c0 = (t % D.G) * D.Cg;
            const int64_t base = n * D.P * D.C + c0;
            const float mu = mean[t], rs = rstd[t];
            double* pgs = pg.data() + n * D.C + c0;
            double* pbs = pb.data() + n * D.C + c0;
            double s1 = 0, s2 = 0;
            // First pass: gradient w.r.t. xhat, kept in dx until the group sums are known.
            for (int64_t p = 0; p < D.P; p++)
                for (int64_t k = 0; k < D.Cg; k++) {
                    const int64_t i = base + p * D.C + k;
                    float xh = (x[i] - mu) * rs;
                    double gh = gy[i];
                    if (act) {
                        float h = xh * gm[c0 + k] + bt[c0 + k];
                        double s = sigmoid(h);
                        gh *= s * (1.0 + double(h) * (1.0 - s));
                    }
                    pgs[k] += gh * xh;
                    pbs[k] += gh;
                    double dxh = gh * gm[c0 + k];
                    dx[i] = float(dxh);
                    s1 += dxh;
                    s2 += dxh * xh;
                }
            const double a = s1 / M, bterm = s2 / M;
            for (int64_t p = 0; p < D.P; p++)
                for (int64_t k = 0; k < D.Cg; k++) {
                    const int64_t i = base + p * D.C + k;
                    double xh = double((x[i] - mu) * rs);
                    dx[i] = float(double(rs) * (double(dx[i]) - a - xh * bterm));
                }
        }
    });
    add_cpu_residual(res, dx, c.out[0].numel());
    if (norm_dx_only(c.p())) return;
    float* dgamma = c.out_f32(1);
    float* dbeta = c.out_f32(2);
    for (int64_t ch = 0; ch < D.C; ch++) {
        double sg = 0, sb = 0;
        for (int64_t n = 0; n < D.N; n++) {
            sg += pg[size_t(n * D.C + ch)];
            sb += pb[size_t(n * D.C + ch)];
        }
        dgamma[ch] = float(sg);
        dbeta[ch] = float(sb);
    }
}

const OpDef def_group_norm_grad{"group_norm_grad", "norms", group_norm_grad_infer, group_norm_grad_cost, nullptr,
                                group_norm_grad_cpu, kOpGradHelper, residual_input_of, take_residual};

// ---------------- layer_norm: p.f[0] eps ----------------
// inputs (x [..., D], gamma [D], beta [D]); outputs {y (x's dtype and shape), mean [rows] f32, rstd [rows] f32}
// where rows = numel / D.

static std::vector<OutSpec> layer_norm_infer(const OpCall& c) {
    c.check(c.n_in() == 3, "takes (x, gamma, beta)");
    const Shape& x = c.shape(0);
    c.check(x.nd >= 1 && x.numel() > 0, "x must be a non-empty [..., D]");
    c.check(finite_f(c.p.f[0]) && c.p.f[0] >= 0.0f, "eps must be finite and >= 0");
    check_affine(c, 0, 1, 2, x.last());
    Shape st{x.numel() / x.last()};
    return {dense(c.dtype(0), x), dense(DType::f32, st), dense(DType::f32, st)};
}
static Cost layer_norm_cost(const OpCall& c) {
    double n = double(c.shape(0).numel());
    double st = 2.0 * 4.0 * n / double(c.shape(0).last());
    return {6.0 * n, 2.0 * call_bytes_in(c, 0) + call_bytes_in(c, 1) + call_bytes_in(c, 2) + st};
}

static void layer_norm_cpu(CpuCtx& c) {
    const int64_t Dm = c.in_shape(0).last(), rows = c.in_shape(0).numel() / Dm;
    const float eps = c.p().f[0];
    const float* x = c.in_f32(0);
    const float* gm = c.in_f32(1);
    const float* bt = c.in_f32(2);
    float* y = c.out_f32(0);  // may alias x (in-place): each row is read before it is written
    float* mean = c.out_f32(1);
    float* rstd = c.out_f32(2);
    parallel_for(rows, std::max<int64_t>(1, 4096 / Dm), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) {
            const float* xr = x + r * Dm;
            double s = 0;
            for (int64_t k = 0; k < Dm; k++) s += xr[k];
            const double mu_d = s / double(Dm);
            double v = 0;
            for (int64_t k = 0; k < Dm; k++) v += (xr[k] - mu_d) * (xr[k] - mu_d);
            const float mu = float(mu_d);
            const float rs = float(1.0 / std::sqrt(v / double(Dm) + double(eps)));
            mean[r] = mu;
            rstd[r] = rs;
            float* yr = y + r * Dm;
            for (int64_t k = 0; k < Dm; k++) yr[k] = (xr[k] - mu) * rs * gm[k] + bt[k];
        }
    });
}

static void layer_norm_backward(BackwardCtx& b) { affine_norm_backward(b, Op::layer_norm_grad); }

ValueId layer_norm(Graph& g, ValueId x, ValueId gamma, ValueId beta, float eps) {
    Params p;
    p.f[0] = eps;
    return g.apply(Op::layer_norm, {x, gamma, beta}, p)[0];
}

const OpDef def_layer_norm{"layer_norm", "norms", layer_norm_infer, layer_norm_cost, layer_norm_backward,
                           layer_norm_cpu, kOpInplace | kOpCheapRecompute};

// ---------------- layer_norm_grad: params as layer_norm ----------------
// inputs (gy, x, gamma, beta, mean, rstd); outputs {dx (x's dtype), dgamma (gamma's), dbeta (beta's)}.
// beta is not read; it is taken so that dbeta gets beta's dtype and the signature matches group_norm_grad.

static std::vector<OutSpec> layer_norm_grad_infer(const OpCall& c) {
    check_norm_grad_call(c);
    const Shape& x = c.shape(1);
    c.check(x.nd >= 1 && x.numel() > 0, "x must be a non-empty [..., D]");
    c.check(c.shape(0) == x && dtype_is_float(c.dtype(0)), "gy must be floating point and shaped like x");
    check_affine(c, 1, 2, 3, x.last());
    Shape st{x.numel() / x.last()};
    for (int i : {4, 5})
        c.check(c.dtype(i) == DType::f32 && c.shape(i) == st, "mean and rstd must be f32 ", st);
    return norm_grad_outputs(c);
}
static Cost layer_norm_grad_cost(const OpCall& c) {
    double n = double(c.shape(1).numel());
    return {12.0 * n, 3.0 * call_bytes_in(c, 1) + 4.0 * call_bytes_in(c, 2)};
}

static void layer_norm_grad_cpu(CpuCtx& c) {
    const int64_t Dm = c.in_shape(1).last(), rows = c.in_shape(1).numel() / Dm;
    const float* gy = c.in_f32(0);
    const float* x = c.in_f32(1);
    const float* gm = c.in_f32(2);
    const float* mean = c.in_f32(4);
    const float* rstd = c.in_f32(5);
    float* dx = c.out_f32(0);
    std::vector<float> r_copy;
    const float* res = cpu_residual(c, dx, r_copy);
    parallel_for(rows, std::max<int64_t>(1, 2048 / Dm), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) {
            const float mu = mean[r], rs = rstd[r];
            const float *xr = x + r * Dm, *gr = gy + r * Dm;
            double s1 = 0, s2 = 0;
            for (int64_t k = 0; k < Dm; k++) {
                double dxh = double(gr[k]) * gm[k];
                s1 += dxh;
                s2 += dxh * double((xr[k] - mu) * rs);
            }
            const double a = s1 / double(Dm), bterm = s2 / double(Dm);
            for (int64_t k = 0; k < Dm; k++) {
                double xh = double((xr[k] - mu) * rs);
                dx[r * Dm + k] = float(double(rs) * (double(gr[k]) * gm[k] - a - xh * bterm));
            }
        }
    });
    add_cpu_residual(res, dx, c.out[0].numel());
    if (norm_dx_only(c.p())) return;
    float* dgamma = c.out_f32(1);
    float* dbeta = c.out_f32(2);
    // dgamma, dbeta: split over columns, every column summed over rows in order (deterministic).
    parallel_for(Dm, 64, [&](int64_t k0, int64_t k1) {
        std::vector<double> sg(size_t(k1 - k0), 0.0), sb(size_t(k1 - k0), 0.0);
        for (int64_t r = 0; r < rows; r++) {
            const float mu = mean[r], rs = rstd[r];
            for (int64_t k = k0; k < k1; k++) {
                double g = gy[r * Dm + k];
                sg[size_t(k - k0)] += g * double((x[r * Dm + k] - mu) * rs);
                sb[size_t(k - k0)] += g;
            }
        }
        for (int64_t k = k0; k < k1; k++) {
            dgamma[k] = float(sg[size_t(k - k0)]);
            dbeta[k] = float(sb[size_t(k - k0)]);
        }
    });
}

const OpDef def_layer_norm_grad{"layer_norm_grad", "norms", layer_norm_grad_infer, layer_norm_grad_cost, nullptr,
                                layer_norm_grad_cpu, kOpGradHelper, residual_input_of, take_residual};

// ---------------- softmax: p.f[0] scale ----------------
// input x [..., D]; output y = softmax(scale * x) over the last dim, x's dtype and shape.

static std::vector<OutSpec> softmax_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input");
    c.check(dtype_is_float(c.dtype(0)), "x must be floating point");
    c.check(c.shape(0).nd >= 1 && c.shape(0).numel() > 0, "x must be a non-empty [..., D]");
    c.check(finite_f(c.p.f[0]), "scale must be finite");
    return {dense(c.dtype(0), c.shape(0))};
}
static Cost softmax_cost(const OpCall& c) { return {5.0 * double(c.shape(0).numel()), 2.0 * call_bytes_in(c, 0)}; }

static void softmax_cpu(CpuCtx& c) {
    const int64_t Dm = c.in_shape(0).last(), rows = c.in_shape(0).numel() / Dm;
    const double sc = c.p().f[0];
    const float* x = c.in_f32(0);
    float* y = c.out_f32(0);  // may alias x (in-place)
    parallel_for(rows, std::max<int64_t>(1, 4096 / Dm), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) {
            const float* xr = x + r * Dm;
            float* yr = y + r * Dm;
            double m = -INFINITY;
            for (int64_t k = 0; k < Dm; k++) m = std::max(m, sc * xr[k]);
            double s = 0;
            for (int64_t k = 0; k < Dm; k++) {
                double e = std::exp(sc * xr[k] - m);
                yr[k] = float(e);
                s += e;
            }
            const double inv = 1.0 / s;
            for (int64_t k = 0; k < Dm; k++) yr[k] = float(double(yr[k]) * inv);
        }
    });
}

static void softmax_backward(BackwardCtx& b) {
    b.add(0, b.g.apply1(Op::softmax_grad, {b.out(0), b.grad(0)}, b.p()));
}

ValueId softmax(Graph& g, ValueId x, float scale) {
    Params p;
    p.f[0] = scale;
    return g.apply1(Op::softmax, {x}, p);
}

const OpDef def_softmax{"softmax", "norms", softmax_infer, softmax_cost, softmax_backward, softmax_cpu, kOpInplace};

// ---------------- softmax_grad: p.f[0] scale ----------------
// inputs (y, gy); output dx = scale * y * (gy - sum(gy * y)) over the last dim, in y's dtype.

static std::vector<OutSpec> softmax_grad_infer(const OpCall& c) {
    c.check(c.n_in() == 2, "takes (y, gy)");
    c.check(dtype_is_float(c.dtype(0)) && dtype_is_float(c.dtype(1)), "y and gy must be floating point");
    c.check(c.shape(0) == c.shape(1), "y and gy must have the same shape");
    c.check(c.shape(0).numel() > 0, "y must not be empty");
    return {dense(c.dtype(0), c.shape(0))};
}
static Cost softmax_grad_cost(const OpCall& c) {
    return {4.0 * double(c.shape(0).numel()), call_bytes_in(c, 0) + 2.0 * call_bytes_in(c, 1)};
}

static void softmax_grad_cpu(CpuCtx& c) {
    const int64_t Dm = c.in_shape(0).last(), rows = c.in_shape(0).numel() / Dm;
    const double sc = c.p().f[0];
    const float* y = c.in_f32(0);
    const float* gy = c.in_f32(1);
    float* dx = c.out_f32(0);
    parallel_for(rows, std::max<int64_t>(1, 4096 / Dm), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) {
            const float *yr = y + r * Dm, *gr = gy + r * Dm;
            double dot = 0;
            for (int64_t k = 0; k < Dm; k++) dot += double(yr[k]) * gr[k];
            for (int64_t k = 0; k < Dm; k++) dx[r * Dm + k] = float(sc * yr[k] * (gr[k] - dot));
        }
    });
}

const OpDef def_softmax_grad{"softmax_grad", "norms", softmax_grad_infer, softmax_grad_cost, nullptr,
                             softmax_grad_cpu, kOpGradHelper};

}  // namespace gl
