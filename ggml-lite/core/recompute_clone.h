// What the recompute rewrites (rewrite_for_recompute, rewrite_recompute_set) share: the new graph
// under construction, with clones of forward nodes inserted into the backward pass. Which values
// are dropped and where the clones go is each rewrite's own business; internal to core/.
#pragma once
#include <vector>

#include "ggml-lite/core/graph.h"

namespace gl {

class RecomputeRewrite {
public:
    // dropped: per value of g, whether the forward pass drops it. added (may be null) counts clones.
    RecomputeRewrite(const Graph& g, const std::vector<bool>& dropped, int* added);

    // Appends a clone of forward node p of g; the dropped values it reads must be cloned already.
    void clone_node(int p);
    // The clone of dropped value x, kNoValue before its producer was cloned.
    ValueId clone_of(ValueId x) const { return clone_of_[size_t(x)]; }
    // Appends node i of g as n (its inputs already pointing at clones where needed).
    void keep(size_t i, Node n);
    // Points producers at the new node order and re-bases backward views of dropped values on
    // their clones; call once, after every node of g was kept.
    Graph finish();

private:
    const Graph& g_;
    const std::vector<bool>& dropped_;
    int* added_;
    Graph r_;
    std::vector<int> new_index_;       // per node of g: its index in r_
    std::vector<ValueId> clone_of_;    // per value of g: its clone in r_
};

}  // namespace gl
