// Reductions (sum, mean, sum_to), the MSE loss and the weighted diffusion loss. Every sum accumulates in double and adds
// its terms in an order fixed by the shapes alone, so results are bitwise identical
// whatever the thread count.
#include "ggml-lite/ops/family.h"
#include "ggml-lite/ops/loss_math.h"

namespace gl {

namespace {

using Dims4 = std::array<int64_t, 4>;

// Shape padded to 4 dims with leading ones.
Dims4 pad4(const Shape& s) {
    Dims4 d{1, 1, 1, 1};
    for (int i = 0; i < s.nd; i++) d[size_t(4 - s.nd + i)] = s.d[size_t(i)];
    return d;
}

// Sum of term(i) over [0, n) in double: fixed-size blocks summed in parallel, then the block
// partials added in block order (the blocks do not depend on the thread count).
template <class Term>
double block_sum(int64_t n, Term term) {
    constexpr int64_t kBlock = 1 << 13;
    const int64_t nb = (n + kBlock - 1) / kBlock;
    std::vector<double> part(size_t(nb), 0.0);
    parallel_for(nb, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t b = lo; b < hi; b++) {
            double acc = 0;
            for (int64_t i = b * kBlock, e = std::min(n, (b + 1) * kBlock); i < e; i++) acc += term(i);
            part[size_t(b)] = acc;
        }
    });
    double total = 0;
    for (double p : part) total += p;
    return total;
}

// y = mul * (x summed down to os), x dense with padded shape xs; per dim os[k] is xs[k] or 1.
// Each output adds its inputs in lexicographic order of the reduced indices. When the last
// dim is kept, outputs go in runs of up to 256 along it so the inner loop reads contiguously.
void reduce_dense(const float* x, const Dims4& xs, float* y, const Dims4& os, double mul) {
    const Dims4 st{xs[1] * xs[2] * xs[3], xs[2] * xs[3], xs[3], 1};
    Dims4 R;
    for (size_t k = 0; k < 4; k++) R[k] = os[k] == 1 ? xs[k] : 1;
    constexpr int64_t kRun = 256;
    const int64_t W = os[3], runs = (W + kRun - 1) / kRun, outer = os[0] * os[1] * os[2];
    const int64_t per_task = std::max<int64_t>(1, R[0] * R[1] * R[2] * R[3] * std::min(W, kRun));
    parallel_for(outer * runs, std::max<int64_t>(1, (1 << 15) / per_task), [&](int64_t lo, int64_t hi) {
        double acc[kRun];
        for (int64_t t = lo; t < hi; t++) {
            const int64_t o = t / runs, j0 = (t % runs) * kRun, w = std::min(kRun, W - j0);
            const int64_t o2 = o % os[2], o1 = (o / os[2]) % os[1], o0 = o / (os[2] * os[1]);
            const int64_t base = o0 * st[0] + o1 * st[1] + o2 * st[2] + j0;
            std::fill(acc, acc + w, 0.0);
            for (int64_t r0 = 0; r0 < R[0]; r0++)
                for (int64_t r1 = 0; r1 < R[1]; r1++)
                    for (int64_t r2 = 0; r2 < R[2]; r2++)
                        for (int64_t r3 = 0; r3 < R[3]; r3++) {
                            const float* row = x + base + r0 * st[0] + r1 * st[1] + r2 * st[2] + r3;
                            for (int64_t j = 0; j < w; j++) acc[j] += row[j];
                        }
            float* out = y + o * W + j0;
            for (int64_t j = 0; j < w; j++) out[j] = float(acc[j] * mul);
        }
    });
}

}  // namespace

// ---------------- sum, mean: p.i[0] axis, p.i[1] 1 = along the axis (0 = all elements), p.i[2] keepdim ----------------

static std::vector<OutSpec> reduce_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input");
    c.check(dtype_is_float(c.dtype(0)), "input must be floating point");
    if (!c.p.i[1]) return {dense(c.dtype(0), Shape{})};
    Shape s = c.shape(0);
    int64_t axis = c.p.i[0];
    c.check(axis >= 0 && axis < s.nd, "axis ", axis, " out of range for ", s.nd, " dims");
    if (c.p.i[2]) {
        s.d[size_t(axis)] = 1;
    } else {
        for (int k = int(axis); k + 1 < s.nd; k++) s.d[size_t(k)] = s.d[size_t(k + 1)];
        s.d[size_t(s.nd - 1)] = 1;
        s.nd--;
    }
    return {dense(c.dtype(0), s)};
}
static Cost reduce_cost(const OpCall& c) { return {double(c.shape(0).numel()), call_bytes_in(c, 0)}; }

// Number of input elements behind each output element.
static int64_t reduce_count(const Shape& x, const Params& p) { return p.i[1] ? x.d[size_t(p.i[0])] : x.numel(); }

static void reduce_backward(BackwardCtx& b) {
    Graph& g = b.g;
    const Shape xs = g.shape(b.in(0));  // a copy: building nodes below moves g.values
    ValueId gy = b.grad();
    if (b.node.op == Op::mean) gy = scale(g, gy, float(1.0 / double(std::max<int64_t>(1, reduce_count(xs, b.p())))));
    if (b.p().i[1] && !b.p().i[2]) {
        Shape kept = xs;
        kept.d[size_t(b.p().i[0])] = 1;
        gy = reshape(g, gy, kept);
    }
    b.add(0, expand(g, gy, xs));
}

static void reduce_cpu(CpuCtx& c) {
    const float* x = c.in_f32(0);
    float* y = c.out_f32(0);
    const Shape& xs = c.in_shape(0);
    const int64_t n = reduce_count(xs, c.p());
    const double mul = c.node.op == Op::mean ? 1.0 / double(std::max<int64_t>(1, n)) : 1.0;
    if (!c.p().i[1]) {
        y[0] = float(block_sum(xs.numel(), [&](int64_t i) { return double(x[i]); }) * mul);
        return;
    }
    Shape kept = xs;
    kept.d[size_t(c.p().i[0])] = 1;
    reduce_dense(x, pad4(xs), y, pad4(kept), mul);
}

static ValueId reduce_node(Graph& g, Op op, ValueId x, int axis, bool along, bool keepdim) {
    Params p;
    p.i[0] = axis < 0 ? axis + g.shape(x).nd : axis;
    p.i[1] = along ? 1 : 0;
    p.i[2] = keepdim ? 1 : 0;
    return g.apply1(op, {x}, p);
}

ValueId sum(Graph& g, ValueId x) { return reduce_node(g, Op::sum, x, 0, false, false); }
ValueId sum(Graph& g, ValueId x, int axis, bool keepdim) { return reduce_node(g, Op::sum, x, axis, true, keepdim); }
ValueId mean(Graph& g, ValueId x) { return reduce_node(g, Op::mean, x, 0, false, false); }
ValueId mean(Graph& g, ValueId x, int axis, bool keepdim) { return reduce_node(g, Op::mean, x, axis, true, keepdim); }

const OpDef def_sum{"sum", "reductions", reduce_infer, reduce_cost, reduce_backward, reduce_cpu, 0};
const OpDef def_mean{"mean", "reductions", reduce_infer, reduce_cost, reduce_backward, reduce_cpu, 0};

// ---------------- sum_to: p.i[0..4] = target shape (broadcasts to x's shape) ----------------

static std::vector<OutSpec> sum_to_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input");
    c.check(dtype_is_float(c.dtype(0)), "input must be floating point");
    Shape s = shape_from_params(c.p);
    const Shape& x = c.shape(0);
    bool ok = s.nd >= 0 && s.nd <= x.nd;
    for (int i = 0; ok && i < s.nd; i++) {
        int64_t d = s.d[size_t(i)], xd = x.d[size_t(x.nd - s.nd + i)];
        ok = d == xd || d == 1;
    }
    c.check(ok, "target shape ", s, " does not broadcast to the input's shape");
    return {dense(c.dtype(0), s)};
}
static Cost sum_to_cost(const OpCall& c) { return {double(c.shape(0).numel()), call_bytes_in(c, 0)}; }
static void sum_to_backward(BackwardCtx& b) { b.add(0, expand(b.g, b.grad(), b.g.shape(b.in(0)))); }
static void sum_to_cpu(CpuCtx& c) {
    // A target dim of 1 over an input dim of 1 needs no summing, so aligning both at the end
    // and padding to 4 dims gives the per-dim "kept or reduced" form reduce_dense wants.
    reduce_dense(c.in_f32(0), pad4(c.in_shape(0)), c.out_f32(0), pad4(c.out_shape(0)), 1.0);
}

ValueId sum_to(Graph& g, ValueId x, Shape s) {
    if (g.shape(x) == s) return x;
    Params p;
    shape_to_params(p, s);
    return g.apply1(Op::sum_to, {x}, p);
}

const OpDef def_sum_to{"sum_to", "reductions", sum_to_infer, sum_to_cost, sum_to_backward, sum_to_cpu, 0};

// ---------------- mse_loss: inputs {pred, target[, weights [B]]} -> scalar f32 ----------------
// loss = 1/B sum_b w[b] * 1/M sum_{i in sample b} (pred - target)^2, M = numel / B.

static void check_mse_inputs(const OpCall& c, int first) {
    const Shape& s = c.shape(first);
    c.check(s.nd >= 1 && s.d[0] > 0, "pred must have a non-empty leading batch dim [B, ...]");
    c.check(c.shape(first + 1) == s, "pred and target must have the same shape");
    for (int i = first; i < c.n_in(); i++) c.check(dtype_is_float(c.dtype(i)), "inputs must be floating point");
    if (c.n_in() == first + 3) c.check(c.shape(first + 2) == Shape{s.d[0]}, "weights must have shape [", s.d[0], "]");
}

static std::vector<OutSpec> mse_infer(const OpCall& c) {
    c.check(c.n_in() == 2 || c.n_in() == 3, "takes {pred, target} or {pred, target, weights}");
    check_mse_inputs(c, 0);
    return {dense(DType::f32, Shape{})};
}
static Cost mse_cost(const OpCall& c) { return {3.0 * double(c.shape(0).numel()), call_bytes_all_in(c)}; }

static void mse_backward(BackwardCtx& b) {
    Graph& g = b.g;
    ValueId w = b.node.in.size() > 2 ? b.in(2) : kNoValue;
    if (b.wants(0) || b.wants(1)) {
        ValueId gp = mse_loss_grad(g, b.grad(), b.in(0), b.in(1), w);
        if (b.wants(0)) b.add(0, gp);
        if (b.wants(1)) b.add(1, scale(g, gp, -1.0f));
    }
    if (w != kNoValue && b.wants(2)) {
        // d loss / d w[b] = 1/B * (mean over sample b of (pred - target)^2).
        const Shape s = g.shape(b.in(0));  // a copy: building nodes below moves g.values
        const int64_t B = s.d[0];
        ValueId d = sub(g, cast(g, b.in(0), DType::f32), cast(g, b.in(1), DType::f32));
        ValueId per = mean(g, reshape(g, mul(g, d, d), Shape{B, s.numel() / B}), 1, false);
        b.add(2, scale(g, mul(g, per, expand(g, b.grad(), Shape{B})), float(1.0 / double(B))));
    }
}

static void mse_cpu(CpuCtx& c) {
    const float* p = c.in_f32(0);
    const float* t = c.in_f32(1);
    const float* w = c.n_in() > 2 ? c.in_f32(2) : nullptr;
    const int64_t B = c.in_shape(0).d[0], M = c.in[0].numel() / B;
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        const float* pb = p + b * M;
        const float* tb = t + b * M;
        double se = block_sum(M, [&](int64_t i) {
            double d = double(pb[i]) - double(tb[i]);
            return d * d;
        });
        total += (w ? double(w[b]) : 1.0) * (M ? se / double(M) : 0.0);
    }
    c.out_f32(0)[0] = float(total / double(B));
}

ValueId mse_loss(Graph& g, ValueId pred, ValueId target, ValueId weights) {
    if (weights == kNoValue) return g.apply1(Op::mse_loss, {pred, target});
    return g.apply1(Op::mse_loss, {pred, target, weights});
}

const OpDef def_mse_loss{"mse_loss", "reductions", mse_infer, mse_cost, mse_backward, mse_cpu, 0};

// ---------------- mse_loss_grad: inputs {gy (scalar), pred, target[, weights]} -> d loss / d pred ----------------
// gp = gy * w[b] * 2 (pred - target) / (B M), in pred's dtype and shape.

static std::vector<OutSpec> mse_grad_infer(const OpCall& c) {
    c.check(c.n_in() == 3 || c.n_in() == 4, "takes {gy, pred, target} or {gy, pred, target, weights}");
    c.check(dtype_is_float(c.dtype(0)) && c.shape(0).numel() == 1, "gy must be a floating-point scalar");
    check_mse_inputs(c, 1);
    return {dense(c.dtype(1), c.shape(1))};
}
static Cost mse_grad_cost(const OpCall& c) {
    return {3.0 * double(c.shape(1).numel()), call_bytes_all_in(c) + call_bytes_in(c, 1)};
}
static void mse_grad_cpu(CpuCtx& c) {
    const double gy = double(c.in_f32(0)[0]);
    const float* p = c.in_f32(1);
    const float* t = c.in_f32(2);
    const float* w = c.n_in() > 3 ? c.in_f32(3) : nullptr;
    float* gp = c.out_f32(0);
    const int64_t B = c.in_shape(1).d[0], M = c.in[1].numel() / B;
    for (int64_t b = 0; b < B; b++) {
        const float k = float(2.0 * gy * (w ? double(w[b]) : 1.0) / (double(B) * double(M)));
        parallel_for(M, 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = b * M + lo; i < b * M + hi; i++) gp[i] = k * (p[i] - t[i]);
        });
    }
}

ValueId mse_loss_grad(Graph& g, ValueId gy, ValueId pred, ValueId target, ValueId weights) {
    if (weights == kNoValue) return g.apply1(Op::mse_loss_grad, {gy, pred, target});
    return g.apply1(Op::mse_loss_grad, {gy, pred, target, weights});
}

const OpDef def_mse_loss_grad{"mse_loss_grad", "reductions", mse_grad_infer, mse_grad_cost, nullptr, mse_grad_cpu,
                              kOpGradHelper};

// ---------------- weighted_loss: {pred, target[, weights][, huber_c][, mask]} -> {loss, per [B]} ----------------
// p.i[0] = LossKind, p.i[1] = 1 when weights are given, p.i[2] = 1 when a mask is given.
// per[b] = 1/M sum_i m_i l(d_i), d = pred - target over sample b's M elements, m the mask (pred's
// shape with the last dim 1, broadcast over it; 1 without one); loss = 1/B sum_b w[b] per[b].

const char* loss_kind_name(LossKind k) {
    switch (k) {
        case LossKind::l2: return "l2";
        case LossKind::l1: return "l1";
        case LossKind::huber: return "huber";
        case LossKind::smooth_l1: return "smooth_l1";
    }
    return "?";
}

namespace {

// The optional inputs after pred and target, in order.
struct LossSides {
    bool weights = false, huber_c = false, mask = false;
    int count() const { return int(weights) + int(huber_c) + int(mask); }
};
LossSides loss_sides(const Params& p, bool with_weights) {
    return {with_weights && p.i[1] != 0, loss_takes_huber_c(LossKind(p.i[0])), p.i[2] != 0};
}

// Checks pred, target (inputs first, first + 1) and the side inputs after them; returns B.
int64_t check_loss_inputs(const OpCall& c, int first, const LossSides& sides) {
    const int64_t kind = c.p.i[0];
    c.check(kind >= 0 && kind <= int64_t(LossKind::smooth_l1), "unknown loss kind ", kind);
    c.check(c.n_in() == first + 2 + sides.count(),
            "takes ", first + 2 + sides.count(), " inputs here (", first ? "coef, " : "", "pred, target",
                sides.count() ? ", then [B] weights and/or huber_c, then the mask, as the flags say" : "", ")");
    const Shape& s = c.shape(first);
    c.check(s.nd >= 1 && s.d[0] > 0, "pred must have a non-empty leading batch dim [B, ...]");
    c.check(c.shape(first + 1) == s, "pred and target must have the same shape");
    for (int i = 0; i < c.n_in(); i++) c.check(dtype_is_float(c.dtype(i)), "inputs must be floating point");
    const int vectors = int(sides.weights) + int(sides.huber_c);
    for (int i = first + 2; i < first + 2 + vectors; i++)
        c.check(c.shape(i) == Shape{s.d[0]}, "weights and huber_c must have shape [", s.d[0], "]");
    if (sides.mask) {
        Shape m = s;
        m.d[m.nd - 1] = 1;
        c.check(c.shape(c.n_in() - 1) == m, "the mask must have pred's shape with the last dim 1 (", m.str(), ")");
    }
    return s.d[0];
}

}  // namespace

static std::vector<OutSpec> wloss_infer(const OpCall& c) {
    const int64_t B = check_loss_inputs(c, 0, loss_sides(c.p, true));
    return {dense(DType::f32, Shape{}), dense(DType::f32, Shape{B})};
}
static Cost wloss_cost(const OpCall& c) { return {4.0 * double(c.shape(0).numel()), call_bytes_all_in(c)}; }

static void wloss_backward(BackwardCtx& b) {
    Graph& g = b.g;
    const LossKind kind = LossKind(b.p().i[0]);
    const LossSides sides = loss_sides(b.p(), true);
    const bool has_w = sides.weights;
    const ValueId w = has_w ? b.in(2) : kNoValue;
    const int ic = has_w ? 3 : 2, im = ic + int(sides.huber_c);
    const ValueId c = sides.huber_c ? b.in(ic) : kNoValue;
    const ValueId mask = sides.mask ? b.in(im) : kNoValue;
    GL_CHECK(c == kNoValue || !b.wants(ic), "weighted_loss: huber_c gets no gradient (it is a per-step "
             "constant); ", g.describe(c), " leads to a parameter");
    GL_CHECK(mask == kNoValue || !b.wants(im), "weighted_loss: the mask gets no gradient; ", g.describe(mask),
             " leads to a parameter");
    const int64_t B = g.shape(b.in(0)).d[0];
    const float inv_b = float(1.0 / double(B));
    // coef[b] = d total / d per[b]: gy w[b] / B from the loss, plus the per-sample output's own gradient.
    ValueId gy_b = b.grad(0) == kNoValue ? kNoValue : expand(g, b.grad(0), Shape{B});
    ValueId coef = kNoValue;
    if (gy_b != kNoValue) coef = scale(g, has_w ? mul(g, gy_b, cast(g, w, DType::f32)) : gy_b, inv_b);
    if (b.grad(1) != kNoValue) coef = coef == kNoValue ? b.grad(1) : add(g, coef, b.grad(1));
    if (b.wants(0) || b.wants(1)) {
        ValueId gp = weighted_loss_grad(g, kind, coef, b.in(0), b.in(1), c, mask);
        if (b.wants(0)) b.add(0, gp);
        if (b.wants(1)) b.add(1, scale(g, gp, -1.0f));
    }
    if (has_w && b.wants(2) && gy_b != kNoValue) b.add(2, scale(g, mul(g, gy_b, b.out(1)), inv_b));
}

static void wloss_cpu(CpuCtx& c) {
    const LossKind kind = LossKind(c.p().i[0]);
    const LossSides sides = loss_sides(c.p(), true);
    const float* p = c.in_f32(0);
    const float* t = c.in_f32(1);
    const float* w = sides.weights ? c.in_f32(2) : nullptr;
    const float* hc = sides.huber_c ? c.in_f32(sides.weights ? 3 : 2) : nullptr;
    const float* m = sides.mask ? c.in_f32(2 + int(sides.weights) + int(sides.huber_c)) : nullptr;
    float* per = c.out_f32(1);
    const Shape& shape = c.in_shape(0);
    const int64_t B = shape.d[0], M = c.in[0].numel() / B, C = shape.d[shape.nd - 1];
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        const float* pb = p + b * M;
        const float* tb = t + b * M;
        const float* mb = m ? m + b * (M / C) : nullptr;
        const double cb = hc ? double(hc[b]) : 0.0;
        const double s = block_sum(M, [&](int64_t i) {
            const double l = loss::value(kind, double(pb[i]) - double(tb[i]), cb);
            return mb ? l * double(mb[i / C]) : l;
        });
        const double mean = M ? s / double(M) : 0.0;
        per[b] = float(mean);
        total += (w ? double(w[b]) : 1.0) * mean;
    }
    c.out_f32(0)[0] = float(total / double(B));
}

ValueId weighted_loss(Graph& g, LossKind kind, ValueId pred, ValueId target, ValueId weights, ValueId huber_c,
                      ValueId mask) {
    GL_CHECK(loss_takes_huber_c(kind) == (huber_c != kNoValue), "weighted_loss: huber_c is required for the huber "
             "and smooth_l1 losses and only for them (kind ", loss_kind_name(kind), ")");
    Params p;
    p.i[0] = int64_t(kind);
    p.i[1] = weights != kNoValue;
    p.i[2] = mask != kNoValue;
    std::vector<ValueId> in{pred, target};
    if (weights != kNoValue) in.push_back(weights);
    if (huber_c != kNoValue) in.push_back(huber_c);
    if (mask != kNoValue) in.push_back(mask);
    return g.apply(Op::weighted_loss, in, p)[0];
}

ValueId weighted_loss_per_sample(const Graph& g, ValueId loss) {
    const int n = g.v(loss).producer;
    GL_CHECK(n >= 0 && g.nodes[size_t(n)].op == Op::weighted_loss && g.nodes[size_t(n)].out[0] == loss,
             "weighted_loss_per_sample: ", g.describe(loss), " is not a weighted_loss output");
    return g.nodes[size_t(n)].out[1];
}

const OpDef def_weighted_loss{"weighted_loss", "reductions", wloss_infer, wloss_cost, wloss_backward, wloss_cpu, 0};

// ---------------- weighted_loss_grad: {coef [B], pred, target[, huber_c][, mask]} -> gp ----------------
// p.i[0] = LossKind, p.i[2] = 1 when a mask is given (as weighted_loss's).

static std::vector<OutSpec> wloss_grad_infer(const OpCall& c) {
    c.check(c.n_in() >= 1 && c.shape(0).nd == 1, "coef must be a [B] vector");
    const int64_t B = check_loss_inputs(c, 1, loss_sides(c.p, false));
    c.check(c.shape(0) == Shape{B}, "coef must have shape [", B, "]");
    return {dense(c.dtype(1), c.shape(1))};
}
static Cost wloss_grad_cost(const OpCall& c) {
    return {4.0 * double(c.shape(1).numel()), call_bytes_all_in(c) + call_bytes_in(c, 1)};
}
static void wloss_grad_cpu(CpuCtx& c) {
    const LossKind kind = LossKind(c.p().i[0]);
    const LossSides sides = loss_sides(c.p(), false);
    const float* coef = c.in_f32(0);
    const float* p = c.in_f32(1);
    const float* t = c.in_f32(2);
    const float* hc = sides.huber_c ? c.in_f32(3) : nullptr;
    const float* m = sides.mask ? c.in_f32(3 + int(sides.huber_c)) : nullptr;
    float* gp = c.out_f32(0);
    const Shape& shape = c.in_shape(1);
    const int64_t B = shape.d[0], M = c.in[1].numel() / B, C = shape.d[shape.nd - 1];
    for (int64_t b = 0; b < B; b++) {
        const float k = float(double(coef[b]) / double(M)), cb = hc ? hc[b] : 0.0f;
        parallel_for(M, 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = b * M + lo; i < b * M + hi; i++) {
                const float s = k * loss::slope(kind, p[i] - t[i], cb);
                gp[i] = m ? s * m[i / C] : s;
            }
        });
    }
}

ValueId weighted_loss_grad(Graph& g, LossKind kind, ValueId coef, ValueId pred, ValueId target, ValueId huber_c,
                           ValueId mask) {
    Params p;
    p.i[0] = int64_t(kind);
    p.i[2] = mask != kNoValue;
    std::vector<ValueId> in{coef, pred, target};
    if (huber_c != kNoValue) in.push_back(huber_c);
    if (mask != kNoValue) in.push_back(mask);
    return g.apply1(Op::weighted_loss_grad, in, p);
}

const OpDef def_weighted_loss_grad{"weighted_loss_grad", "reductions", wloss_grad_infer, wloss_grad_cost, nullptr,
                                   wloss_grad_cpu, kOpGradHelper};

}  // namespace gl
