// Auto-fit: the fastest of the configurations a caller allows whose plans fit a memory limit.
// The caller describes each configuration by a callback that builds its graph (per shape, e.g.
// per dataset bucket); auto_fit plans it without recompute and, when that does not fit, with the
// least recompute that does (Recompute::budget), and ranks what fits by predicted time. Plans
// need no device: a CPU-only machine can fit a configuration for any GPU size.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ggml-lite/core/planner.h"

namespace gl {

// "8G", "7.5GiB", "512M", "8192MiB", "1T", "4096K", "123" (bytes). K, M, G and T are binary
// (1024-based), with or without "B" / "iB", any case. Throws gl::Error naming the text.
size_t parse_bytes(const std::string& text);
std::string format_bytes(size_t bytes);  // "7.50 GiB", "512.0 MiB", "96 B"

// What one configuration needs for one shape.
struct FitBuild {
    Graph graph;               // the graph whose plan is fitted (recompute applies to it)
    size_t extra_bytes = 0;    // device memory held beside the plan (other graphs' runtimes, ...)
    double extra_seconds = 0;  // time per run spent outside the graph (other graphs, ...)
};

struct FitOption {
    std::string label;  // what the user reads: "micro-batch 4 x 2 accumulation, AdamW8bit"
    double runs = 1;    // graph runs per optimizer update (gradient accumulation steps)
    std::function<FitBuild(size_t shape)> build;
};

struct FitShape {
    std::string label;    // "512x512"
    double weight = 1.0;  // its share of the updates (e.g. the bucket's image count)
};

struct FitSettings {
    size_t limit = 0;            // device bytes the plans plus extra_bytes may take
    std::vector<FitShape> shapes = {FitShape{}};
    PlanOptions plan;            // alignment and cost model (recompute is chosen per option)
    // Bytes the backend's runtime holds beside a plan, counted on the planned graph (recompute adds
    // nodes): gl::cuda_runtime_bytes on CUDA (workspace, graph executable, page). None: 0.
    std::function<size_t(const Graph&)> runtime_bytes;
};

struct FitRow {
    std::string label;
    size_t option = 0;            // index in the options given
    bool fits = false;
    bool planned = true;          // false: not planned with recompute (no faster than the choice anyway)
    Recompute recompute = Recompute::none;  // none when every shape fits without, else budget
    std::vector<size_t> budgets;  // per shape: the PlanOptions::budget to plan it with (recompute budget)
    size_t peak_bytes = 0;        // the largest shape's plan total plus its extra and runtime bytes
    size_t least_bytes = 0;       // when it does not fit: the least the largest shape can be planned in
    double seconds = 0;           // predicted per update, shapes weighted
    double recompute_seconds = 0; // of which recompute
    std::string note;
};

struct FitResult {
    size_t limit = 0;
    std::vector<FitRow> rows;  // fitting rows first, fastest first; then the others
    const FitRow* chosen() const { return !rows.empty() && rows[0].fits ? &rows[0] : nullptr; }
    std::string table() const;  // the choice and the alternatives with predicted peaks and times
};

// Plans every option (every shape) and ranks them. Options whose plan without recompute is no
// faster than an option that already fits are not searched further (their row says so). Throws
// gl::Error for a zero limit, no options or shapes, or a failing builder (its label named).
FitResult auto_fit(const std::vector<FitOption>& options, const FitSettings& settings);

}  // namespace gl
