// The fusion pass (see the header): adds folded into the epilogues of the products before them.
#include "ggml-lite/core/fusion.h"

#include <algorithm>

#include "ggml-lite/core/error.h"

namespace gl {

namespace {

// Drops the nodes marked removed (n of them), keeping the others' order and their values' producers.
void drop_removed(Graph& g, const std::vector<bool>& removed, size_t n) {
    std::vector<int> index(g.nodes.size(), -1);
    std::vector<Node> kept;
    kept.reserve(g.nodes.size() - n);
    for (size_t i = 0; i < g.nodes.size(); i++) {
        if (removed[i]) continue;
        index[i] = int(kept.size());
        kept.push_back(std::move(g.nodes[i]));
    }
    g.nodes = std::move(kept);
    for (Value& v : g.values)
        if (v.producer >= 0) v.producer = index[size_t(v.producer)];
}

class EpilogueFusion {
public:
    explicit EpilogueFusion(Graph& g) : g_(g), removed_(g.nodes.size(), false) {
        const size_t V = size_t(g.value_count());
        reads_.assign(V, 0);
        any_output_.assign(V, false);
        views_.resize(V);
        for (const Node& n : g.nodes) {
            if (op_def(n.op).flags & kOpView) continue;  // a view reads no bytes
            for (ValueId x : n.in) reads_[size_t(g.v(x).base)]++;
        }
        for (ValueId v = 0; v < ValueId(V); v++) {
            const ValueId b = g.v(v).base;
            if (g.v(v).output) any_output_[size_t(b)] = true;
            if (b != v) views_[size_t(b)].push_back(v);
        }
    }

    void run(FusionStats& st) {
        for (size_t j = 0; j < g_.nodes.size(); j++) {
            const Node& add = g_.nodes[j];
            if (!(op_def(add.op).flags & kOpPlainAdd) || add.in.size() != 2 || add.out.size() != 1) continue;
            const Value& y = g_.v(add.out[0]);
            if (g_.shape(add.in[0]) != y.shape() || g_.shape(add.in[1]) != y.shape() ||
                g_.dtype(add.in[0]) != y.dtype || g_.dtype(add.in[1]) != y.dtype)
                continue;
            const Target t0 = target_of(add, 0), t1 = target_of(add, 1);
            if (t0.product < 0 && t1.product < 0) continue;
            const int side = t0.product > t1.product ? 0 : 1;  // the later product takes the other input
            fuse(j, side, side == 0 ? t0 : t1, st);
        }
        drop_removed(g_, removed_, size_t(st.nodes_removed));
    }

private:
    // Where the add's input s comes from and where its other input can go: `product` makes input s
    // and will write the sum; `taker` (the product itself, or the node making the residual it already
    // has, and so on down) takes the other input as its residual. -1 when there is none.
    struct Target {
        int product = -1, taker = -1;
    };

    // Whether storage m, made by node p, may be folded into: the only output of an op that takes a
    // residual, in the activation arena, computed, no graph output, its bytes read through one
    // input slot of one node (views aside), p of the add's pass and segment.
    bool foldable(ValueId m, int p, const Node& add) const {
        if (p < 0) return false;
        const Node& n = g_.nodes[size_t(p)];
        const Value& mv = g_.v(m);
        return op_def(n.op).take_residual && n.out.size() == 1 && n.out[0] == m && mv.category == Category::activations &&
               mv.role == Role::computed && !any_output_[size_t(m)] && reads_[size_t(m)] == 1 &&
               n.backward == add.backward && n.segment == add.segment;
    }

    Target target_of(const Node& add, int s) const {
        const ValueId a = add.in[size_t(s)], r = add.in[size_t(1 - s)];
        const Value& av = g_.v(a);
        const ValueId m = av.base;
        const int p = g_.v(m).producer;
        if (!foldable(m, p, add)) return {};
        if (av.shape() != g_.v(m).shape() || !av.layout.is_contiguous() || av.layout.offset != 0) return {};
        // A product with a residual already computes p + r1: the sum p + (r1 + r) has r1's maker take
        // r when it can (a LoRA's up projection holds its base's output, which takes the block's
        // residual stream), and so on down a chain of such residuals.
        int q = p;
        for (int depth = 0; depth < kMaxChain; depth++) {
            const Node& n = g_.nodes[size_t(q)];
            const int ri = op_def(n.op).residual_input(n);
            if (ri < 0) break;
            const ValueId r1 = n.in[size_t(ri)];
            const int q1 = g_.v(r1).producer;
            if (g_.v(r1).base != r1 || !foldable(r1, q1, add)) return {};
            q = q1;
        }
        if (op_def(g_.nodes[size_t(q)].op).residual_input(g_.nodes[size_t(q)]) >= 0) return {};
        // The residual (a view is made by its own node) must be made before its taker runs.
        if (std::max(g_.v(r).producer, g_.v(g_.v(r).base).producer) >= q) return {};
        return {p, q};
    }

    void fuse(size_t j, int side, Target t, FusionStats& st) {
        const ValueId y = g_.nodes[j].out[0], r = g_.nodes[j].in[size_t(1 - side)];
        const ValueId m = g_.v(g_.nodes[j].in[size_t(side)]).base;
        Node& taker = g_.nodes[size_t(t.taker)];
        GL_CHECK(op_def(taker.op).take_residual(taker, r), "fusion: internal error, ", op_name(taker.op),
                 " refused the residual ", g_.describe(r));
        const std::vector<OutSpec> spec = op_def(taker.op).infer(OpCall{taker.op, g_, taker.in, taker.p});
        GL_CHECK(spec.size() == 1 && spec[0].dtype == g_.dtype(r) && spec[0].layout.shape == g_.shape(r),
                 "fusion: internal error, ", op_name(taker.op), " takes ", g_.describe(r), " but makes ",
                 spec.empty() ? std::string("nothing") : spec[0].layout.shape.str());
        g_.nodes[size_t(t.product)].out[0] = y;
        g_.v(y).producer = t.product;
        // The product's former output and its views: views of y now, which no node makes or reads.
        views_[size_t(m)].push_back(m);
        for (ValueId v : views_[size_t(m)]) {
            Value& x = g_.v(v);
            if (x.producer >= 0 && x.producer != t.product) {
                removed_[size_t(x.producer)] = true;  // a view node between the product and the add
                st.nodes_removed++;
            }
            x.producer = -1;
            x.base = y;
            x.category = g_.v(y).category;
        }
        // They follow y when a later sum folds into this one's product in turn.
        auto& moved = views_[size_t(m)];
        views_[size_t(y)].insert(views_[size_t(y)].end(), moved.begin(), moved.end());
        moved.clear();
        removed_[j] = true;
        st.nodes_removed++;
        st.adds++;
        st.chained += t.taker != t.product;
    }

    static constexpr int kMaxChain = 16;  // residuals followed down from a product
    Graph& g_;
    std::vector<bool> removed_;          // per node
    std::vector<int> reads_;             // per storage owner: input slots of non-view nodes reading it
    std::vector<bool> any_output_;       // per storage owner: it or a view of it is a graph output
    std::vector<std::vector<ValueId>> views_;  // per storage owner: the values viewing it
};

// Products joined into pairs (the header): P(a2, b2, residual R) with R the only output of Q.
class PairJoin {
public:
    explicit PairJoin(Graph& g) : g_(g), removed_(g.nodes.size(), false) {
        const size_t V = size_t(g.value_count());
        reads_.assign(V, 0);
        any_output_.assign(V, false);
        viewed_.assign(V, false);
        for (const Node& n : g.nodes) {
            if (op_def(n.op).flags & kOpView) continue;
            for (ValueId x : n.in) reads_[size_t(g.v(x).base)]++;
        }
        for (ValueId v = 0; v < ValueId(V); v++) {
            const ValueId b = g.v(v).base;
            if (g.v(v).output) any_output_[size_t(b)] = true;
            if (b != v) viewed_[size_t(b)] = true;
        }
    }

    void run(FusionStats& st) {
        int removed = 0;
        for (size_t j = 0; j < g_.nodes.size(); j++) {
            if (removed_[j]) continue;
            const Node& p = g_.nodes[j];
            const OpDef& def = op_def(p.op);
            if (!def.join_pair || !def.residual_input || p.out.size() != 1) continue;
            const int ri = def.residual_input(p);
            if (ri < 0) continue;
            const ValueId r = p.in[size_t(ri)];
            const int qi = g_.v(r).producer;
            if (qi < 0 || qi >= int(j) || removed_[size_t(qi)]) continue;
            const Node& q = g_.nodes[size_t(qi)];
            const Value& rv = g_.v(r);
            // R: Q's one output, owning its bytes (no view of it), in the activation arena,
            // computed, no graph output, read by P alone (once: its residual); one pass and segment.
            if (q.op != p.op || q.out.size() != 1 || q.out[0] != r || rv.base != r || viewed_[size_t(r)] ||
                rv.category != Category::activations || rv.role != Role::computed || any_output_[size_t(r)] ||
                reads_[size_t(r)] != 1 || q.backward != p.backward || q.segment != p.segment)
                continue;
            Node joined = q;
            if (!def.join_pair(joined, p)) continue;
            const ValueId y = p.out[0];
            joined.out[0] = y;
            const std::vector<OutSpec> spec = def.infer(OpCall{joined.op, g_, joined.in, joined.p});
            GL_CHECK(spec.size() == 1 && spec[0].dtype == g_.dtype(y) && spec[0].layout.shape == g_.shape(y),
                     "fusion: internal error, the joined ", op_name(p.op), " makes ",
                     spec.empty() ? std::string("nothing") : spec[0].layout.shape.str(), ", not ", g_.describe(y));
            // The joined node runs where Q ran when P's own operands are made by then (inputs
            // live no longer than before), else where P ran (Q's inputs were ready there).
            int ready = -1;
            for (size_t k = 0; k < p.in.size(); k++) {
                if (int(k) == ri) continue;
                const ValueId x = p.in[k];
                ready = std::max({ready, g_.v(x).producer, g_.v(g_.v(x).base).producer});
            }
            const size_t at = ready < qi ? size_t(qi) : j;
            g_.nodes[size_t(at)] = std::move(joined);
            removed_[at == j ? size_t(qi) : j] = true;
            removed++;
            g_.v(y).producer = int(at);
            // Q's former output: a view of y that no node makes or reads (as a folded add's product).
            Value& x = g_.v(r);
            x.producer = -1;
            x.base = y;
            x.category = g_.v(y).category;
            st.pairs++;
        }
        st.nodes_removed += removed;
        drop_removed(g_, removed_, size_t(removed));
    }

private:
    Graph& g_;
    std::vector<bool> removed_;     // per node
    std::vector<int> reads_;        // per storage owner: input slots of non-view nodes reading it
    std::vector<bool> any_output_;  // per storage owner: it or a view of it is a graph output
    std::vector<bool> viewed_;      // per storage owner: some value views it
};

}  // namespace

Graph fuse_epilogues(const Graph& in, FusionStats* stats, bool join_pairs) {
    for (const Node& n : in.nodes)
        GL_CHECK(n.recompute_of < 0, "fusion: graph already holds recompute clones (fuse the input graph)");
    Graph g = in;
    FusionStats st;
    EpilogueFusion(g).run(st);
    if (join_pairs) PairJoin(g).run(st);
    if (stats) *stats = st;
    return g;
}

}  // namespace gl
