#include "ggml-lite/core/param_casts.h"

#include <map>
#include <utility>

#include "ggml-lite/core/error.h"

namespace gl {

int merge_param_casts(Graph& g) {
    GL_CHECK(g.backward_begin() == int(g.nodes.size()), "merge_param_casts: the graph already has a backward pass");
    std::map<std::pair<DType, DType>, std::vector<size_t>> casts;  // (from, to) -> cast nodes, in order
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        if (n.op == Op::cast && g.v(n.in[0]).role == Role::param && g.v(n.in[0]).base == n.in[0])
            casts[{g.dtype(n.in[0]), g.dtype(n.out[0])}].push_back(i);
    }
    std::vector<bool> merged(g.nodes.size(), false);
    std::vector<Node> front;
    int count = 0;
    for (const auto& [types, at] : casts) {
        if (at.size() < 2) continue;
        Node m;
        m.op = Op::cast_multi;
        m.p.i[0] = int64_t(types.second);
        for (size_t i : at) {
            m.in.push_back(g.nodes[i].in[0]);
            m.out.push_back(g.nodes[i].out[0]);
            merged[i] = true;
            count++;
        }
        // The outputs are the casts' own values: the op's shape rule must give them as they are.
        const std::vector<OutSpec> spec = op_def(m.op).infer(OpCall{m.op, g, m.in, m.p});
        for (size_t k = 0; k < spec.size(); k++)
            GL_CHECK(spec[k].dtype == g.dtype(m.out[k]) && spec[k].layout.shape == g.shape(m.out[k]),
                     "merge_param_casts: ", g.describe(m.out[k]), " is not what cast_multi makes");
        front.push_back(std::move(m));
    }
    if (front.empty()) return 0;
    std::vector<Node> nodes = std::move(front);
    for (size_t i = 0; i < g.nodes.size(); i++)
        if (!merged[i]) nodes.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(nodes);
    for (size_t i = 0; i < g.nodes.size(); i++)
        for (ValueId y : g.nodes[i].out) g.v(y).producer = int(i);
    return count;
}

}  // namespace gl
