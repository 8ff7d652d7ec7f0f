// Reverse-mode autodiff: walks the forward nodes backwards and calls each op's backward
// rule, which builds gradient nodes with the ordinary builder API.
#pragma once
#include <vector>

#include "ggml-lite/core/graph.h"

namespace gl {

// Given to a backward rule for one forward node.
struct BackwardCtx {
    Graph& g;
    Node node;                     // a copy: rules append nodes, which moves g.nodes
    std::vector<ValueId> gout;     // gradient of each output (kNoValue when none flows)
    std::vector<bool> need;        // which inputs want a gradient
    std::vector<ValueId> gin;      // what the rule produced, per input

    const Params& p() const { return node.p; }
    ValueId in(int i) const { return node.in[size_t(i)]; }
    ValueId out(int k = 0) const { return node.out[size_t(k)]; }
    ValueId grad(int k = 0) const { return gout[size_t(k)]; }
    bool wants(int i) const { return need[size_t(i)]; }
    // Gradient of input i. Its shape must equal the input's shape (reduce broadcasts first).
    void add(int i, ValueId grad);
};

struct Gradients {
    std::vector<ValueId> of;  // per value id: its gradient, kNoValue when none
    ValueId operator[](ValueId v) const { return v < ValueId(of.size()) ? of[size_t(v)] : kNoValue; }
};

// Appends the backward pass of scalar `loss` to g. Every parameter reached from the loss
// gets a gradient value in the trainable arena, marked as an output; gradients of a
// parameter used several times are summed. Values that do not lead to parameters get none.
Gradients backward(Graph& g, ValueId loss);

}  // namespace gl
