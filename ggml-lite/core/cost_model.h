// The time model the planner ranks recompute choices by and predicts step times with: a node
// costs max(flops / flops_per_s, bytes / bytes_per_s) + launch_s, from its op's {flops, bytes}
// cost, times its op's scale and the step scale; views launch nothing and cost nothing. Fitted to
// a device by fit_cost_model from a per-node profile (Runtime::set_profiling) and a measured step.
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
    // Every node's time multiplied: the step as it really runs (a CUDA-graph replay, kernels back
    // to back) over the sum of its kernels timed one by one under the profiler.
    double step_scale = 1.0;

    // Predicted seconds of one node of g (0 for views).
    double node_seconds(const Graph& g, const Node& n) const;
    // The three constants alone: no op scale, no step scale (what the rates explain).
    double rate_seconds(const Graph& g, const Node& n) const;
    // Predicted seconds of every node of g, in order.
    double graph_seconds(const Graph& g) const;
    double op_scale_of(size_t op) const { return op < op_scale.size() ? op_scale[op] : 1.0; }
    std::string describe() const;  // "185 TFLOP/s, 2.6 TB/s, 4 us per kernel"
    // The fields as C++ assignments, to paste as new defaults ("flops_per_s = 2.07e+14; ...").
    std::string code() const;
};

// The floating-point operations of g's launching nodes as their ops' cost rules count them (a
// GEMM's 2MNK, attention's 4·B·H·L·S·d forward, ...): what an MFU figure divides by.
double graph_flops(const Graph& g);

// Fits a CostModel to measured node times of graph g (ms per run, one per node, as
// Runtime::profiled_ms(i) / profiled_runs() gives them), per node t = s_op * (max(f / F, b / B) + L),
// alternating two steps until the op scales settle:
//  - with the scales fixed, the constants from the times divided by their op's scale: L the
//    median over the nodes whose cost is below 1 MB and 1 MFLOP; F and B least squares in
//    relative error over a compute-bound and a memory-bound class of nodes (split by flops per
//    byte, at the split whose max() model has the least relative error);
//  - with the constants fixed, each op's scale its measured total over its predicted total;
// then the scales are normalised so that the constants alone predict the profile's total (the
// scales say which ops are slower or faster than the average kernel). The scale of an op and the
// constants are told apart by the op's small nodes (launch-bound) against its large ones.
// step_scale: step_ms over the profile's total when step_ms > 0 (the step as it really runs,
// e.g. a CUDA-graph replay, where kernels start back to back rather than eagerly under the
// profiler's events), else 1. Throws gl::Error when the sizes disagree or nothing was measured.
CostModel fit_cost_model(const Graph& g, const std::vector<double>& node_ms, double step_ms = 0);

// One op's line of the predicted-against-measured table.
struct CostModelRow {
    std::string op;         // op name, or "total"
    int kernels = 0;        // nodes that launch
    double measured_ms = 0;  // the profile's total
    double rates_ms = 0;     // the three constants alone
    double scale = 1;        // the model's scale for the op (1: none)
    double model_ms = 0;     // the constants times the op's scale (no step scale: what the profile measures)
    double node_error = 0;   // sum |model - measured| over the op's nodes, over measured: what the
                             // model misses node by node, after the op's scale
    double ratio() const { return rates_ms > 0 ? measured_ms / rates_ms : 0.0; }  // measured over rates
};

// Predicted against measured per op, slowest first, then the total ("total"), for a profile of g
// under model m.
std::vector<CostModelRow> cost_model_rows(const CostModel& m, const Graph& g, const std::vector<double>& node_ms);
// The rows as a table, with the model and the step it predicts.
std::string cost_model_report(const CostModel& m, const Graph& g, const std::vector<double>& node_ms);

}  // namespace gl
