// The node time model, its fit to a profile and the predicted-against-measured report.
#include "ggml-lite/core/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <array>
#include <map>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/graph.h"

namespace gl {

namespace {

bool launches(const Node& n) { return !(op_def(n.op).flags & kOpView); }

Cost node_cost(const Graph& g, const Node& n) {
    const OpCall c{n.op, g, n.in, n.p};
    return op_def(n.op).cost(c);
}

}  // namespace

double CostModel::node_seconds(const Graph& g, const Node& n) const {
    if (!launches(n)) return 0.0;
    const Cost c = node_cost(g, n);
    return std::max(c.flops / flops_per_s, c.bytes / bytes_per_s) + launch_s;
}

double CostModel::graph_seconds(const Graph& g) const {
    double s = 0;
    for (const Node& n : g.nodes) s += node_seconds(g, n);
    return s;
}

std::string CostModel::describe() const {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%.0f TFLOP/s, %.2f TB/s, %.2f us per kernel", flops_per_s / 1e12, bytes_per_s / 1e12,
                  launch_s * 1e6);
    return buf;
}

CostModel fit_cost_model(const Graph& g, const std::vector<double>& node_ms, double step_ms) {
    GL_CHECK(node_ms.size() == g.nodes.size(), "fit_cost_model: ", node_ms.size(), " node times for a graph of ",
             g.nodes.size(), " nodes");
    GL_CHECK(step_ms >= 0, "fit_cost_model: negative step time ", step_ms);
    struct Sample {
        double flops, bytes, s;
    };
    std::vector<Sample> xs;
    std::vector<double> tiny;
    double measured = 0;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        if (!launches(g.nodes[i])) continue;
        GL_CHECK(node_ms[i] >= 0, "fit_cost_model: node ", i, " has a negative time");
        const Cost c = node_cost(g, g.nodes[i]);
        xs.push_back({c.flops, c.bytes, node_ms[i] * 1e-3});
        measured += node_ms[i] * 1e-3;
        if (c.bytes < 1e6 && c.flops < 1e6) tiny.push_back(node_ms[i] * 1e-3);
    }
    GL_CHECK(measured > 0, "fit_cost_model: no node has a measured time (profile a run first)");

    CostModel m;
    if (!tiny.empty()) {
        std::nth_element(tiny.begin(), tiny.begin() + std::ptrdiff_t(tiny.size() / 2), tiny.end());
        m.launch_s = tiny[tiny.size() / 2];
    }
    for (int iter = 0; iter < 8; iter++) {
        double f = 0, fs = 0, b = 0, bs = 0;
        for (const Sample& x : xs) {
            const double busy = std::max(x.s - m.launch_s, 1e-9);
            if (x.flops / m.flops_per_s > x.bytes / m.bytes_per_s) {
                f += x.flops;
                fs += busy;
            } else {
                b += x.bytes;
                bs += busy;
            }
        }
        if (f > 0) m.flops_per_s = f / fs;
        if (b > 0) m.bytes_per_s = b / bs;
    }
    if (step_ms > 0) {
        const double step = step_ms * 1e-3;
        double busy = 0;
        for (const Sample& x : xs) busy += std::max(x.flops / m.flops_per_s, x.bytes / m.bytes_per_s);
        m.launch_s = (step - busy) / double(xs.size());
        if (m.launch_s < 0) {  // the kernels themselves ran faster than profiled one by one
            m.launch_s = 0;
            m.flops_per_s *= busy / step;
            m.bytes_per_s *= busy / step;
        }
    }
    return m;
}

std::string cost_model_report(const CostModel& m, const Graph& g, const std::vector<double>& node_ms) {
    GL_CHECK(node_ms.size() == g.nodes.size(), "cost_model_report: ", node_ms.size(), " node times for a graph of ",
             g.nodes.size(), " nodes");
    std::map<std::string, std::array<double, 3>> by_op;  // measured ms, predicted ms, kernels
    double measured = 0, predicted = 0;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        if (!launches(n)) continue;
        auto& e = by_op[op_name(n.op)];
        const double p = m.node_seconds(g, n) * 1e3;
        e[0] += node_ms[i];
        e[1] += p;
        e[2] += 1;
        measured += node_ms[i];
        predicted += p;
    }
    std::vector<std::pair<std::string, std::array<double, 3>>> rows(by_op.begin(), by_op.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second[0] > b.second[0]; });
    std::string s = cat("cost model (", m.describe(), "): predicted against measured\n");
    char line[160];
    std::snprintf(line, sizeof line, "  %-22s %10s %10s %7s %7s\n", "op", "measured", "predicted", "ratio", "kernels");
    s += line;
    auto row = [&](const std::string& name, double meas, double pred, double k) {
        std::snprintf(line, sizeof line, "  %-22s %8.3f ms %8.3f ms %7.3f %7.0f\n", name.c_str(), meas, pred,
                      meas > 0 ? pred / meas : 0.0, k);
        s += line;
    };
    for (const auto& [name, e] : rows) row(name, e[0], e[1], e[2]);
    double kernels = 0;
    for (const auto& r : rows) kernels += r.second[2];
    row("total", measured, predicted, kernels);
    return s;
}

}  // namespace gl
