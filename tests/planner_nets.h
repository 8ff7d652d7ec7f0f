// Graphs for the planner and autodiff tests: random DAGs of small ops, and a way to run a
// graph on the CPU backend with fixed leaf data.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"

namespace gltest {

// A graph, the data of its leaves and (after differentiate) its loss and gradients.
struct Net {
    gl::Graph g;
    std::mt19937 rng{1};
    std::vector<std::pair<gl::ValueId, std::vector<float>>> data;
    std::vector<gl::ValueId> params;
    gl::ValueId loss = gl::kNoValue;
    gl::Gradients grads;

    // A leaf of the given role with uniform data in [-1, 1).
    gl::ValueId leaf(gl::Role role, const std::string& name, gl::Shape s);
    // loss = sum_k sum(v_k * R_k) with fixed random R_k; marks it an output and appends backward.
    void differentiate(const std::vector<gl::ValueId>& terms);
};

// A random DAG of elementwise ops, views, concat and matmul on 2-D f32 values. With
// `backward`, a loss over a few values is differentiated; with `segments`, runs of nodes
// are put in checkpoint segments.
Net random_net(uint32_t seed, int n_ops, bool backward, bool segments);

// Runs a plan of net.g on the CPU backend (arenas poisoned first) and returns every
// gradient of net.params (in order), then every output value of the input graph.
std::vector<std::vector<float>> run_net(const Net& net, const gl::Plan& plan);

// "" when the node list is a valid topological order with consistent producers.
std::string check_topology(const gl::Graph& g);

}  // namespace gltest
