#include "ggml-lite/ops/param_casts.h"

#include <cmath>
#include <iterator>
#include <map>
#include <tuple>
#include <utility>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/family.h"

namespace gl {

namespace {

bool is_param_leaf(const Graph& g, ValueId v) { return g.v(v).role == Role::param && g.v(v).base == v; }

// Readers of each value (as any input of any node), counted once per input slot.
std::vector<int> reader_counts(const Graph& g) {
    std::vector<int> r(size_t(g.value_count()), 0);
    for (const Node& n : g.nodes)
        for (ValueId x : n.in) r[size_t(x)]++;
    return r;
}

// A forward cast of one parameter master: a cast, or a cast_multi of one tensor (a folded scale).
bool is_param_cast(const Graph& g, const Node& n) {
    return !n.backward && (n.op == Op::cast || (n.op == Op::cast_multi && n.in.size() == 1)) &&
           is_param_leaf(g, n.in[0]);
}

// The values' shape rule must give the outputs as they are (ids and layouts stay).
void check_outputs(const Graph& g, const Node& n) {
    const std::vector<OutSpec> spec = op_def(n.op).infer(OpCall{n.op, g, n.in, n.p});
    GL_CHECK(spec.size() == n.out.size(), "param casts: ", op_def(n.op).name, " makes ", spec.size(), " outputs, not ",
             n.out.size());
    for (size_t k = 0; k < spec.size(); k++)
        GL_CHECK(spec[k].dtype == g.dtype(n.out[k]) && spec[k].layout.shape == g.shape(n.out[k]), "param casts: ",
                 g.describe(n.out[k]), " is not what ", op_def(n.op).name, " makes");
}

void set_producers(Graph& g) {
    for (size_t i = 0; i < g.nodes.size(); i++)
        for (ValueId y : g.nodes[i].out) g.v(y).producer = int(i);
}

void check_forward_only(const Graph& g, const char* pass) {
    GL_CHECK(g.backward_begin() == int(g.nodes.size()), pass, ": the graph already has a backward pass");
}

}  // namespace

int fold_param_scales(Graph& g) {
    check_forward_only(g, "fold_param_scales");
    const std::vector<int> readers = reader_counts(g);
    const auto only_reader = [&](ValueId v) { return readers[size_t(v)] == 1 && !g.v(v).output; };
    std::vector<Node> front;  // scaled copies of masters used without a cast (f32 activations)
    int folded = 0;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        Node& s = g.nodes[i];
        // An output scale stays: its view would not keep the linear's bytes alive to the end.
        if (s.op != Op::scale || !std::isfinite(s.p.f[0]) || g.v(s.out[0]).output) continue;
        const ValueId y = s.in[0];
        if (g.v(y).producer < 0 || !only_reader(y)) continue;
        Node& lin = g.nodes[size_t(g.v(y).producer)];
        if (lin.op != Op::linear || lin.in.size() != 2) continue;
        const ValueId w = lin.in[1];
        if (is_param_leaf(g, w)) {  // linear(x, P): P's scaled copy, made first
            Node c;
            c.op = Op::cast_multi;
            c.in = {w};
            c.p.i[0] = int64_t(g.dtype(w));
            c.p.f[0] = s.p.f[0];
            const std::vector<OutSpec> spec = op_def(c.op).infer(OpCall{c.op, g, c.in, c.p});
            Value copy;
            copy.name = g.v(w).name + ".scaled";
            copy.dtype = spec[0].dtype;
            copy.layout = spec[0].layout;
            copy.base = ValueId(g.values.size());
            c.out = {copy.base};
            g.values.push_back(std::move(copy));
            lin.in[1] = c.out[0];
            front.push_back(std::move(c));
        } else {  // linear(x, cast(P)), the cast read by the linear alone: the cast scales
            if (g.v(w).producer < 0 || !only_reader(w)) continue;
            Node& c = g.nodes[size_t(g.v(w).producer)];
            if (c.op != Op::cast || !is_param_leaf(g, c.in[0])) continue;
            c.op = Op::cast_multi;  // cast's p.i[0] is the target dtype, as cast_multi's
            c.p.f[0] = s.p.f[0];
            check_outputs(g, c);
        }
        // The scale's output becomes a view of the linear's (a reshape to its own shape).
        Params p;
        shape_to_params(p, g.shape(y));
        s.op = Op::reshape;
        s.p = p;
        const std::vector<OutSpec> view = op_def(Op::reshape).infer(OpCall{Op::reshape, g, s.in, s.p});
        Value& out = g.v(s.out[0]);
        out.layout = view[0].layout;
        out.base = g.v(y).base;
        folded++;
    }
    if (!front.empty()) {
        std::move(g.nodes.begin(), g.nodes.end(), std::back_inserter(front));
        g.nodes = std::move(front);
        set_producers(g);
    }
    return folded;
}

int merge_param_casts(Graph& g) {
    check_forward_only(g, "merge_param_casts");
    // (from, to, scale) -> the param casts, in node order.
    std::map<std::tuple<DType, DType, float>, std::vector<size_t>> casts;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        if (!is_param_cast(g, n)) continue;
        const float scale = n.op == Op::cast ? 1.0f : n.p.f[0];
        casts[{g.dtype(n.in[0]), g.dtype(n.out[0]), scale}].push_back(i);
    }
    std::vector<bool> merged(g.nodes.size(), false);
    std::vector<Node> front;
    int count = 0;
    for (const auto& [key, at] : casts) {
        if (at.size() < 2) continue;
        Node m;
        m.op = Op::cast_multi;
        m.p.i[0] = int64_t(std::get<1>(key));
        m.p.f[0] = std::get<2>(key);
        for (size_t i : at) {
            m.in.push_back(g.nodes[i].in[0]);
            m.out.push_back(g.nodes[i].out[0]);
            merged[i] = true;
            count++;
        }
        check_outputs(g, m);
        front.push_back(std::move(m));
    }
    if (front.empty()) return 0;
    std::vector<Node> nodes = std::move(front);
    for (size_t i = 0; i < g.nodes.size(); i++)
        if (!merged[i]) nodes.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(nodes);
    set_producers(g);
    return count;
}

}  // namespace gl
