// The backward driver declared in core/autodiff.h. It lives with the ops because it builds nodes
// of particular ops (the seed gradient, casts back to an input's dtype, sums of gradients) with the
// builder API, as every backward rule does; core names no particular op.
#include "ggml-lite/core/autodiff.h"

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"

namespace gl {

void BackwardCtx::add(int i, ValueId gv) {
    GL_CHECK(i >= 0 && i < int(node.in.size()), op_name(node.op), " backward: input index ", i, " out of range");
    if (!need[size_t(i)] || gv == kNoValue) return;
    const Value& x = g.v(node.in[size_t(i)]);
    const Value& d = g.v(gv);
    GL_CHECK(x.shape() == d.shape(), op_name(node.op), " backward: gradient of input ", i, " has shape ",
             d.shape().str(), ", input has ", x.shape().str());
    if (d.dtype != x.dtype) gv = gl::cast(g, gv, DType(x.dtype));
    gin[size_t(i)] = gin[size_t(i)] == kNoValue ? gv : gl::add(g, gin[size_t(i)], gv);
}

Gradients backward(Graph& g, ValueId loss) {
    const Value& L = g.v(loss);
    GL_CHECK(L.numel() == 1, "backward: loss must have one element, got ", g.describe(loss));
    GL_CHECK(dtype_is_float(L.dtype), "backward: loss must be floating point, got ", g.describe(loss));
    GL_CHECK(g.backward_begin() == int(g.nodes.size()), "backward: graph already has a backward pass");

    // Which values lead to trainable parameters.
    std::vector<bool> needs(size_t(g.value_count()), false);
    for (ValueId v = 0; v < g.value_count(); v++) needs[size_t(v)] = g.v(v).role == Role::param;
    const int n_forward = int(g.nodes.size());
    for (int ni = 0; ni < n_forward; ni++) {
        const Node& n = g.nodes[size_t(ni)];
        if (op_def(n.op).flags & kOpNoGrad) continue;
        bool any = false;
        for (ValueId x : n.in) any = any || needs[size_t(x)];
        for (ValueId y : n.out) needs[size_t(y)] = any;
    }

    Gradients grads;
    grads.of.assign(size_t(g.value_count()), kNoValue);
    if (!needs[size_t(loss)]) return grads;

    g.in_backward = true;
    try {
        g.push_scope("grad");
        grads.of[size_t(loss)] = fill(g, L.shape(), 1.0f, L.dtype);
        for (int ni = n_forward - 1; ni >= 0; ni--) {
            BackwardCtx ctx{g, g.nodes[size_t(ni)], {}, {}, {}};
            bool has_gout = false;
            for (ValueId y : ctx.node.out) {
                ValueId gy = grads.of[size_t(y)];
                ctx.gout.push_back(gy);
                has_gout = has_gout || gy != kNoValue;
            }
            bool any_need = false;
            for (ValueId x : ctx.node.in) {
                ctx.need.push_back(needs[size_t(x)]);
                any_need = any_need || needs[size_t(x)];
            }
            if (!has_gout || !any_need) continue;
            const OpDef& def = op_def(ctx.node.op);
            GL_CHECK(def.backward, "backward: op ", def.name, " has no backward rule but ",
                     g.describe(ctx.node.out[0]), " needs a gradient");
            ctx.gin.assign(ctx.node.in.size(), kNoValue);
            def.backward(ctx);
            for (size_t i = 0; i < ctx.node.in.size(); i++) {
                ValueId x = ctx.node.in[i], gx = ctx.gin[i];
                if (gx == kNoValue) continue;
                ValueId& acc = grads.of[size_t(x)];
                acc = acc == kNoValue ? gx : add(g, acc, gx);
            }
        }
        g.pop_scope();
    } catch (...) {
        g.in_backward = false;
        throw;
    }

    // Parameter gradients persist in the trainable arena. A gradient that aliases another
    // value (a view, a leaf, another parameter's gradient, the seed) gets its own copy.
    std::vector<bool> taken(size_t(g.value_count()), false);
    for (ValueId v = 0; v < ValueId(grads.of.size()); v++) {
        if (g.v(v).role != Role::param || grads.of[size_t(v)] == kNoValue) continue;
        ValueId gv = grads.of[size_t(v)];
        const Value& d = g.v(gv);
        bool own = d.base == gv && d.role == Role::computed && !taken[size_t(gv)] && !d.output &&
                   d.layout.is_contiguous() && d.layout.offset == 0;
        if (!own) {
            g.push_scope("grad");
            gv = contiguous(g, gv, /*force_copy=*/true);
            g.pop_scope();
        }
        taken.resize(size_t(g.value_count()), false);
        taken[size_t(gv)] = true;
        g.v(gv).category = Category::trainable;
        g.v(gv).name = "grad." + g.v(v).name;
        g.mark_output(gv);
        grads.of[size_t(v)] = gv;
    }
    g.in_backward = false;
    return grads;
}

}  // namespace gl
