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
    const double t = std::max(c.flops / flops_per_s, c.bytes / bytes_per_s) + launch_s;
    return op_scale.empty() ? t : t * op_scale[size_t(n.op)];
}

double CostModel::graph_seconds(const Graph& g) const {
    double s = 0;
    for (const Node& n : g.nodes) s += node_seconds(g, n);
    return s;
}

std::string CostModel::describe() const {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%.3g TFLOP/s, %.3g TB/s, %.3g us per kernel%s", flops_per_s / 1e12,
                  bytes_per_s / 1e12, launch_s * 1e6, op_scale.empty() ? "" : ", per-op scales");
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
    // The rates: nodes split by arithmetic intensity (flops per byte) into a compute-bound and a
    // memory-bound class, each class's rate its total work over its total time after the launch
    // overhead; the split with the least squared error over every node wins.
    std::sort(xs.begin(), xs.end(), [](const Sample& a, const Sample& b) {
        return a.flops * b.bytes > b.flops * a.bytes;  // most flops per byte first
    });
    std::vector<double> f(xs.size() + 1, 0), fb(xs.size() + 1, 0), b(xs.size() + 1, 0), bb(xs.size() + 1, 0);
    for (size_t i = 0; i < xs.size(); i++) {
        const double busy = std::max(xs[i].s - m.launch_s, 1e-12);
        f[i + 1] = f[i] + xs[i].flops;
        fb[i + 1] = fb[i] + busy;
        b[i + 1] = b[i] + xs[i].bytes;
        bb[i + 1] = bb[i] + busy;
    }
    const size_t n = xs.size(), stride = std::max<size_t>(1, n / 256);
    double best = -1;
    CostModel fitted = m;
    for (size_t j = 0; j <= n; j = j == n ? n + 1 : std::min(n, j + stride)) {
        CostModel c = m;
        if (f[j] > 0) c.flops_per_s = f[j] / fb[j];
        if (b[n] - b[j] > 0) c.bytes_per_s = (b[n] - b[j]) / (bb[n] - bb[j]);
        double err = 0;
        for (const Sample& x : xs) {
            const double e = std::max(x.flops / c.flops_per_s, x.bytes / c.bytes_per_s) + c.launch_s - x.s;
            err += e * e;
        }
        if (best < 0 || err < best) {
            best = err;
            fitted = c;
        }
    }
    m = fitted;

    // Per op: measured over predicted.
    std::vector<double> measured_op(size_t(kOpCount), 0.0), predicted_op(size_t(kOpCount), 0.0);
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        if (!launches(n)) continue;
        measured_op[size_t(n.op)] += node_ms[i] * 1e-3;
        predicted_op[size_t(n.op)] += m.node_seconds(g, n);
    }
    const double anchor = step_ms > 0 ? step_ms * 1e-3 / measured : 1.0;
    m.op_scale.assign(size_t(kOpCount), anchor);
    for (size_t k = 0; k < size_t(kOpCount); k++)
        if (predicted_op[k] > 0 && measured_op[k] > 0) m.op_scale[k] = anchor * measured_op[k] / predicted_op[k];
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
