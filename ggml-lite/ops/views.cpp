// Views (reshape, permute, slice, expand: no data moves) and copies (contiguous, concat,
// fill, cast, cast_multi). A view's layout is expressed in the storage of its base value.
#include <cmath>

#include "ggml-lite/ops/family.h"

namespace gl {

// ---------------- reshape: p.i[0..4] = target shape ----------------

static std::vector<OutSpec> reshape_infer(const OpCall& c) {
    Shape s = shape_from_params(c.p);
    c.check(s.numel() == c.shape(0).numel(), "cannot reshape to ", s, ": element count differs");
    c.check(c.layout(0).is_contiguous(), "input must be contiguous (use the reshape() builder, which copies)");
    Layout l = Layout::contiguous(s);
    l.offset = c.layout(0).offset;
    return {{c.dtype(0), l}};
}
static Cost view_cost(const OpCall&) { return {}; }
static void reshape_backward(BackwardCtx& b) { b.add(0, reshape(b.g, b.grad(), b.g.shape(b.in(0)))); }

ValueId reshape(Graph& g, ValueId x, Shape s) {
    if (g.shape(x) == s) return x;
    if (!g.v(x).layout.is_contiguous()) x = contiguous(g, x, true);
    Params p;
    shape_to_params(p, s);
    return g.apply1(Op::reshape, {x}, p);
}

const OpDef def_reshape{"reshape", "views", reshape_infer, view_cost, reshape_backward, nullptr, kOpView};

// ---------------- permute: p.i[0..3] = perm ----------------

static std::vector<OutSpec> permute_infer(const OpCall& c) {
    const Layout& in = c.layout(0);
    int nd = in.shape.nd;
    Layout l;
    l.shape.nd = nd;
    l.offset = in.offset;
    bool seen[kMaxDims] = {false, false, false, false};
    for (int i = 0; i < nd; i++) {
        int64_t a = c.p.i[size_t(i)];
        c.check(a >= 0 && a < nd && !seen[a], "invalid permutation");
        seen[a] = true;
        l.shape.d[size_t(i)] = in.shape.d[size_t(a)];
        l.stride[size_t(i)] = in.stride[size_t(a)];
    }
    return {{c.dtype(0), l}};
}
static void permute_backward(BackwardCtx& b) {
    int nd = b.g.shape(b.in(0)).nd;
    std::vector<int> inv(static_cast<size_t>(nd));
    for (int i = 0; i < nd; i++) inv[size_t(b.p().i[size_t(i)])] = i;
    b.add(0, permute(b.g, b.grad(), inv));
}

ValueId permute(Graph& g, ValueId x, const std::vector<int>& perm) {
    const Shape& s = g.shape(x);
    Params p;
    if (int(perm.size()) != s.nd) {
        std::vector<ValueId> in{x};
        OpCall{Op::permute, g, in, p}.fail(cat("permutation has ", perm.size(), " entries for ", s.nd, " dims"));
    }
    for (size_t i = 0; i < perm.size(); i++) p.i[i] = perm[i] < 0 ? perm[i] + s.nd : perm[i];
    return g.apply1(Op::permute, {x}, p);
}

const OpDef def_permute{"permute", "views", permute_infer, view_cost, permute_backward, nullptr, kOpView};

// ---------------- slice: p.i[0] axis, p.i[1] start, p.i[2] len ----------------

static std::vector<OutSpec> slice_infer(const OpCall& c) {
    Layout l = c.layout(0);
    int nd = l.shape.nd;
    int64_t axis = c.p.i[0], start = c.p.i[1], len = c.p.i[2];
    c.check(axis >= 0 && axis < nd, "axis ", axis, " out of range");
    c.check(start >= 0 && len >= 0 && start + len <= l.shape.d[size_t(axis)],
            "range [", start, ", ", start + len, ") out of bounds for dim ", l.shape.d[size_t(axis)]);
    l.offset += start * l.stride[size_t(axis)];
    l.shape.d[size_t(axis)] = len;
    return {{c.dtype(0), l}};
}
static void slice_backward(BackwardCtx& b) {
    // Pad the gradient with zeros back to the input's extent along the axis.
    Graph& g = b.g;
    const Shape full = g.shape(b.in(0));  // a copy: fill() below appends values
    int axis = int(b.p().i[0]);
    int64_t start = b.p().i[1], len = b.p().i[2];
    DType t = g.dtype(b.grad());
    std::vector<ValueId> parts;
    Shape s = full;
    if (start > 0) {
        s.d[size_t(axis)] = start;
        parts.push_back(fill(g, s, 0.0f, t));
    }
    parts.push_back(b.grad());
    int64_t rest = full.d[size_t(axis)] - start - len;
    if (rest > 0) {
        s.d[size_t(axis)] = rest;
        parts.push_back(fill(g, s, 0.0f, t));
    }
    b.add(0, parts.size() == 1 ? parts[0] : concat(g, parts, axis));
}

ValueId slice(Graph& g, ValueId x, int axis, int64_t start, int64_t len) {
    Params p;
    int nd = g.shape(x).nd;
    p.i[0] = axis < 0 ? axis + nd : axis;
    p.i[1] = start;
    p.i[2] = len;
    return g.apply1(Op::slice, {x}, p);
}

const OpDef def_slice{"slice", "views", slice_infer, view_cost, slice_backward, nullptr, kOpView};

// ---------------- expand: p.i[0..4] = target shape ----------------

static std::vector<OutSpec> expand_infer(const OpCall& c) {
    Shape s = shape_from_params(c.p);
    const Layout& in = c.layout(0);
    c.check(s.nd >= in.shape.nd, "cannot expand to fewer dims ", s);
    Layout l;
    l.shape = s;
    l.offset = in.offset;
    for (int i = 0; i < s.nd; i++) {
        int j = in.shape.nd - s.nd + i;
        int64_t d = j >= 0 ? in.shape.d[size_t(j)] : 1;
        c.check(d == s.d[size_t(i)] || d == 1, "cannot expand to ", s);
        l.stride[size_t(i)] = (j < 0 || (d == 1 && s.d[size_t(i)] != 1)) ? 0 : in.stride[size_t(j)];
    }
    return {{c.dtype(0), l}};
}
static void expand_backward(BackwardCtx& b) { b.add(0, sum_to(b.g, b.grad(), b.g.shape(b.in(0)))); }

ValueId expand(Graph& g, ValueId x, Shape s) {
    if (g.shape(x) == s) return x;
    Params p;
    shape_to_params(p, s);
    return g.apply1(Op::expand, {x}, p);
}

const OpDef def_expand{"expand", "views", expand_infer, view_cost, expand_backward, nullptr, kOpView};

// ---------------- contiguous: dense copy ----------------

static std::vector<OutSpec> copy_infer(const OpCall& c) { return {dense(c.dtype(0), c.shape(0))}; }
static Cost copy_cost(const OpCall& c) { return {0, 2 * call_bytes_in(c, 0)}; }
static void contiguous_backward(BackwardCtx& b) { b.add(0, b.grad()); }
static void contiguous_cpu(CpuCtx& c) {
    const float* x = c.in_f32(0);
    float* y = c.out_f32(0);
    if (x != y) std::memcpy(y, x, size_t(c.out[0].numel()) * 4);
}

ValueId contiguous(Graph& g, ValueId x, bool force_copy) {
    const Value& v = g.v(x);
    if (!force_copy && v.base == x && v.layout.is_contiguous() && v.layout.offset == 0) return x;
    return g.apply1(Op::contiguous, {x});
}

const OpDef def_contiguous{"contiguous", "views", copy_infer, copy_cost, contiguous_backward, contiguous_cpu, 0};

// ---------------- concat: p.i[0] = axis ----------------

static std::vector<OutSpec> concat_infer(const OpCall& c) {
    c.check(c.n_in() >= 1, "needs at least one input");
    Shape s = c.shape(0);
    int axis = int(c.p.i[0]);
    c.check(axis >= 0 && axis < s.nd, "axis ", axis, " out of range");
    int64_t total = 0;
    for (int i = 0; i < c.n_in(); i++) {
        const Shape& si = c.shape(i);
        c.check(c.dtype(i) == c.dtype(0), "inputs must share a dtype");
        c.check(si.nd == s.nd, "inputs must have the same rank");
        for (int k = 0; k < s.nd; k++)
            c.check(k == axis || si.d[size_t(k)] == s.d[size_t(k)], "inputs differ outside the concat axis");
        total += si.d[size_t(axis)];
    }
    s.d[size_t(axis)] = total;
    return {dense(c.dtype(0), s)};
}
static Cost concat_cost(const OpCall& c) { return {0, 2 * call_bytes_all_in(c)}; }
static void concat_backward(BackwardCtx& b) {
    int axis = int(b.p().i[0]);
    int64_t at = 0;
    for (int i = 0; i < int(b.node.in.size()); i++) {
        int64_t len = b.g.shape(b.in(i)).d[size_t(axis)];
        if (b.wants(i)) b.add(i, slice(b.g, b.grad(), axis, at, len));
        at += len;
    }
}
static void concat_cpu(CpuCtx& c) {
    const Shape& out = c.out_shape(0);
    int axis = int(c.p().i[0]);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= out.d[size_t(k)];
    for (int k = axis + 1; k < out.nd; k++) inner *= out.d[size_t(k)];
    float* y = c.out_f32(0);
    int64_t row = out.d[size_t(axis)] * inner, at = 0;
    for (int i = 0; i < c.n_in(); i++) {
        const float* x = c.in_f32(i);
        int64_t w = c.in_shape(i).d[size_t(axis)] * inner;
        for (int64_t o = 0; o < outer; o++) std::memcpy(y + o * row + at, x + o * w, size_t(w) * 4);
        at += w;
    }
}

ValueId concat(Graph& g, const std::vector<ValueId>& xs, int axis) {
    Params p;
    if (!xs.empty()) p.i[0] = axis < 0 ? axis + g.shape(xs[0]).nd : axis;
    return g.apply1(Op::concat, xs, p);
}

const OpDef def_concat{"concat", "views", concat_infer, concat_cost, concat_backward, concat_cpu, 0};

// ---------------- fill: p.i[0..4] shape, p.i[5] dtype, p.f[0] value ----------------

static std::vector<OutSpec> fill_infer(const OpCall& c) {
    c.check(c.n_in() == 0, "takes no inputs");
    c.check(c.p.i[5] >= 0 && c.p.i[5] < kDTypeCount, "invalid dtype");
    return {dense(DType(c.p.i[5]), shape_from_params(c.p))};
}
static Cost fill_cost(const OpCall& c) {
    return {0, double(shape_from_params(c.p).numel()) * double(dtype_size(DType(c.p.i[5])))};
}
static void fill_cpu(CpuCtx& c) {
    float* y = c.out_f32(0);
    float v = c.p().f[0];
    for (int64_t i = 0; i < c.out[0].numel(); i++) y[i] = v;
}

ValueId fill(Graph& g, Shape s, float value, DType t) {
    Params p;
    shape_to_params(p, s);
    p.i[5] = int64_t(t);
    p.f[0] = value;
    return g.apply1(Op::fill, {}, p);
}

const OpDef def_fill{"fill", "views", fill_infer, fill_cost, nullptr, fill_cpu, kOpNoGrad};

// ---------------- cast: p.i[0] = target dtype ----------------

static std::vector<OutSpec> cast_infer(const OpCall& c) {
    c.check(c.p.i[0] >= 0 && c.p.i[0] < kDTypeCount, "invalid dtype");
    return {dense(DType(c.p.i[0]), c.shape(0))};
}
static Cost cast_cost(const OpCall& c) {
    return {0, double(c.shape(0).numel()) * double(dtype_size(c.dtype(0)) + dtype_size(DType(c.p.i[0])))};
}
static void cast_backward(BackwardCtx& b) { b.add(0, cast(b.g, b.grad(), b.g.dtype(b.in(0)))); }
static void cast_cpu(CpuCtx& c) {
    // Element by element through f32, which holds every f16/bf16 value and i8/u8 exactly.
    const TensorRef& x = c.in[0];
    const TensorRef& y = c.out[0];
    if (x.dtype == DType::i32 && y.dtype == DType::i32) {
        const int32_t* s = c.in_i32(0);
        std::memcpy(static_cast<int32_t*>(y.data) + y.layout.offset, s, size_t(y.numel()) * 4);
        return;
    }
    std::vector<float> tmp(size_t(x.numel()));
    gather_f32(x, tmp.data());
    scatter_f32(tmp.data(), y);
}

ValueId cast(Graph& g, ValueId x, DType t) {
    if (g.dtype(x) == t) return x;
    Params p;
    p.i[0] = int64_t(t);
    return g.apply1(Op::cast, {x}, p);
}

const OpDef def_cast{"cast", "views", cast_infer, cast_cost, cast_backward, cast_cpu, kOpCheapRecompute};

// ------ cast_multi: {x_0 .. x_{N-1}} -> {y_0 .. y_{N-1}}; p.i[0] = target dtype, p.f[0] = scale ------
// N casts in one node (one launch on CUDA): a step's parameter masters to the activations' dtype,
// and in the backward their gradients back. Inputs share a dtype; y_k = x_k * scale (in f32), cast;
// a scale of 1 is the plain cast. The scale is a LoRA branch's, folded into its up weight's copy
// (ops/param_casts.h).

static std::vector<OutSpec> cast_multi_infer(const OpCall& c) {
    c.check(c.p.i[0] >= 0 && c.p.i[0] < kDTypeCount, "invalid dtype");
    c.check(c.n_in() >= 1, "takes at least one tensor");
    std::vector<OutSpec> out;
    for (int k = 0; k < c.n_in(); k++) {
        c.check(c.dtype(k) == c.dtype(0), "every input must have input 0's dtype");
        c.check(dtype_is_float(c.dtype(k)), "inputs must be floating point");
        out.push_back(dense(DType(c.p.i[0]), c.shape(k)));
    }
    c.check(dtype_is_float(DType(c.p.i[0])), "the target dtype must be floating point");
    c.check(std::isfinite(c.p.f[0]), "the scale must be finite");
    return out;
}
static Cost cast_multi_cost(const OpCall& c) {
    double bytes = 0;
    for (int k = 0; k < c.n_in(); k++)
        bytes += double(c.shape(k).numel()) * double(dtype_size(c.dtype(k)) + dtype_size(DType(c.p.i[0])));
    return {0, bytes};
}
static void cast_multi_backward(BackwardCtx& b) {
    std::vector<int> which;
    std::vector<ValueId> grads;
    for (int k = 0; k < int(b.node.in.size()); k++)
        if (b.wants(k) && b.grad(k) != kNoValue) {
            which.push_back(k);
            grads.push_back(b.grad(k));
        }
    if (grads.empty()) return;
    const std::vector<ValueId> back = cast_multi(b.g, grads, b.g.dtype(b.in(0)), b.p().f[0]);
    for (size_t j = 0; j < which.size(); j++) b.add(which[j], back[j]);
}
static void cast_multi_cpu(CpuCtx& c) {
    const float s = c.p().f[0];
    for (int k = 0; k < c.n_in(); k++) {
        std::vector<float> tmp(size_t(c.in[size_t(k)].numel()));
        gather_f32(c.in[size_t(k)], tmp.data());
        if (s != 1.0f)
            for (float& e : tmp) e *= s;
        scatter_f32(tmp.data(), c.out[size_t(k)]);
    }
}

std::vector<ValueId> cast_multi(Graph& g, const std::vector<ValueId>& xs, DType t, float scale) {
    Params p;
    p.i[0] = int64_t(t);
    p.f[0] = scale;
    return g.apply(Op::cast_multi, xs, p);
}

const OpDef def_cast_multi{"cast_multi", "views", cast_multi_infer, cast_multi_cost, cast_multi_backward, cast_multi_cpu,
                           0};

}  // namespace gl
