// The recompute rewrite: checkpoint segments keep only their inputs and boundary outputs
// through the forward pass (policy blocks), or one-pass ops drop their outputs once the forward
// is done with them (policy cheap); the backward pass gets a clone of the part of each group it
// needs, inserted just before the first backward node that reads it.
#include <algorithm>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/recompute_clone.h"

namespace gl {

namespace {

// Which values of the input graph the forward pass drops and which forward nodes the
// backward pass needs again, in clone groups: a group's clones are emitted together, in node
// order, just before the first backward node that reads one of its dropped values.
struct Analysis {
    std::vector<bool> dropped;     // per value id
    std::vector<bool> clone;       // per node index
    std::vector<int> group;        // per node index: its clone group, -1 for none
    std::vector<int> first_reader; // per group: first backward node reading a dropped value, -1 when none
};

// The clone group of the node that produces v; -1 for leaves and ungrouped nodes.
int group_of(const Graph& g, const Analysis& a, ValueId v) {
    const int p = g.v(v).producer;
    return p < 0 ? -1 : a.group[size_t(p)];
}

// blocks: a node's group is its checkpoint segment. Storage is dropped when it is an owner
// produced inside a segment, in the activation arena, not a graph output and read by no
// forward node outside its segment (reading a view of it counts as reading it); the segment's
// inputs are produced elsewhere, so kept.
void drop_segments(const Graph& g, Analysis& a, std::vector<bool>& kept) {
    const size_t V = size_t(g.value_count());
    for (size_t i = 0; i < g.nodes.size(); i++) a.group[i] = g.nodes[i].backward ? -1 : g.nodes[i].segment;
    a.first_reader.assign(g.segment_names.size(), -1);
    for (ValueId v = 0; v < ValueId(V); v++) {
        const Value& x = g.v(v);
        if (x.base == v && group_of(g, a, v) >= 0 && x.category == Category::activations && !x.output) kept[size_t(v)] = false;
    }
    for (const Node& n : g.nodes) {
        if (n.backward) continue;
        for (ValueId x : n.in) {
            ValueId b = g.v(x).base;
            if (group_of(g, a, b) != n.segment) kept[size_t(b)] = true;
        }
    }
}

// cheap: a group per one-pass node (its op flagged kOpCheapRecompute) whose activation inputs stay
// alive until where its clone would run (the first backward reader of its outputs) anyway, so
// recomputing keeps nothing longer, and none of them dropped; its outputs that a backward node
// reads (directly or through a view) are dropped. Forward views of a dropped value join its group (the backward may read the view).
void drop_cheap(const Graph& g, Analysis& a, std::vector<bool>& kept) {
    const size_t V = size_t(g.value_count());
    // Per storage owner: the first backward node reading it, the last node reading it.
    std::vector<int> first_bw(V, -1), last(V, -1);
    for (size_t i = 0; i < g.nodes.size(); i++)
        for (ValueId x : g.nodes[i].in) {
            const size_t b = size_t(g.v(x).base);
            last[b] = int(i);
            if (g.nodes[i].backward && first_bw[b] < 0) first_bw[b] = int(i);
        }
    auto backward_read = [&](ValueId b) { return first_bw[size_t(b)] >= 0; };
    int groups = 0;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        if (n.backward) continue;
        if (op_def(n.op).flags & kOpView) {  // a view of a dropped owner goes with its producer
            const ValueId b = g.v(n.in[0]).base;
            const int p = g.v(b).producer;
            if (!kept[size_t(b)] && p >= 0) a.group[i] = a.group[size_t(p)];
            continue;
        }
        if (!(op_def(n.op).flags & kOpCheapRecompute)) continue;
        // The clone runs before the first backward reader of any output it replaces.
        int at = -1;
        for (ValueId y : n.out)
            if (backward_read(y) && (at < 0 || first_bw[size_t(y)] < at)) at = first_bw[size_t(y)];
        if (at < 0) continue;
        bool ok = true;  // every activation input is alive there anyway (and is not itself dropped)
        for (ValueId x : n.in) {
            const ValueId b = g.v(x).base;
            const Value& bv = g.v(b);  // leaves and persistent categories live through the whole run
            if (!kept[size_t(b)] || (bv.producer >= 0 && bv.category == Category::activations && last[size_t(b)] < at))
                ok = false;
        }
        if (!ok) continue;
        bool any = false;
        for (ValueId y : n.out) {
            const Value& v = g.v(y);
            if (v.base != y || v.category != Category::activations || v.output || !backward_read(y)) continue;
            kept[size_t(y)] = false;
            any = true;
        }
        if (any) a.group[i] = groups++;
    }
    a.first_reader.assign(size_t(groups), -1);
}

Analysis analyse(const Graph& g, Recompute policy) {
    const size_t V = size_t(g.value_count()), N = g.nodes.size();
    Analysis a;
    a.group.assign(N, -1);
    std::vector<bool> kept(V, true);
    if (policy == Recompute::blocks) drop_segments(g, a, kept);
    else drop_cheap(g, a, kept);
    // A view is dropped with its base (views of kept storage cost nothing to keep).
    a.dropped.assign(V, false);
    for (ValueId v = 0; v < ValueId(V); v++) a.dropped[size_t(v)] = group_of(g, a, v) >= 0 && !kept[size_t(g.v(v).base)];

    // Backward reads of dropped values, then their ancestors within the group. A node's
    // producers come before it, so one reverse sweep closes the set.
    a.clone.assign(N, false);
    for (size_t i = 0; i < N; i++) {
        const Node& n = g.nodes[i];
        if (!n.backward) continue;
        for (ValueId x : n.in) {
            if (!a.dropped[size_t(x)]) continue;
            a.clone[size_t(g.v(x).producer)] = true;
            int& first = a.first_reader[size_t(group_of(g, a, x))];
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
    GL_CHECK(policy == Recompute::blocks || policy == Recompute::cheap, "recompute: unknown policy ", int(policy));
    for (const Node& n : g.nodes)
        GL_CHECK(n.recompute_of < 0, "recompute: graph already holds recompute clones (rewrite it once)");
    for (const Node& n : g.nodes)
        GL_CHECK(n.segment < int(g.segment_names.size()), "recompute: node has unknown segment ", n.segment);

    const Analysis a = analyse(g, policy);
    const size_t N = g.nodes.size();
    std::vector<std::vector<int>> seg_nodes(a.first_reader.size());  // per group: nodes to clone, in order
    for (size_t i = 0; i < N; i++)
        if (a.clone[i]) seg_nodes[size_t(a.group[i])].push_back(int(i));

    RecomputeRewrite r(g, a.dropped, added);
    for (size_t i = 0; i < N; i++) {
        Node n = g.nodes[i];
        if (n.backward) {
            for (size_t s = 0; s < seg_nodes.size(); s++)
                if (a.first_reader[s] == int(i))
                    for (int p : seg_nodes[s]) r.clone_node(p);
            for (ValueId& x : n.in) {
                if (!a.dropped[size_t(x)]) continue;
                GL_CHECK(r.clone_of(x) != kNoValue, "recompute: internal error, ", g.describe(x), " not recomputed");
                x = r.clone_of(x);
            }
        }
        r.keep(i, std::move(n));
    }
    return r.finish();
}

}  // namespace gl
