// The time model the planner ranks recompute choices by and predicts step times with: a node
// costs max(flops / flops_per_s, bytes / bytes_per_s) + launch_s, from its op's {flops, bytes}
// cost; views launch nothing and cost nothing. Three constants, fitted to a device by
// fit_cost_model from a per-node profile (Runtime::set_profiling) and a measured step time.
#pragma once
#include <string>
#include <vector>

namespace gl {

class Graph;
struct Node;

struct CostModel {
    // Defaults: the H200 running this library's kernels, fitted to bench/RESULTS.md's SD1.5 LoRA
    // step (512², bf16, recompute none: batch 1 in 29.7 ms, batch 8 in 118.9 ms, CUDA-graph replay,
    // 3b3371a). Nominal H200 figures are 989 TFLOPS (bf16 dense) and 4.8 TB/s: these are what the
    // kernels reach on the whole step, not peaks.
    double flops_per_s = 185e12;  // tensor-core work: matmul, conv, attention
    double bytes_per_s = 2.6e12;  // memory-bound passes: norms, elementwise, casts, optimizer
    double launch_s = 4.0e-6;     // per kernel, between kernels of a replayed CUDA graph

    // Predicted seconds of one node of g (0 for views).
    double node_seconds(const Graph& g, const Node& n) const;
    // Predicted seconds of every node of g, in order.
    double graph_seconds(const Graph& g) const;
    std::string describe() const;  // "190 TFLOP/s, 2.60 TB/s, 2.40 us per kernel"
};

// Fits a CostModel to measured node times of graph g (ms per run, one per node, as
// Runtime::profiled_ms(i) / profiled_runs() gives them). Launch overhead: the median time of the
// nodes whose cost is below 1 MB and 1 MFLOP. Rates: aggregate throughput (total work / total
// time after the launch overhead) over the nodes each bound dominates under the current
// estimate, iterated. When step_ms > 0 (the step measured as it really runs, e.g. a CUDA-graph
// replay, where kernels start back to back rather than eagerly), the launch overhead is then set
// so the predicted step equals step_ms (never below 0; the rates scale instead when it would be).
// Throws gl::Error when the sizes disagree or nothing was measured.
CostModel fit_cost_model(const Graph& g, const std::vector<double>& node_ms, double step_ms = 0);

// Predicted against measured time per op and in total, for a profile of g under model m.
std::string cost_model_report(const CostModel& m, const Graph& g, const std::vector<double>& node_ms);

}  // namespace gl
