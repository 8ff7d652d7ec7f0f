// Activations: SiLU, GELU (erf and tanh forms), QuickGELU (CLIP), their shared gradient
// op act_grad, and GEGLU (diffusers' feed-forward gate) with its gradient.
#include "ggml-lite/ops/act_math.h"
#include "ggml-lite/ops/family.h"

namespace gl {

namespace {

constexpr int64_t kGrain = 1 << 14;

}  // namespace

// ---------------- silu, gelu (p.i[0]: 1 = tanh approximation), quick_gelu ----------------

static std::vector<OutSpec> act_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input");
    c.check(dtype_is_float(c.dtype(0)), "input must be floating point");
    if (c.op == Op::gelu) c.check(c.p.i[0] == 0 || c.p.i[0] == 1, "p.i[0] must be 0 (erf) or 1 (tanh)");
    return {dense(c.dtype(0), c.shape(0))};
}
static Cost act_cost(const OpCall& c) { return {10.0 * double(c.shape(0).numel()), 2 * call_bytes_in(c, 0)}; }
static void act_backward(BackwardCtx& b) { b.add(0, act_grad(b.g, b.in(0), b.grad(), act::kind_of(b.node.op, b.p()))); }
static void act_cpu(CpuCtx& c) {
    // Element i is read before it is written, so running in place over x is safe.
    const float* x = c.in_f32(0);
    float* y = c.out_f32(0);
    act::dispatch(act::kind_of(c.node.op, c.p()), [&]<Act K>() {
        parallel_for(c.out[0].numel(), kGrain, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; i++) y[i] = act::value<K>(x[i]);
        });
    });
}

ValueId silu(Graph& g, ValueId x) { return g.apply1(Op::silu, {x}); }
ValueId gelu(Graph& g, ValueId x, bool tanh_approx) {
    Params p;
    p.i[0] = tanh_approx ? 1 : 0;
    return g.apply1(Op::gelu, {x}, p);
}
ValueId quick_gelu(Graph& g, ValueId x) { return g.apply1(Op::quick_gelu, {x}); }

const OpDef def_silu{"silu", "activations", act_infer, act_cost, act_backward, act_cpu, kOpInplace};
const OpDef def_gelu{"gelu", "activations", act_infer, act_cost, act_backward, act_cpu, kOpInplace};
const OpDef def_quick_gelu{"quick_gelu", "activations", act_infer, act_cost, act_backward, act_cpu, kOpInplace};

// ---------------- act_grad: inputs {gy, x}, p.i[0] = Act; out = gy * f'(x) ----------------
// gy comes first so the planner can write the result over it (it usually dies here).

static std::vector<OutSpec> act_grad_infer(const OpCall& c) {
    c.check(c.n_in() == 2, "takes {gy, x}");
    c.check(dtype_is_float(c.dtype(0)) && dtype_is_float(c.dtype(1)), "inputs must be floating point");
    c.check(c.shape(0) == c.shape(1), "gy and x must have the same shape");
    c.check(c.p.i[0] >= 0 && c.p.i[0] <= int64_t(Act::quick_gelu), "invalid activation kind ", c.p.i[0]);
    return {dense(c.dtype(0), c.shape(0))};
}
static Cost act_grad_cost(const OpCall& c) { return {14.0 * double(c.shape(0).numel()), 3 * call_bytes_in(c, 0)}; }
static void act_grad_cpu(CpuCtx& c) {
    const float* gy = c.in_f32(0);
    const float* x = c.in_f32(1);
    float* gx = c.out_f32(0);
    act::dispatch(Act(c.p().i[0]), [&]<Act K>() {
        parallel_for(c.out[0].numel(), kGrain, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; i++) gx[i] = gy[i] * act::slope<K>(x[i]);
        });
    });
}

ValueId act_grad(Graph& g, ValueId x, ValueId gy, Act kind) {
    Params p;
    p.i[0] = int64_t(kind);
    return g.apply1(Op::act_grad, {gy, x}, p);
}

const OpDef def_act_grad{"act_grad", "activations", act_grad_infer, act_grad_cost, nullptr, act_grad_cpu,
                         kOpGradHelper | kOpInplace};

// ---------------- geglu: x [..., 2F] -> x[..., :F] * gelu_erf(x[..., F:]) ----------------

static std::vector<OutSpec> geglu_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input");
    c.check(dtype_is_float(c.dtype(0)), "input must be floating point");
    Shape s = c.shape(0);
    c.check(s.nd >= 1 && s.last() > 0 && s.last() % 2 == 0, "last dim must be even and non-zero ([..., 2F])");
    s.d[size_t(s.nd - 1)] /= 2;
    return {dense(c.dtype(0), s)};
}
static Cost geglu_cost(const OpCall& c) {
    double n = double(c.shape(0).numel()) / 2;
    return {12.0 * n, 1.5 * call_bytes_in(c, 0)};
}
static void geglu_backward(BackwardCtx& b) { b.add(0, geglu_grad(b.g, b.in(0), b.grad())); }
static void geglu_cpu(CpuCtx& c) {
    const float* x = c.in_f32(0);
    float* y = c.out_f32(0);
    const int64_t F = c.out_shape(0).last(), rows = c.out[0].numel() / std::max<int64_t>(F, 1);
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(F, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; r++) {
            const float* h = x + r * 2 * F;
            for (int64_t j = 0; j < F; j++) y[r * F + j] = h[j] * act::value<Act::gelu_erf>(h[F + j]);
        }
    });
}

ValueId geglu(Graph& g, ValueId x) { return g.apply1(Op::geglu, {x}); }

const OpDef def_geglu{"geglu", "activations", geglu_infer, geglu_cost, geglu_backward, geglu_cpu, kOpCheapRecompute};

// ---------------- geglu_grad: inputs {x [..., 2F], gy [..., F]} -> gx [..., 2F] ----------------
// gx[..., j] = gy * gelu(gate), gx[..., F + j] = gy * h * gelu'(gate), with h = x[..., j],
// gate = x[..., F + j]. Each pair (j, F + j) is read before either is written, so the
// result may overwrite x (the projection output, which usually dies here).

static std::vector<OutSpec> geglu_grad_infer(const OpCall& c) {
    c.check(c.n_in() == 2, "takes {x, gy}");
    c.check(dtype_is_float(c.dtype(0)) && dtype_is_float(c.dtype(1)), "inputs must be floating point");
    Shape s = c.shape(0);
    c.check(s.nd >= 1 && s.last() > 0 && s.last() % 2 == 0, "x's last dim must be even and non-zero");
    Shape half = s;
    half.d[size_t(s.nd - 1)] /= 2;
    c.check(c.shape(1) == half, "gy must have shape ", half);
    return {dense(c.dtype(0), s)};
}
static Cost geglu_grad_cost(const OpCall& c) {
    return {20.0 * double(c.shape(1).numel()), 2 * call_bytes_in(c, 0) + call_bytes_in(c, 1)};
}
static void geglu_grad_cpu(CpuCtx& c) {
    const float* x = c.in_f32(0);
    const float* gy = c.in_f32(1);
    float* gx = c.out_f32(0);
    const int64_t F = c.in_shape(1).last(), rows = c.in[1].numel() / std::max<int64_t>(F, 1);
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(F, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; r++) {
            const float* xr = x + r * 2 * F;
            const float* gr = gy + r * F;
            float* out = gx + r * 2 * F;
            for (int64_t j = 0; j < F; j++) {
                float h = xr[j], gate = xr[F + j], g = gr[j];
                out[j] = g * act::value<Act::gelu_erf>(gate);
                out[F + j] = g * h * act::slope<Act::gelu_erf>(gate);
            }
        }
    });
}

ValueId geglu_grad(Graph& g, ValueId x, ValueId gy) { return g.apply1(Op::geglu_grad, {x, gy}); }

const OpDef def_geglu_grad{"geglu_grad", "activations", geglu_grad_infer, geglu_grad_cost, nullptr, geglu_grad_cpu,
                           kOpGradHelper | kOpInplace};

}  // namespace gl
