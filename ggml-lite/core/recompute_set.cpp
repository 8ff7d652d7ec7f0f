// The recompute rewrite for a set of forward nodes: their outputs are dropped for the backward
// pass, which reads clones made on demand just before the first node that needs each one (a
// clone's own dropped inputs are cloned first, so chains recompute in order).
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/recompute_budget.h"
#include "ggml-lite/core/recompute_clone.h"

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

    RecomputeRewrite r(g, dropped, added);
    // Clones of x's producer and, first, of the dropped values that producer reads.
    std::vector<ValueId> stack;
    auto materialize = [&](ValueId x) {
        stack.push_back(x);
        while (!stack.empty()) {
            const ValueId y = stack.back();
            if (r.clone_of(y) != kNoValue) {
                stack.pop_back();
                continue;
            }
            const int p = g.v(y).producer;
            bool ready = true;
            for (ValueId z : g.nodes[size_t(p)].in)
                if (dropped[size_t(z)] && r.clone_of(z) == kNoValue) {
                    stack.push_back(z);
                    ready = false;
                }
            if (!ready) continue;
            r.clone_node(p);
            stack.pop_back();
        }
        return r.clone_of(x);
    };

    for (size_t i = 0; i < N; i++) {
        Node n = g.nodes[i];
        if (n.backward)
            for (ValueId& x : n.in)
                if (dropped[size_t(x)]) x = materialize(x);
        r.keep(i, std::move(n));
    }
    return r.finish();
}

}  // namespace gl
