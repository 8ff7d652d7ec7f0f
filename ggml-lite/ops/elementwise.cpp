// Elementwise arithmetic with NumPy broadcasting (add, sub, mul), scale, seeded dropout
// (build-time seed, optionally mixed with a per-step seed input) and the in-place accumulate.
#include "ggml-lite/ops/family.h"
#include "ggml-lite/ops/rng.h"

namespace gl {

// ---------------- add / sub / mul: two inputs of one dtype, broadcast ----------------

static std::vector<OutSpec> binary_infer(const OpCall& c) {
    c.check(c.n_in() == 2, "takes two inputs");
    c.check(c.dtype(0) == c.dtype(1), "inputs must share a dtype");
    c.check(dtype_is_float(c.dtype(0)), "inputs must be floating point");
    Shape out;
    c.check(try_broadcast(c.shape(0), c.shape(1), &out), "shapes do not broadcast");
    return {dense(c.dtype(0), out)};
}

static Cost binary_cost(const OpCall& c) {
    Shape s = broadcast_shapes(c.shape(0), c.shape(1), op_name(c.op));
    return {double(s.numel()), call_bytes_all_in(c) + double(s.numel()) * double(dtype_size(c.dtype(0)))};
}

// Strides (in elements of a dense input) that walk input `in` along the dims of `out`:
// 0 where the input broadcasts. Dims are aligned at the end, padded to 4.
static std::array<int64_t, 4> bcast_strides(const Shape& in, const Shape& out) {
    std::array<int64_t, 4> st{0, 0, 0, 0};
    int64_t s = 1;
    for (int i = out.nd - 1, j = in.nd - 1; i >= 0; i--, j--) {
        int64_t d = j >= 0 ? in.d[size_t(j)] : 1;
        st[size_t(4 - out.nd + i)] = d == 1 ? 0 : s;
        s *= d;
    }
    return st;
}

template <class F>
static void binary_cpu(CpuCtx& c, F f) {
    const float* a = c.in_f32(0);
    const float* b = c.in_f32(1);
    float* y = c.out_f32(0);
    const Shape& out = c.out_shape(0);
    const int64_t n = out.numel();
    if (c.in_shape(0) == out && c.in_shape(1) == out) {
        parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; i++) y[i] = f(a[i], b[i]);
        });
        return;
    }
    std::array<int64_t, 4> dim{1, 1, 1, 1};
    for (int i = 0; i < out.nd; i++) dim[size_t(4 - out.nd + i)] = out.d[size_t(i)];
    auto sa = bcast_strides(c.in_shape(0), out), sb = bcast_strides(c.in_shape(1), out);
    const int64_t rows = dim[0] * dim[1] * dim[2];
    parallel_for(rows, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(dim[3], 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; r++) {
            int64_t i2 = r % dim[2], i1 = (r / dim[2]) % dim[1], i0 = r / (dim[2] * dim[1]);
            int64_t oa = i0 * sa[0] + i1 * sa[1] + i2 * sa[2];
            int64_t ob = i0 * sb[0] + i1 * sb[1] + i2 * sb[2];
            float* yr = y + r * dim[3];
            for (int64_t k = 0; k < dim[3]; k++) yr[k] = f(a[oa + k * sa[3]], b[ob + k * sb[3]]);
        }
    });
}

static void add_backward(BackwardCtx& b) {
    if (b.wants(0)) b.add(0, sum_to(b.g, b.grad(), b.g.shape(b.in(0))));
    if (b.wants(1)) b.add(1, sum_to(b.g, b.grad(), b.g.shape(b.in(1))));
}
static void sub_backward(BackwardCtx& b) {
    if (b.wants(0)) b.add(0, sum_to(b.g, b.grad(), b.g.shape(b.in(0))));
    if (b.wants(1)) b.add(1, scale(b.g, sum_to(b.g, b.grad(), b.g.shape(b.in(1))), -1.0f));
}
static void mul_backward(BackwardCtx& b) {
    // Copies taken first: GCC may read a g.shape() reference after mul() has moved g.values,
    // even when the parameter is a by-value Shape.
    const Shape s0 = b.g.shape(b.in(0)), s1 = b.g.shape(b.in(1));
    if (b.wants(0)) b.add(0, sum_to(b.g, mul(b.g, b.grad(), b.in(1)), s0));
    if (b.wants(1)) b.add(1, sum_to(b.g, mul(b.g, b.grad(), b.in(0)), s1));
}

static void add_cpu(CpuCtx& c) { binary_cpu(c, [](float x, float y) { return x + y; }); }
static void sub_cpu(CpuCtx& c) { binary_cpu(c, [](float x, float y) { return x - y; }); }
static void mul_cpu(CpuCtx& c) { binary_cpu(c, [](float x, float y) { return x * y; }); }

ValueId add(Graph& g, ValueId a, ValueId b) { return g.apply1(Op::add, {a, b}); }
ValueId sub(Graph& g, ValueId a, ValueId b) { return g.apply1(Op::sub, {a, b}); }
ValueId mul(Graph& g, ValueId a, ValueId b) { return g.apply1(Op::mul, {a, b}); }

const OpDef def_add{"add", "elementwise", binary_infer, binary_cost, add_backward, add_cpu, kOpInplace | kOpPlainAdd};
const OpDef def_sub{"sub", "elementwise", binary_infer, binary_cost, sub_backward, sub_cpu, kOpInplace};
const OpDef def_mul{"mul", "elementwise", binary_infer, binary_cost, mul_backward, mul_cpu, kOpInplace};

// ---------------- unary float ops shared by scale and dropout ----------------

static std::vector<OutSpec> unary_infer(const OpCall& c) {
    c.check(c.n_in() == 1, "takes one input");
    c.check(dtype_is_float(c.dtype(0)), "input must be floating point");
    return {dense(c.dtype(0), c.shape(0))};
}
static Cost unary_cost(const OpCall& c) { return {double(c.shape(0).numel()), 2 * call_bytes_in(c, 0)}; }

// ---------------- scale: p.f[0] = s ----------------

static void scale_backward(BackwardCtx& b) { b.add(0, scale(b.g, b.grad(), b.p().f[0])); }
static void scale_cpu(CpuCtx& c) {
    const float* x = c.in_f32(0);
    float* y = c.out_f32(0);
    const float s = c.p().f[0];
    parallel_for(c.out[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) y[i] = s * x[i];
    });
}

ValueId scale(Graph& g, ValueId x, float s) {
    Params p;
    p.f[0] = s;
    return g.apply1(Op::scale, {x}, p);
}

const OpDef def_scale{"scale", "elementwise", unary_infer, unary_cost, scale_backward, scale_cpu, kOpInplace};

// ---------------- dropout: {x[, seed_input i32 scalar]}; p.f[0] = drop probability, p.i[0] = seed ----------------
// The mask is a pure function of (seed, element index), so the backward pass (dropout of the
// gradient with the same seed) and a recomputed forward see the same mask. With a seed input the
// seed is dropout_step_seed(p.i[0], value): the host changes it per step without a rebuild.

static std::vector<OutSpec> dropout_infer(const OpCall& c) {
    c.check(c.p.f[0] >= 0.0f && c.p.f[0] < 1.0f, "drop probability ", c.p.f[0], " not in [0, 1)");
    c.check(c.n_in() == 1 || c.n_in() == 2, "takes x or {x, seed_input}");
    if (c.n_in() == 2)
        c.check(c.dtype(1) == DType::i32 && c.shape(1).numel() == 1, "seed_input must be an i32 scalar");
    c.check(dtype_is_float(c.dtype(0)), "input must be floating point");
    return {dense(c.dtype(0), c.shape(0))};
}
static void dropout_backward(BackwardCtx& b) {
    const uint64_t seed = uint64_t(b.p().i[0]);
    b.add(0, b.node.in.size() > 1 ? dropout(b.g, b.grad(), b.p().f[0], seed, b.in(1))
                                  : dropout(b.g, b.grad(), b.p().f[0], seed));
}
static void dropout_cpu(CpuCtx& c) {
    const float* x = c.in_f32(0);
    float* y = c.out_f32(0);
    const float p = c.p().f[0], keep_scale = 1.0f / (1.0f - p);
    uint64_t seed = uint64_t(c.p().i[0]);
    if (c.n_in() > 1) seed = dropout_step_seed(seed, c.in_i32(1)[0]);
    parallel_for(c.out[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) y[i] = dropout_keep(seed, uint64_t(i), p) ? x[i] * keep_scale : 0.0f;
    });
}

ValueId dropout(Graph& g, ValueId x, float p, uint64_t seed) {
    if (p == 0.0f) return x;
    Params prm;
    prm.f[0] = p;
    prm.i[0] = int64_t(seed);
    return g.apply1(Op::dropout, {x}, prm);
}

ValueId dropout(Graph& g, ValueId x, float p, uint64_t seed, ValueId seed_input) {
    if (p == 0.0f) return x;
    Params prm;
    prm.f[0] = p;
    prm.i[0] = int64_t(seed);
    return g.apply1(Op::dropout, {x, seed_input}, prm);
}

const OpDef def_dropout{"dropout", "elementwise", dropout_infer, unary_cost, dropout_backward, dropout_cpu, kOpInplace};

}  // namespace gl

namespace gl {

// ---------------- accumulate(acc, x, ctl): acc = (ctl[0] != 0 ? 0 : acc) + ctl[1] * x, in place ----------------
// Gradient accumulation over micro-batches: ctl f32 [2] = {reset, weight} is written by the host
// per micro-step, so one graph serves the first micro-step (reset, which also clears a NaN left in
// acc) and the others. acc: a dense f32 storage owner (persistent state); x: any float, acc's
// element count.

static std::vector<OutSpec> accumulate_infer(const OpCall& c) {
    c.check(c.n_in() == 3, "takes acc, x, ctl");
    c.check(c.dtype(0) == DType::f32 && c.layout(0).is_contiguous() && c.g.v(c.in[0]).base == c.in[0],
            "acc must be a dense f32 storage owner");
    c.check(dtype_is_float(c.dtype(1)) && c.shape(1).numel() == c.shape(0).numel(),
            "x must be floating point with acc's element count");
    c.check(c.dtype(2) == DType::f32 && c.shape(2).numel() == 2, "ctl must be f32 [2] = {reset, weight}");
    return {};
}
static Cost accumulate_cost(const OpCall& c) { return {2.0 * double(c.shape(0).numel()), 2 * call_bytes_all_in(c)}; }
static void accumulate_cpu(CpuCtx& c) {
    float* acc = static_cast<float*>(c.in[0].data) + c.in[0].layout.offset;
    const float* x = c.in_f32(1);
    const float* ctl = c.in_f32(2);
    const bool reset = ctl[0] != 0.0f;
    const float w = ctl[1];
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) acc[i] = (reset ? 0.0f : acc[i]) + w * x[i];
    });
}

void accumulate(Graph& g, ValueId acc, ValueId x, ValueId ctl) { g.apply(Op::accumulate, {acc, x, ctl}); }

const OpDef def_accumulate{"accumulate", "elementwise", accumulate_infer, accumulate_cost, nullptr, accumulate_cpu,
                           kOpNoGrad | kOpMutates};

}  // namespace gl
