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
    // Per op (indexed by Op): how much longer than the three constants say its kernels take, as
    // fitted to a profile (kernels differ in how close they come to the device's rates). Empty: 1.
    std::vector<double> op_scale;

    // Predicted seconds of one node of g (0 for views).
    double node_seconds(const Graph& g, const Node& n) const;
    // Predicted seconds of every node of g, in order.
    double graph_seconds(const Graph& g) const;
    std::string describe() const;  // "185 TFLOP/s, 2.6 TB/s, 4 us per kernel"
};

// Fits a CostModel to measured node times of graph g (ms per run, one per node, as
// Runtime::profiled_ms(i) / profiled_runs() gives them). Launch overhead: the median time of the
// nodes whose cost is below 1 MB and 1 MFLOP. Rates: the nodes split by flops per byte into a
// compute-bound and a memory-bound class, each rate that class's total work over its total time
// after the launch overhead, at the split with the least squared error over all nodes. Then one
// scale per op: its measured total over its predicted total. When step_ms > 0 (the step as it
// really runs, e.g. a CUDA-graph replay, where kernels start back to back rather than eagerly
// under the profiler's events), every scale is multiplied so the predicted step equals step_ms.
// Throws gl::Error when the sizes disagree or nothing was measured.
CostModel fit_cost_model(const Graph& g, const std::vector<double>& node_ms, double step_ms = 0);

// Predicted against measured time per op and in total, for a profile of g under model m.
std::string cost_model_report(const CostModel& m, const Graph& g, const std::vector<double>& node_ms);

}  // namespace gl
