// Auto-fit: the fastest of the configurations a caller allows whose whole run fits a memory limit.
// A configuration is every graph its run holds on one shared memory (make_shared_layout): the
// training steps (one per batch shape, which may recompute) and the graphs that run beside them (a
// frozen text encoder, an image encoder, sampling), laid out exactly as the run lays them out, with
// the backend's own bytes (scratch, graph executables, page) and what is held outside (the CUDA
// context). auto_fit plans every graph without recompute; a configuration that does not fit so
// is planned with the least recompute (Recompute::budget) that lets the activation arena, the
// graph executables that recompute adds and everything else fit. The chosen configuration's plans
// and layout are returned: the run uses what was fitted, so it never refuses what auto-fit chose.
// Plans need no device: a CPU-only machine fits a configuration for any GPU size.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/shared_memory.h"

namespace gl {

// "8G", "7.5GiB", "512M", "8192MiB", "1T", "4096K", "123" (bytes). K, M, G and T are binary
// (1024-based), with or without "B" / "iB", any case. Throws gl::Error naming the text.
size_t parse_bytes(const std::string& text);
std::string format_bytes(size_t bytes);  // "7.50 GiB", "512.0 MiB", "96 B"

// One graph of a configuration's run.
struct FitGraph {
    const Graph* graph = nullptr;  // lives in FitBuild::owner
    std::string label;             // for messages: "step 512x768 batch 4"
    bool recompute = false;        // may be planned with recompute (a training step); else as it is
    double runs = 0;               // runs per update: its predicted time counts this often (0: memory only)
    // An earlier graph of the build with the same nodes at a larger batch (a bucket's last, shorter
    // batch): its recompute set is tried first, which saves a search of its own.
    int like = -1;
    const Plan* planned = nullptr;  // planned by its owner (graph is its graph): laid out as it is
};

// Everything one configuration's run holds.
struct FitBuild {
    std::shared_ptr<void> owner;   // what the graphs live in; kept with the choice
    std::vector<FitGraph> graphs;  // at least one
    size_t extra_bytes = 0;        // device bytes held outside the layout (the CUDA context, ...)
    double extra_seconds = 0;      // per update, spent outside the graphs
};

struct FitOption {
    std::string label;  // what the user reads: "batch 4 x 2 accumulated, AdamW8bit"
    // Empty for a configuration the caller allows; else the flags that would allow it (advice
    // tables: what the user could change, with what it takes).
    std::string needs;
    std::function<FitBuild()> build;
};

struct FitSettings {
    size_t limit = 0;    // device bytes a configuration's layout plus its extra_bytes may take
    PlanOptions plan;    // alignment and cost model (recompute is chosen per graph)
    LayoutRules rules;   // the backend's bytes beside the plans (layout_rules("cuda"), or simulated)
    // Plan every option without recompute, also those slower than the choice (advice tables say
    // what each would take); by default those are not planned.
    bool plan_all = false;
};

struct FitRow {
    std::string label, needs;
    size_t option = 0;              // index in the options given
    bool fits = false;
    bool planned = true;            // false: not planned (no faster than the choice even without recompute)
    Recompute recompute = Recompute::none;  // budget when some graph is recomputed
    size_t peak_bytes = 0;          // the whole run as fitted (layout + extra); unfit: without recompute;
                                    // 0 when not planned
    size_t least_bytes = 0;         // unfit after recompute: the least the run was planned in
    double seconds = 0;             // predicted per update
    double recompute_seconds = 0;   // of which recompute
    std::string note;
};

// The chosen configuration as it was fitted.
struct FitChoice {
    FitBuild build;
    std::vector<Plan> plans;  // one per build.graphs entry
    SharedLayout layout;      // of the plans, with settings.rules
};

struct FitResult {
    size_t limit = 0;
    std::vector<FitRow> rows;  // fitting rows first, fastest first; then the others
    FitChoice choice;          // the first row's, when it fits
    const FitRow* chosen() const { return !rows.empty() && rows[0].fits ? &rows[0] : nullptr; }
    // The choice and the alternatives with predicted peaks and times. advice: a table of what
    // would fit (no choice made; each row's needs shown).
    std::string table(bool advice = false) const;
};

// Ranks the options by their predicted time without recompute (their graphs' cost, no plan) and
// plans them fastest first, with recompute where that does not fit; an option whose time without
// recompute is no faster than one that fits is not planned (its row says so). Builds run one at a
// time (at most the best so far is kept); the graphs of one build are planned in parallel. Throws
// gl::Error for a zero limit, no options, a build without graphs, or a failing builder (its label
// named).
FitResult auto_fit(const std::vector<FitOption>& options, const FitSettings& settings);

}  // namespace gl
