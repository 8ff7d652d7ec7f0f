// The node time model, its fit to a profile and the predicted-against-measured report.
#include "ggml-lite/core/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/graph.h"

namespace gl {

namespace {

// printf into a std::string (table lines of known, short width).
__attribute__((format(printf, 1, 2))) std::string cat_fmt(const char* f, ...) {
    char buf[512];
    va_list a;
    va_start(a, f);
    std::vsnprintf(buf, sizeof buf, f, a);
    va_end(a);
    return buf;
}

bool launches(const Node& n) { return !(op_def(n.op).flags & kOpView); }

Cost node_cost(const Graph& g, const Node& n) {
    const OpCall c{n.op, g, n.in, n.p};
    return op_def(n.op).cost(c);
}

double rate_time(const CostModel& m, double flops, double bytes) {
    return std::max(flops / m.flops_per_s, bytes / m.bytes_per_s) + m.launch_s;
}

// One launching node of a profile.
struct Sample {
    double flops, bytes, s;  // cost; measured seconds
    size_t op;
};

// The three constants for times divided by their op's scale (fit_cost_model's first step).
void fit_rates(const std::vector<Sample>& xs, const std::vector<size_t>& by_intensity,
               const std::vector<double>& scale, CostModel& m) {
    auto u = [&](const Sample& x) { return x.s / scale[x.op]; };
    std::vector<double> tiny;
    for (const Sample& x : xs)
        if (x.s > 0 && x.bytes < 1e6 && x.flops < 1e6) tiny.push_back(u(x));
    if (!tiny.empty()) {
        std::nth_element(tiny.begin(), tiny.begin() + std::ptrdiff_t(tiny.size() / 2), tiny.end());
        m.launch_s = tiny[tiny.size() / 2];
    }
    // Least squares in relative error per class with the launch fixed: a node of the compute class
    // predicts f * (1/F) + L, so 1/F = sum (f/u)(1 - L/u) / sum (f/u)^2; likewise B. Prefix sums in
    // order of falling flops per byte: the compute class is a prefix.
    const size_t n = by_intensity.size();
    std::vector<double> ff(n + 1, 0), fr(n + 1, 0), bb(n + 1, 0), br(n + 1, 0);
    for (size_t k = 0; k < n; k++) {
        const Sample& x = xs[by_intensity[k]];
        const double t = u(x), f = x.flops / t, b = x.bytes / t, r = 1 - m.launch_s / t;
        ff[k + 1] = ff[k] + f * f;
        fr[k + 1] = fr[k] + f * r;
        bb[k + 1] = bb[k] + b * b;
        br[k + 1] = br[k] + b * r;
    }
    const size_t stride = std::max<size_t>(1, n / 256);
    double best = -1;
    CostModel fitted = m;
    for (size_t j = 0; j <= n; j = j == n ? n + 1 : std::min(n, j + stride)) {
        CostModel c = m;
        const double inv_f = ff[j] > 0 ? fr[j] / ff[j] : 0, inv_b = bb[n] - bb[j] > 0 ? (br[n] - br[j]) / (bb[n] - bb[j]) : 0;
        if (inv_f > 0) c.flops_per_s = 1 / inv_f;
        if (inv_b > 0) c.bytes_per_s = 1 / inv_b;
        double err = 0;
        for (size_t k : by_intensity) {
            const double t = u(xs[k]), e = (rate_time(c, xs[k].flops, xs[k].bytes) - t) / t;
            err += e * e;
        }
        if (best < 0 || err < best) {
            best = err;
            fitted = c;
        }
    }
    m = fitted;
}

}  // namespace

double CostModel::rate_seconds(const Graph& g, const Node& n) const {
    if (!launches(n)) return 0.0;
    const Cost c = node_cost(g, n);
    return rate_time(*this, c.flops, c.bytes);
}

double CostModel::node_seconds(const Graph& g, const Node& n) const {
    return rate_seconds(g, n) * op_scale_of(size_t(n.op)) * step_scale;
}

double graph_flops(const Graph& g) {
    double f = 0;
    for (const Node& n : g.nodes)
        if (launches(n)) f += node_cost(g, n).flops;
    return f;
}

double CostModel::graph_seconds(const Graph& g) const {
    double s = 0;
    for (const Node& n : g.nodes) s += node_seconds(g, n);
    return s;
}

std::string CostModel::describe() const {
    std::string s = cat_fmt("%.3g TFLOP/s, %.3g TB/s, %.3g us per kernel", flops_per_s / 1e12, bytes_per_s / 1e12,
                            launch_s * 1e6);
    if (!op_scale.empty()) s += ", per-op scales";
    if (step_scale != 1.0) s += cat_fmt(", step scale %.3g", step_scale);
    return s;
}

std::string CostModel::code() const {
    std::string s = cat_fmt("flops_per_s = %.4g; bytes_per_s = %.4g; launch_s = %.4g; step_scale = %.4g;",
                            flops_per_s, bytes_per_s, launch_s, step_scale);
    std::string ops;
    for (size_t k = 0; k < op_scale.size() && k < size_t(kOpCount); k++)
        if (op_scale[k] != 1.0) ops += cat_fmt(" %s %.3f", op_name(Op(k)), op_scale[k]);
    return ops.empty() ? s : s + "  // op_scale:" + ops;
}

CostModel fit_cost_model(const Graph& g, const std::vector<double>& node_ms, double step_ms) {
    GL_CHECK(node_ms.size() == g.nodes.size(), "fit_cost_model: ", node_ms.size(), " node times for a graph of ",
             g.nodes.size(), " nodes");
    GL_CHECK(step_ms >= 0 && std::isfinite(step_ms), "fit_cost_model: step time ", step_ms);
    std::vector<Sample> all;  // every launching node
    double measured = 0;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        if (!launches(g.nodes[i])) continue;
        GL_CHECK(node_ms[i] >= 0 && std::isfinite(node_ms[i]), "fit_cost_model: node ", i, " has time ", node_ms[i]);
        const Cost c = node_cost(g, g.nodes[i]);
        all.push_back({c.flops, c.bytes, node_ms[i] * 1e-3, size_t(g.nodes[i].op)});
        measured += node_ms[i] * 1e-3;
    }
    GL_CHECK(measured > 0, "fit_cost_model: no node has a measured time (profile a run first)");
    std::vector<size_t> timed;  // the nodes with a time: the rates are fitted to them
    for (size_t k = 0; k < all.size(); k++)
        if (all[k].s > 0) timed.push_back(k);
    std::stable_sort(timed.begin(), timed.end(), [&](size_t a, size_t b) {
        return all[a].flops * all[b].bytes > all[b].flops * all[a].bytes;  // most flops per byte first
    });

    CostModel m;
    std::vector<double> scale(size_t(kOpCount), 1.0), meas_op(size_t(kOpCount), 0.0), rate_op(size_t(kOpCount), 0.0);
    for (int iter = 0; iter < 100; iter++) {
        fit_rates(all, timed, scale, m);
        std::fill(meas_op.begin(), meas_op.end(), 0.0);
        std::fill(rate_op.begin(), rate_op.end(), 0.0);
        double rates = 0;
        for (const Sample& x : all) {
            const double r = rate_time(m, x.flops, x.bytes);
            meas_op[x.op] += x.s;
            rate_op[x.op] += r;
            rates += r;
        }
        // Normalised: the constants alone predict the measured total (c scales every rate time).
        const double c = measured / rates;
        m.flops_per_s /= c;
        m.bytes_per_s /= c;
        m.launch_s *= c;
        double moved = 0;
        for (size_t k = 0; k < scale.size(); k++) {
            if (rate_op[k] <= 0 || meas_op[k] <= 0) continue;  // absent, or never timed: 1
            const double s = meas_op[k] / (c * rate_op[k]);
            moved = std::max(moved, std::abs(std::log(s / scale[k])));
            scale[k] = s;
        }
        if (moved < 1e-7) break;
    }
    m.op_scale = scale;
    m.step_scale = step_ms > 0 ? step_ms * 1e-3 / measured : 1.0;
    return m;
}

std::vector<CostModelRow> cost_model_rows(const CostModel& m, const Graph& g, const std::vector<double>& node_ms) {
    GL_CHECK(node_ms.size() == g.nodes.size(), "cost_model_rows: ", node_ms.size(), " node times for a graph of ",
             g.nodes.size(), " nodes");
    std::vector<CostModelRow> rows(static_cast<size_t>(kOpCount));
    CostModelRow total;
    total.op = "total";
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        if (!launches(n)) continue;
        CostModelRow& r = rows[size_t(n.op)];
        const double rate = m.rate_seconds(g, n) * 1e3, model = rate * m.op_scale_of(size_t(n.op));
        for (CostModelRow* x : {&r, &total}) {
            x->kernels++;
            x->measured_ms += node_ms[i];
            x->rates_ms += rate;
            x->model_ms += model;
            x->node_error += std::abs(model - node_ms[i]);  // a sum until divided below
        }
    }
    for (size_t k = 0; k < rows.size(); k++) {
        rows[k].op = op_name(Op(k));
        rows[k].scale = m.op_scale_of(k);
    }
    std::erase_if(rows, [](const CostModelRow& r) { return r.kernels == 0; });
    std::stable_sort(rows.begin(), rows.end(), [](const CostModelRow& a, const CostModelRow& b) {
        return a.measured_ms > b.measured_ms;
    });
    total.scale = total.rates_ms > 0 ? total.model_ms / total.rates_ms : 1.0;
    rows.push_back(total);
    for (CostModelRow& r : rows) r.node_error = r.measured_ms > 0 ? r.node_error / r.measured_ms : 0.0;
    return rows;
}

std::string cost_model_report(const CostModel& m, const Graph& g, const std::vector<double>& node_ms) {
    const std::vector<CostModelRow> rows = cost_model_rows(m, g, node_ms);
    std::string s = cat("cost model (", m.describe(), ") against a profile, per op:\n",
                        "  measured: the profile (kernels timed one by one); rates: the three constants alone;\n",
                        "  measured/rates: how much slower (> 1) or faster (< 1) the op's kernels run than the rates "
                        "say;\n  scale: the model's factor for the op; model: rates x scale; node error: sum over the "
                        "op's nodes\n  of |model - measured| / measured, what the op's scale cannot explain\n");
    s += cat_fmt("  %-22s %7s %12s %12s %9s %7s %12s %7s\n", "op", "kernels", "measured", "rates", "meas/rate",
                 "scale", "model", "node err");
    for (const CostModelRow& r : rows)
        s += cat_fmt("  %-22s %7d %9.3f ms %9.3f ms %9.3f %7.3f %9.3f ms %6.1f %%\n", r.op.c_str(), r.kernels,
                     r.measured_ms, r.rates_ms, r.ratio(), r.scale, r.model_ms, 100 * r.node_error);
    const CostModelRow& t = rows.back();
    s += cat_fmt("  the step under the model: %.3f ms (step scale %.4g x model %.3f ms); the profile's total %.3f ms\n",
                 t.model_ms * m.step_scale, m.step_scale, t.model_ms, t.measured_ms);
    return s;
}

}  // namespace gl
