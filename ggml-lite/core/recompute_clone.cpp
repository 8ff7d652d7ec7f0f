#include "ggml-lite/core/recompute_clone.h"

#include "ggml-lite/core/op.h"

namespace gl {

RecomputeRewrite::RecomputeRewrite(const Graph& g, const std::vector<bool>& dropped, int* added)
    : g_(g), dropped_(dropped), added_(added), r_(g), new_index_(g.nodes.size(), -1),
      clone_of_(size_t(g.value_count()), kNoValue) {
    if (added_) *added_ = 0;
    r_.nodes.clear();
    r_.nodes.reserve(g.nodes.size());
}

void RecomputeRewrite::clone_node(int p) {
    const Node& src = g_.nodes[size_t(p)];
    const OpDef& def = op_def(src.op);
    Node c = src;
    c.segment = -1;
    c.backward = true;  // runs inside the backward pass
    c.recompute_of = new_index_[size_t(p)];
    for (ValueId& x : c.in)
        if (dropped_[size_t(x)]) x = clone_of_[size_t(x)];
    const int at = int(r_.nodes.size());
    for (size_t k = 0; k < c.out.size(); k++) {
        const ValueId y = c.out[k];
        Value val = g_.v(y);
        const ValueId id = ValueId(r_.values.size());
        val.name += ".recompute";
        val.producer = at;
        val.output = false;
        // A cloned view is a view of the cloned base, with the same layout.
        val.base = (def.flags & kOpView) && k == 0 ? r_.v(c.in[0]).base : id;
        val.category = val.base == id ? Category::activations : r_.v(val.base).category;
        r_.values.push_back(std::move(val));
        clone_of_[size_t(y)] = id;
        c.out[k] = id;
    }
    r_.nodes.push_back(std::move(c));
    if (added_) ++*added_;
}

void RecomputeRewrite::keep(size_t i, Node n) {
    new_index_[i] = int(r_.nodes.size());
    r_.nodes.push_back(std::move(n));
}

Graph RecomputeRewrite::finish() {
    for (ValueId v = 0; v < ValueId(g_.value_count()); v++) {
        Value& x = r_.v(v);
        if (x.producer >= 0) x.producer = new_index_[size_t(x.producer)];
    }
    // A backward view of a dropped value now views its clone: it takes the clone's storage.
    for (const Node& n : r_.nodes) {
        if (!(op_def(n.op).flags & kOpView) || n.recompute_of >= 0) continue;
        Value& y = r_.v(n.out[0]);
        y.base = r_.v(n.in[0]).base;
        y.category = r_.v(y.base).category;
    }
    return std::move(r_);
}

}  // namespace gl
