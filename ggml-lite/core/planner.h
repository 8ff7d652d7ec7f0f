// The static memory planner: decides what to keep, what to recompute (a graph rewrite)
// and where every byte lives, before anything is allocated.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "ggml-lite/core/cost_model.h"
#include "ggml-lite/core/graph.h"

namespace gl {

enum class Recompute : uint8_t {
    none,    // keep every forward value the backward pass needs
    blocks,  // every checkpoint segment is dropped and recomputed before its backward
    cheap,   // outputs of one-pass ops (norms, GEGLU, casts) whose inputs the backward pass keeps
             // anyway are dropped after the forward and recomputed before their first backward reader
    budget,  // the least recompute (by the cost model) whose plan fits PlanOptions::budget bytes
             // (recompute_budget.h; throws gl::Error with the smallest reachable plan when none fits)
};
const char* recompute_name(Recompute r);
Recompute parse_recompute(const std::string& s);  // "none" | "blocks" | "cheap" | "budget"; throws otherwise

struct PlanOptions {
    Recompute recompute = Recompute::none;
    size_t alignment = 256;  // byte alignment of every value's offset
    size_t budget = 0;       // Recompute::budget: the most bytes the whole plan (every arena) may take
    CostModel cost;          // predicts node times: Plan::predicted_seconds and the budget's choices
    bool fusion = true;      // fold adds into the epilogues of the products before them first (core/fusion.h)
    bool pairs = true;       // with fusion: join a product to the product its residual is (ops/pair.h)
};

struct Plan {
    Graph graph;  // the graph that runs: the input graph, fused (PlanOptions::fusion) and rewritten
                  // for recompute. Value ids of the input graph keep their meaning; recompute
                  // clones are appended.
    PlanOptions options;

    // Per value id. Storage owners get a byte offset in their category's arena; views use
    // their base's offset plus layout.offset * dtype size. -1 for views.
    std::vector<int64_t> offset;
    // Live range in node indices: written at first (-1 for leaves, bound before the run), read
    // last at last (nodes.size() for outputs, leaves and persistent categories). Only
    // meaningful for storage owners.
    std::vector<int> first, last;
    // For a value placed in-place over an input that dies at its producer: that input.
    std::vector<ValueId> inplace_of;

    std::array<size_t, kCategoryCount> arena_bytes{};  // what each category's arena holds
    std::vector<size_t> live_bytes;  // activations live at each node (its outputs written, before it frees)
    size_t peak_live_bytes = 0;   // activations: the largest sum of live bytes at one node
    int peak_node = -1;           // where that peak is reached
    std::vector<ValueId> live_at_peak;  // activation values alive there, largest first
    int recompute_nodes = 0;      // nodes added by the recompute rewrite
    int fused_adds = 0;           // adds the fusion pass folded into epilogues
    int joined_pairs = 0;         // products it joined to the product their residual is
    double recompute_flops = 0;   // their cost
    double predicted_seconds = 0;  // one run of the graph under options.cost
    double recompute_seconds = 0;  // the recompute nodes' share of it

    size_t total_bytes() const;
    // A table by category, the activation peak and the largest values alive at it.
    std::string report(int top = 8) const;
};

// Fuses g (opt.fusion), rewrites it for opt.recompute and plans it.
Plan make_plan(const Graph& g, const PlanOptions& opt = {});

// Plans g as it is (make_plan after its fusion and recompute rewrite): liveness, in-place reuse,
// offsets. recompute_nodes: how many of g's nodes are recompute clones (reported).
Plan plan_rewritten(Graph g, const PlanOptions& opt, int recompute_nodes);

// Returns "" when no two simultaneously live values of one arena share bytes (values placed
// in-place over an input that dies at that node excepted) and every value lies inside its
// arena, else a description of the first fault.
std::string check_overlaps(const Plan& p);

// The recompute rewrite on its own (make_plan calls it): returns the graph to run. Clones
// are backward nodes with recompute_of = the index of the node they repeat; rewriting a
// graph that already holds clones throws.
Graph rewrite_for_recompute(const Graph& g, Recompute policy, int* added_nodes = nullptr);

}  // namespace gl
