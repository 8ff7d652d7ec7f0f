// The recompute rewrite: checkpoint segments keep only their inputs and boundary outputs
// through the forward pass; the backward pass gets a clone of the part of each segment it
// needs, inserted just before the first backward node that reads it.
#include <algorithm>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"

namespace gl {

namespace {

// Which values of the input graph the forward pass drops and which forward nodes the
// backward pass needs again.
struct Analysis {
    std::vector<bool> dropped;     // per value id
    std::vector<bool> clone;       // per node index
    std::vector<int> first_reader; // per segment: first backward node reading a dropped value, -1 when none
};

// Segment of the forward node that produces v; -1 for leaves, backward values and values
// produced outside segments.
int segment_of(const Graph& g, ValueId v) {
    int p = g.v(v).producer;
    if (p < 0) return -1;
    const Node& n = g.nodes[size_t(p)];
    return n.backward ? -1 : n.segment;
}

Analysis analyse(const Graph& g) {
    const size_t V = size_t(g.value_count()), N = g.nodes.size();
    Analysis a;

    // Storage is what gets dropped: an owner produced inside a segment, in the activation
    // arena, not a graph output and read by no forward node outside its segment (reading a
    // view of it counts as reading it). The segment's inputs are produced elsewhere, so kept.
    std::vector<bool> kept(V, true);
    for (ValueId v = 0; v < ValueId(V); v++) {
        const Value& x = g.v(v);
        if (x.base == v && segment_of(g, v) >= 0 && x.category == Category::activations && !x.output) kept[size_t(v)] = false;
    }
    for (const Node& n : g.nodes) {
        if (n.backward) continue;
        for (ValueId x : n.in) {
            ValueId b = g.v(x).base;
            if (segment_of(g, b) != n.segment) kept[size_t(b)] = true;
        }
    }
    // A view is dropped with its base (views of kept storage cost nothing to keep).
    a.dropped.assign(V, false);
    for (ValueId v = 0; v < ValueId(V); v++) a.dropped[size_t(v)] = segment_of(g, v) >= 0 && !kept[size_t(g.v(v).base)];

    // Backward reads of dropped values, then their ancestors within the segment. A node's
    // producers come before it, so one reverse sweep closes the set.
    a.clone.assign(N, false);
    a.first_reader.assign(g.segment_names.size(), -1);
    for (size_t i = 0; i < N; i++) {
        const Node& n = g.nodes[i];
        if (!n.backward) continue;
        for (ValueId x : n.in) {
            if (!a.dropped[size_t(x)]) continue;
            a.clone[size_t(g.v(x).producer)] = true;
            int& first = a.first_reader[size_t(segment_of(g, x))];
            if (first < 0) first = int(i);
        }
    }
    for (size_t i = N; i-- > 0;) {
        if (!a.clone[i]) continue;
        for (ValueId x : g.nodes[i].in)
            if (a.dropped[size_t(x)]) a.clone[size_t(g.v(x).producer)] = true;
    }
    return a;
}

}  // namespace

Graph rewrite_for_recompute(const Graph& g, Recompute policy, int* added) {
    if (added) *added = 0;
    if (policy == Recompute::none) return g;
    GL_CHECK(policy == Recompute::blocks, "recompute: unknown policy ", int(policy));
    for (const Node& n : g.nodes)
        GL_CHECK(n.recompute_of < 0, "recompute: graph already holds recompute clones (rewrite it once)");
    for (const Node& n : g.nodes)
        GL_CHECK(n.segment < int(g.segment_names.size()), "recompute: node has unknown segment ", n.segment);

    const Analysis a = analyse(g);
    const size_t V = size_t(g.value_count()), N = g.nodes.size();
    std::vector<std::vector<int>> seg_nodes(g.segment_names.size());  // nodes to clone, in order
    for (size_t i = 0; i < N; i++)
        if (a.clone[i]) seg_nodes[size_t(g.nodes[i].segment)].push_back(int(i));

    Graph r = g;
    r.nodes.clear();
    r.nodes.reserve(N);
    std::vector<int> new_index(N, -1);
    std::vector<ValueId> clone_of(V, kNoValue);  // a dropped value's recomputed copy

    auto emit_clones = [&](size_t s) {
        for (int p : seg_nodes[s]) {
            const Node& src = g.nodes[size_t(p)];
            const OpDef& def = op_def(src.op);
            Node c = src;
            c.segment = -1;
            c.backward = true;  // runs inside the backward pass
            c.recompute_of = new_index[size_t(p)];
            for (ValueId& x : c.in)
                if (a.dropped[size_t(x)]) x = clone_of[size_t(x)];
            const int at = int(r.nodes.size());
            for (size_t k = 0; k < c.out.size(); k++) {
                ValueId y = c.out[k];
                Value val = g.v(y);
                ValueId id = ValueId(r.values.size());
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
        }
    };

    for (size_t i = 0; i < N; i++) {
        Node n = g.nodes[i];
        if (n.backward) {
            for (size_t s = 0; s < seg_nodes.size(); s++)
                if (a.first_reader[s] == int(i)) emit_clones(s);
            for (ValueId& x : n.in) {
                if (!a.dropped[size_t(x)]) continue;
                GL_CHECK(clone_of[size_t(x)] != kNoValue, "recompute: internal error, ", g.describe(x), " not recomputed");
                x = clone_of[size_t(x)];
            }
        }
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
