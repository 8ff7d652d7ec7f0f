// The recompute rewrite for a set of forward nodes: their outputs are dropped for the backward
// pass, which reads clones made on demand just before the first node that needs each one (a
// clone's own dropped inputs are cloned first, so chains recompute in order).
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/recompute_budget.h"

namespace gl {

namespace {

void check_set(const Graph& g, const std::vector<bool>& set) {
    GL_CHECK(set.size() == g.nodes.size(), "recompute set: ", set.size(), " flags for a graph of ", g.nodes.size(),
             " nodes");
    for (const Node& n : g.nodes)
        GL_CHECK(n.recompute_of < 0, "recompute: graph already holds recompute clones (rewrite it once)");
    for (size_t i = 0; i < g.nodes.size(); i++) {
        if (!set[i]) continue;
        const Node& n = g.nodes[i];
        const OpDef& def = op_def(n.op);
        GL_CHECK(!n.backward, "recompute set: node ", i, " (", def.name, ") is a backward node");
        GL_CHECK(!(def.flags & (kOpView | kOpMutates)), "recompute set: node ", i, " (", def.name,
                 (def.flags & kOpView) ? ") is a view (views follow their base)" : ") updates its inputs in place");
        for (ValueId y : n.out)
            GL_CHECK(g.v(y).category == Category::activations, "recompute set: node ", i, " (", def.name, ") writes ",
                     g.describe(y), " outside the activation arena");
    }
}

}  // namespace

Graph rewrite_recompute_set(const Graph& g, const std::vector<bool>& set, int* added) {
    if (added) *added = 0;
    check_set(g, set);
    const size_t V = size_t(g.value_count()), N = g.nodes.size();
    // Dropped: storage written by a node of the set (not a graph output), and every forward view of it.
    std::vector<bool> dropped(V, false);
    for (ValueId v = 0; v < ValueId(V); v++) {
        const Value& x = g.v(v);
        const Value& b = g.v(x.base);
        if (b.producer >= 0 && set[size_t(b.producer)] && !b.output && !x.output &&
            (x.producer < 0 || !g.nodes[size_t(x.producer)].backward))
            dropped[size_t(v)] = true;
    }

    Graph r = g;
    r.nodes.clear();
    r.nodes.reserve(N);
    std::vector<int> new_index(N, -1);
    std::vector<ValueId> clone_of(V, kNoValue);  // a dropped value's clone

    auto emit_clone = [&](int p) {
        const Node& src = g.nodes[size_t(p)];
        const OpDef& def = op_def(src.op);
        Node c = src;
        c.segment = -1;
        c.backward = true;  // runs inside the backward pass
        c.recompute_of = new_index[size_t(p)];
        for (ValueId& x : c.in)
            if (dropped[size_t(x)]) x = clone_of[size_t(x)];
        const int at = int(r.nodes.size());
        for (size_t k = 0; k < c.out.size(); k++) {
            const ValueId y = c.out[k];
            Value val = g.v(y);
            const ValueId id = ValueId(r.values.size());
            val.name += ".recompute";
            val.producer = at;
            val.output = false;
            // A cloned view is a view of the cloned base, with the same layout.
            val.base = (def.flags & kOpView) && k == 0 ? r.v(c.in[0]).base : id;
            val.category = val.base == id ? Category::activations : r.v(val.base).category;
            r.values.push_back(std::move(val));
            clone_of[size_t(y)] = id;
            c.out[k] = id;
        }
        r.nodes.push_back(std::move(c));
        if (added) ++*added;
    };
    // Clones of x's producer and, first, of the dropped values that producer reads.
    std::vector<ValueId> stack;
    auto materialize = [&](ValueId x) {
        stack.push_back(x);
        while (!stack.empty()) {
            const ValueId y = stack.back();
            if (clone_of[size_t(y)] != kNoValue) {
                stack.pop_back();
                continue;
            }
            const int p = g.v(y).producer;
            bool ready = true;
            for (ValueId z : g.nodes[size_t(p)].in)
                if (dropped[size_t(z)] && clone_of[size_t(z)] == kNoValue) {
                    stack.push_back(z);
                    ready = false;
                }
            if (!ready) continue;
            emit_clone(p);
            stack.pop_back();
        }
        return clone_of[size_t(x)];
    };

    for (size_t i = 0; i < N; i++) {
        Node n = g.nodes[i];
        if (n.backward)
            for (ValueId& x : n.in)
                if (dropped[size_t(x)]) x = materialize(x);
        new_index[i] = int(r.nodes.size());
        r.nodes.push_back(std::move(n));
    }
    for (ValueId v = 0; v < ValueId(V); v++) {
        Value& x = r.v(v);
        if (x.producer >= 0) x.producer = new_index[size_t(x.producer)];
    }
    // A backward view of a dropped value now views its clone: it takes the clone's storage.
    for (const Node& n : r.nodes) {
        if (!(op_def(n.op).flags & kOpView) || n.recompute_of >= 0) continue;
        Value& y = r.v(n.out[0]);
        y.base = r.v(n.in[0]).base;
        y.category = r.v(y.base).category;
    }
    return r;
}

}  // namespace gl
