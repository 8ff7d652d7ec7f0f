// Budget-driven recompute: the least recompute (by the cost model) whose plan fits a byte budget
// for the whole plan (every arena).
//
// The unit of choice is a forward node: a node in the recompute set has its outputs dropped after
// their last forward reader, and the backward pass reads a clone made on demand, just before the
// first node that needs it (and, in a chain, the clones of the dropped values that clone reads).
// One-pass ops (what Recompute::cheap drops), attention outputs, GEGLU inputs (a projection and
// its LoRA) and whole checkpoint segments are all sets of forward nodes.
//
// The search is greedy and budget-independent (after DTR's eviction score and the design notes in
// research/runtime.md): from the empty set, each step plans the graph, looks at what is alive at
// the activation peak only because the backward pass needs it later, and adds the candidates with
// the least predicted recompute time per byte they take off the peak (a node with the producers of
// its inputs that are not alive there, or a segment's inner nodes), about 1 % of the plan per
// step, then plans again; a step whose plan grows is cut to its longest prefix that does not, and
// the candidate after that prefix is not offered again (so step totals never grow). The steps
// form one sequence of growing sets, the same for every budget; a budget takes the first step
// whose plan fits and within it the shortest prefix of the step's choices that fits. A larger
// budget therefore never recomputes more (monotone), the same graph always gives the same plan
// (deterministic), and a budget below every step's plan is refused naming the smallest one.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ggml-lite/core/planner.h"

namespace gl {

// The rewrite for a recompute set (one flag per node of g, forward compute nodes only): returns
// the graph to run. Clones are backward nodes with recompute_of = the index of the node they
// repeat, each made once, just before the first node that needs it (a backward node, or a clone
// the first such node needs). Throws gl::Error for a flag on a backward, view, mutating or
// non-activation node, or a graph that already holds clones.
Graph rewrite_recompute_set(const Graph& g, const std::vector<bool>& recompute, int* added_nodes = nullptr);

// One step of the search: its plan's figures.
struct BudgetStep {
    size_t total_bytes = 0;        // the plan's total (every arena)
    size_t peak_live_bytes = 0;    // its activation peak
    double predicted_seconds = 0;  // one run, cost model
    double recompute_seconds = 0;
    int recompute_nodes = 0;       // clones in the plan
    int set_size = 0;              // forward nodes in the recompute set
};

// The search for one graph, run lazily: plan(budget) computes the steps it needs, frontier() all.
class RecomputeSearch {
public:
    // opt.alignment, opt.cost and opt.fusion apply; opt.recompute and opt.budget are ignored.
    RecomputeSearch(const Graph& g, const PlanOptions& opt);

    // The graph the search plans and its recompute sets index: g fused (opt.fusion), else g.
    const Graph& graph() const { return g_; }

    // The plan of the least recompute that fits `budget` bytes, and in `set` (when given) its
    // recompute set (one flag per node of graph(): rewrite_recompute_set of another graph with the
    // same nodes, a smaller batch of it fused alike, recomputes the same). Throws gl::Error naming the budget and
    // the smallest plan the search reaches when none fits. Calls with other budgets reuse what
    // earlier calls planned.
    Plan plan(size_t budget, std::vector<bool>* set = nullptr);
    // Every step, from the empty set (recompute none) to where no candidate is left.
    const std::vector<BudgetStep>& frontier();
    // The smallest plan total of any step (what plan() accepts at least).
    size_t min_bytes();
    // The frontier as a table: planned total, activation peak, predicted time and its ratio to
    // recompute none, recompute time, recomputed nodes; the smallest plan marked.
    std::string frontier_table();

private:
    bool advance();  // computes the next step; false when the sequence has ended
    std::vector<bool> set_after(size_t step, size_t moves) const;
    Plan plan_set(const std::vector<bool>& set) const;

    Graph g_;  // the caller's graph, fused
    int fused_adds_ = 0, joined_pairs_ = 0;
    PlanOptions opt_;
    std::vector<bool> eligible_;             // per node: may join a recompute set
    std::vector<double> seconds_;            // per node: predicted time
    std::vector<std::vector<int>> inner_;    // per segment: eligible nodes whose storage stays inside it
    std::vector<std::vector<std::vector<int>>> moves_;  // per step: the node groups it added
    std::vector<BudgetStep> steps_;
    std::set<int> rejected_;  // candidates (seed node, or -1 - segment) whose move raised the plan
    std::map<std::pair<size_t, size_t>, size_t> prefix_bytes_;  // (step, moves) -> its plan's total, as planned
    Plan last_;               // the plan of the last step computed
    bool ended_ = false;
};

// make_plan for Recompute::budget: RecomputeSearch(g, opt).plan(opt.budget).
Plan plan_within_budget(const Graph& g, const PlanOptions& opt);

}  // namespace gl
