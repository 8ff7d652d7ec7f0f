// Pictures of plans, as self-contained SVG text (no dependencies): the memory timeline of one
// plan and the recompute frontier of a graph.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "ggml-lite/core/recompute_budget.h"

namespace gl {

// Activation storage by where it comes from.
enum class LiveKind : uint8_t { inputs, forward, backward, recompute };
constexpr int kLiveKindCount = 4;
const char* live_kind_name(LiveKind k);

// The plan's activation bytes live at every node, split by kind; the split adds up to
// Plan::live_bytes at every node (the planner's own count).
std::vector<std::array<size_t, kLiveKindCount>> live_by_kind(const Plan& p);

// The memory timeline: the persistent arenas and the live activations by kind, stacked over the
// node order; the peak marked with the largest values alive there; the planned total. With
// `without` (a plan of the same input graph without recompute), its activations over the same
// nodes, and what recompute removed between the two. Figures are those of Plan::report().
std::string timeline_svg(const Plan& p, const Plan* without = nullptr, const std::string& title = "",
                         int top = 10);

// A point drawn beside the frontier, e.g. a fixed policy's plan.
struct FrontierMark {
    std::string label;
    size_t total_bytes = 0;
    double predicted_seconds = 0;
};
// The recompute frontier: predicted step time against planned total, for the budget steps a
// budget can pick (each lowering the smallest plan so far), with marks.
std::string frontier_svg(const std::vector<BudgetStep>& steps, const std::vector<FrontierMark>& marks = {},
                         const std::string& title = "");

}  // namespace gl
