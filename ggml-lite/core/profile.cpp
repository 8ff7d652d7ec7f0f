// Runtime's per-node profile: accumulation and the report (the backends time the nodes).
#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/op.h"
#include "ggml-lite/core/runtime.h"

namespace gl {

void Runtime::set_profiling(bool on) {
    profiling_ = on;
    if (on && node_ms_.size() != plan_.graph.nodes.size()) reset_profile();
}

void Runtime::reset_profile() {
    node_ms_.assign(plan_.graph.nodes.size(), 0.0);
    profiled_runs_ = 0;
}

namespace {

const char* phase_of(const Node& n) {
    if (op_def(n.op).flags & kOpMutates) return "update";
    if (n.recompute_of >= 0) return "recompute";
    return n.backward ? "backward" : "forward";
}

}  // namespace

std::string Runtime::profile_report(size_t top) const {
    if (profiled_runs_ == 0) return "profile: no profiled runs (set_profiling(true), then run())\n";
    const Graph& g = plan_.graph;
    const double runs = profiled_runs_;
    const double total = std::accumulate(node_ms_.begin(), node_ms_.end(), 0.0) / runs;
    std::string s;
    char line[256];
    std::snprintf(line, sizeof line, "profile (%s): %d runs, %.3f ms per run in %zu nodes\n", backend_name(),
                  profiled_runs_, total, g.nodes.size());
    s += line;
    auto pct = [&](double ms) { return total > 0 ? 100.0 * ms / total : 0.0; };

    std::map<std::string, std::pair<double, int>> by_op, by_phase;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        auto& o = by_op[op_def(n.op).name];
        o.first += node_ms_[i] / runs;
        o.second++;
        auto& ph = by_phase[phase_of(n)];
        ph.first += node_ms_[i] / runs;
        ph.second++;
    }
    auto sorted = [](const std::map<std::string, std::pair<double, int>>& m) {
        std::vector<std::pair<std::string, std::pair<double, int>>> v(m.begin(), m.end());
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
        return v;
    };
    s += "  by phase                ms/run       %   nodes\n";
    for (const auto& [name, t] : sorted(by_phase)) {
        std::snprintf(line, sizeof line, "    %-20s %9.3f %6.1f%% %7d\n", name.c_str(), t.first, pct(t.first), t.second);
        s += line;
    }
    s += "  by op                   ms/run       %   nodes\n";
    for (const auto& [name, t] : sorted(by_op)) {
        if (t.first <= 0.0) continue;
        std::snprintf(line, sizeof line, "    %-20s %9.3f %6.1f%% %7d\n", name.c_str(), t.first, pct(t.first), t.second);
        s += line;
    }
    // Nodes of one op on the same input shapes (a transformer's projections, a LoRA's rank-r
    // products): where many small kernels add up, which the slowest-node list does not show.
    std::map<std::string, std::pair<double, int>> by_shape;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        std::string key = op_def(n.op).name;
        for (ValueId in : n.in) key += gl::cat(" ", dtype_name(g.v(in).dtype), g.v(in).shape().str());
        auto& o = by_shape[key];
        o.first += node_ms_[i] / runs;
        o.second++;
    }
    std::vector<std::pair<std::string, std::pair<double, int>>> shapes = sorted(by_shape);
    if (shapes.size() > top) shapes.resize(top);
    std::snprintf(line, sizeof line, "  the %zu costliest op / input shapes   ms/run       %%   nodes\n", shapes.size());
    s += line;
    for (const auto& [key, t] : shapes) {
        std::snprintf(line, sizeof line, "    %9.3f %6.1f%% %6d  ", t.first, pct(t.first), t.second);
        s += line;
        s += key;
        s += "\n";
    }
    std::vector<size_t> idx(g.nodes.size());
    std::iota(idx.begin(), idx.end(), size_t(0));
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return node_ms_[a] > node_ms_[b]; });
    if (idx.size() > top) idx.resize(top);
    std::snprintf(line, sizeof line, "  the %zu slowest nodes    ms/run       %%   node  phase      op -> output\n", idx.size());
    s += line;
    for (size_t i : idx) {
        const Node& n = g.nodes[i];
        const std::string out = n.out.empty() ? (n.in.empty() ? std::string("-") : g.describe(n.in[0]))
                                              : g.describe(n.out[0]);
        std::snprintf(line, sizeof line, "    %20s %9.3f %6.1f%% %6zu  %-10s %s -> ", "", node_ms_[i] / runs,
                      pct(node_ms_[i] / runs), i, phase_of(n), op_def(n.op).name);
        s += line;
        s += out;
        s += "\n";
    }
    return s;
}

}  // namespace gl
