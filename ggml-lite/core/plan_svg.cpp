// SVG pictures of plans: the memory timeline and the recompute frontier.
#include "ggml-lite/core/plan_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ggml-lite/core/error.h"

namespace gl {

const char* live_kind_name(LiveKind k) {
    switch (k) {
        case LiveKind::inputs: return "inputs";
        case LiveKind::forward: return "forward values";
        case LiveKind::backward: return "backward values";
        default: return "recomputed values";
    }
}

std::vector<std::array<size_t, kLiveKindCount>> live_by_kind(const Plan& p) {
    const Graph& g = p.graph;
    const int N = int(g.nodes.size()), bw = g.backward_begin();
    // Per kind, bytes starting at a node and ending after a node (a difference array).
    std::vector<std::array<int64_t, kLiveKindCount>> delta(size_t(N) + 1);
    std::vector<bool> handed(size_t(g.value_count()), false);  // gave its bytes to an in-place output
    for (ValueId y = 0; y < g.value_count(); y++)
        if (p.inplace_of[size_t(y)] != kNoValue) handed[size_t(p.inplace_of[size_t(y)])] = true;
    for (ValueId v = 0; v < g.value_count(); v++) {
        const Value& x = g.v(v);
        if (x.base != v || x.category != Category::activations) continue;
        LiveKind k = LiveKind::inputs;
        if (x.producer >= 0) {
            const Node& n = g.nodes[size_t(x.producer)];
            k = n.recompute_of >= 0 ? LiveKind::recompute
                : (n.backward || x.producer >= bw) ? LiveKind::backward
                                                   : LiveKind::forward;
        }
        // The planner counts a value from its producer through its last reader; an input handed
        // over in place stops counting at that reader, where its output takes the bytes.
        const int from = std::max(p.first[size_t(v)], 0);
        const int to = std::min(p.last[size_t(v)], N - 1) - (handed[size_t(v)] ? 1 : 0);
        if (to < from) continue;
        delta[size_t(from)][size_t(k)] += int64_t(x.bytes());
        delta[size_t(to) + 1][size_t(k)] -= int64_t(x.bytes());
    }
    std::vector<std::array<size_t, kLiveKindCount>> live(static_cast<size_t>(N));
    std::array<int64_t, kLiveKindCount> run{};
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < kLiveKindCount; k++) {
            run[size_t(k)] += delta[size_t(i)][size_t(k)];
            live[size_t(i)][size_t(k)] = size_t(run[size_t(k)]);
        }
    }
    return live;
}

namespace {

double mib(double b) { return b / (1024.0 * 1024.0); }

std::string esc(const std::string& s) {
    std::string r;
    for (char c : s) {
        if (c == '&') r += "&amp;";
        else if (c == '<') r += "&lt;";
        else if (c == '>') r += "&gt;";
        else if (c == '"') r += "&quot;";
        else r += c;
    }
    return r;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, f, a, b, c);
    return buf;
}

// A tick step of 1, 2 or 5 times a power of ten giving at most `n` ticks over [0, hi].
double tick_step(double hi, int n) {
    const double raw = std::max(hi, 1e-9) / n, p = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * p >= raw) return m * p;
    return 10 * p;
}

// A plot area and its axes.
struct Frame {
    double x0, x1, y0, y1;  // pixels: left, right, top, bottom
    double xmax, ymax;      // data ranges, from 0
    double xmin = 0;
    double px(double x) const { return x0 + (x - xmin) / std::max(xmax - xmin, 1e-12) * (x1 - x0); }
    double py(double y) const { return y1 - y / std::max(ymax, 1e-12) * (y1 - y0); }
    std::string axes(const std::string& xlabel, const std::string& ylabel, const char* xfmt) const {
        std::string s = cat("<rect x=\"", x0, "\" y=\"", y0, "\" width=\"", x1 - x0, "\" height=\"", y1 - y0,
                            "\" fill=\"none\" stroke=\"#444\"/>\n");
        const double ys = tick_step(ymax, 8), xs = tick_step(xmax - xmin, 8);
        for (double y = 0; y <= ymax + 1e-9; y += ys)
            s += cat("<line x1=\"", x0 - 4, "\" x2=\"", x1, "\" y1=\"", py(y), "\" y2=\"", py(y),
                     "\" stroke=\"#ddd\"/><text x=\"", x0 - 6, "\" y=\"", py(y) + 4, "\" text-anchor=\"end\">",
                     fmt("%.0f", y), "</text>\n");
        for (double x = std::ceil(xmin / xs) * xs; x <= xmax + 1e-9; x += xs)
            s += cat("<line x1=\"", px(x), "\" x2=\"", px(x), "\" y1=\"", y1, "\" y2=\"", y1 + 4,
                     "\" stroke=\"#444\"/><text x=\"", px(x), "\" y=\"", y1 + 17, "\" text-anchor=\"middle\">",
                     fmt(xfmt, x), "</text>\n");
        s += cat("<text x=\"", (x0 + x1) / 2, "\" y=\"", y1 + 36, "\" text-anchor=\"middle\">", esc(xlabel), "</text>\n");
        s += cat("<text transform=\"translate(", x0 - 52, ",", (y0 + y1) / 2, ") rotate(-90)\" text-anchor=\"middle\">",
                 esc(ylabel), "</text>\n");
        return s;
    }
};

std::string svg_open(int w, int h, const std::string& title) {
    return cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", w, "\" height=\"", h, "\" viewBox=\"0 0 ", w, " ",
               h, "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
               "<text x=\"70\" y=\"24\" font-size=\"15\" font-weight=\"bold\">", esc(title), "</text>\n");
}

std::string legend_entry(double x, double y, const char* color, const std::string& label, bool line = false) {
    std::string s = line ? cat("<line x1=\"", x, "\" x2=\"", x + 14, "\" y1=\"", y - 4, "\" y2=\"", y - 4, "\" stroke=\"",
                               color, "\" stroke-width=\"2\" stroke-dasharray=\"5,3\"/>")
                         : cat("<rect x=\"", x, "\" y=\"", y - 10, "\" width=\"14\" height=\"10\" fill=\"", color, "\"/>");
    return s + cat("<text x=\"", x + 20, "\" y=\"", y, "\">", esc(label), "</text>\n");
}

// Bytes of every arena but the activations'.
size_t persistent_bytes(const Plan& p) {
    return p.total_bytes() - p.arena_bytes[size_t(Category::activations)];
}

// The plan's node behind each node of a plan of the same input graph with recompute clones:
// clones sit between input-graph nodes, so each node maps to the input node at or after it.
std::vector<size_t> input_index(const Graph& g) {
    std::vector<size_t> idx(g.nodes.size());
    size_t k = 0;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        idx[i] = k;
        if (g.nodes[i].recompute_of < 0) k++;
    }
    return idx;
}

}  // namespace

std::string timeline_svg(const Plan& p, const Plan* without, const std::string& title, int top) {
    const Graph& g = p.graph;
    const size_t N = g.nodes.size();
    GL_CHECK(p.live_bytes.size() == N, "timeline_svg: the plan has no per-node live bytes");
    if (without) {
        size_t originals = 0;
        for (const Node& n : g.nodes) originals += n.recompute_of < 0;
        GL_CHECK(without->recompute_nodes == 0 && without->graph.nodes.size() == originals,
                 "timeline_svg: the comparison plan must plan the same graph without recompute (", originals,
                 " nodes), got ", without->graph.nodes.size(), " nodes with ", without->recompute_nodes, " recomputed");
    }
    const auto live = live_by_kind(p);
    const std::vector<size_t> orig = input_index(g);
    static const Category kFixed[] = {Category::frozen, Category::trainable, Category::optimizer, Category::workspace};
    static const char* kFixedColor[] = {"#9e9e9e", "#7986cb", "#4db6ac", "#a1887f"};
    static const char* kKindColor[] = {"#ffd54f", "#64b5f6", "#e57373", "#81c784"};
    const size_t fixed = persistent_bytes(p);
    double ymax = double(p.total_bytes());
    if (without) ymax = std::max(ymax, double(without->total_bytes()));

    const int W = 1240, H = 540;
    Frame f{70, 860, 50, 470, double(std::max<size_t>(N, 1)), mib(ymax) * 1.05};
    std::string s = svg_open(W, H, title.empty() ? "memory timeline" : title);
    s += f.axes("node (execution order)", "MiB", "%.0f");

    // Columns of at most ~1 px: each shows the node of its range with the most live bytes.
    const size_t cols = std::min<size_t>(N, size_t(f.x1 - f.x0));
    std::vector<size_t> pick(cols);
    for (size_t c = 0; c < cols; c++) {
        const size_t lo = c * N / cols, hi = std::max(lo + 1, (c + 1) * N / cols);
        size_t best = lo;
        for (size_t i = lo; i < hi; i++)
            if (p.live_bytes[i] > p.live_bytes[best]) best = i;
        pick[c] = best;
    }
    auto x_of = [&](size_t c, bool right) { return f.px(double(right ? (c + 1) * N / cols : c * N / cols)); };
    // Persistent arenas: constant bands at the bottom.
    double below = 0;
    for (size_t k = 0; k < 4; k++) {
        const double b = double(p.arena_bytes[size_t(kFixed[k])]);
        if (b <= 0) continue;
        s += cat("<rect x=\"", f.x0, "\" y=\"", f.py(mib(below + b)), "\" width=\"", f.x1 - f.x0, "\" height=\"",
                 f.py(mib(below)) - f.py(mib(below + b)), "\" fill=\"", kFixedColor[k], "\"/>\n");
        below += b;
    }
    // Activations by kind, stacked.
    std::vector<double> base(cols, double(fixed));
    for (int k = 0; k < kLiveKindCount; k++) {
        std::string top_edge, bottom_edge;
        for (size_t c = 0; c < cols; c++) {
            base[c] += double(live[pick[c]][size_t(k)]);
            top_edge += cat(x_of(c, false), ",", f.py(mib(base[c])), " ", x_of(c, true), ",", f.py(mib(base[c])), " ");
        }
        std::vector<double> lower(cols);
        for (size_t c = 0; c < cols; c++) lower[c] = base[c] - double(live[pick[c]][size_t(k)]);
        for (size_t c = cols; c-- > 0;)
            bottom_edge += cat(x_of(c, true), ",", f.py(mib(lower[c])), " ", x_of(c, false), ",", f.py(mib(lower[c])), " ");
        s += cat("<polygon fill=\"", kKindColor[k], "\" points=\"", top_edge, bottom_edge, "\"/>\n");
    }
    // Without recompute: its live activations at the same input-graph nodes; the gap is what recompute removed.
    if (without) {
        std::string line, gap;
        for (size_t c = 0; c < cols; c++) {
            const size_t j = std::min(orig[pick[c]], without->live_bytes.size() - 1);
            const double y = double(persistent_bytes(*without)) + double(without->live_bytes[j]);
            line += cat(x_of(c, false), ",", f.py(mib(y)), " ", x_of(c, true), ",", f.py(mib(y)), " ");
        }
        for (size_t c = cols; c-- > 0;)
            gap += cat(x_of(c, true), ",", f.py(mib(base[c])), " ", x_of(c, false), ",", f.py(mib(base[c])), " ");
        s += cat("<polygon fill=\"#000\" fill-opacity=\"0.08\" points=\"", line, gap, "\"/>\n");
        s += cat("<polyline fill=\"none\" stroke=\"#000\" stroke-width=\"1.2\" stroke-dasharray=\"5,3\" points=\"", line,
                 "\"/>\n");
    }
    // The planned total (arenas, the activation arena at its size) and where the backward pass starts.
    const double total_y = f.py(mib(double(p.total_bytes())));
    s += cat("<line x1=\"", f.x0, "\" x2=\"", f.x1, "\" y1=\"", total_y, "\" y2=\"", total_y,
             "\" stroke=\"#333\" stroke-dasharray=\"2,2\"/><text x=\"", f.x0 + 4, "\" y=\"", total_y - 4,
             "\">planned total ", fmt("%.2f MiB", mib(double(p.total_bytes()))), "</text>\n");
    const int bw = g.backward_begin();
    if (bw > 0 && size_t(bw) < N)
        s += cat("<line x1=\"", f.px(bw), "\" x2=\"", f.px(bw), "\" y1=\"", f.y0, "\" y2=\"", f.y1,
                 "\" stroke=\"#666\" stroke-dasharray=\"1,3\"/><text x=\"", f.px(bw) + 4, "\" y=\"", f.y1 - 6,
                 "\" fill=\"#444\">backward</text>\n");
    double ty = 60;  // the text panel on the right: the report's figures and the peak's values
    auto text = [&](const std::string& t, bool bold = false) {
        s += cat("<text x=\"880\" y=\"", ty, "\"", bold ? " font-weight=\"bold\"" : "", ">", esc(t), "</text>\n");
        ty += 16;
    };
    if (p.peak_node >= 0) {  // the peak, marked
        const double x = f.px(p.peak_node + 0.5), y = f.py(mib(double(fixed + p.peak_live_bytes)));
        s += cat("<line x1=\"", x, "\" x2=\"", x, "\" y1=\"", f.y1, "\" y2=\"", y, "\" stroke=\"#c62828\"/><circle cx=\"", x,
                 "\" cy=\"", y, "\" r=\"4\" fill=\"#c62828\"/>\n");
    }
    text(cat("recompute ", recompute_name(p.options.recompute), ": ", g.nodes.size(), " nodes, ", p.recompute_nodes,
             " recomputed"), true);
    for (Category c : {Category::frozen, Category::trainable, Category::optimizer, Category::activations, Category::workspace})
        text(cat(category_name(c), ": ", fmt("%.2f MiB", mib(double(p.arena_bytes[size_t(c)])))));
    text(cat("total: ", fmt("%.2f MiB", mib(double(p.total_bytes())))), true);
    text(cat("predicted: ", fmt("%.2f ms (recompute %.2f ms)", p.predicted_seconds * 1e3, p.recompute_seconds * 1e3)));
    if (without)
        text(cat("without recompute: ", fmt("%.2f MiB, %.2f ms", mib(double(without->total_bytes())),
                                            without->predicted_seconds * 1e3)));
    ty += 8;
    if (p.peak_node >= 0) {
        const Node& n = g.nodes[size_t(p.peak_node)];
        text(cat("activation peak: ", fmt("%.2f MiB", mib(double(p.peak_live_bytes)))), true);
        text(cat("at node ", p.peak_node, " (", op_name(n.op), ")"));
        int shown = 0;
        for (ValueId v : p.live_at_peak) {
            if (shown++ == top) break;
            std::string name = g.describe(v);
            if (name.size() > 44) name = "..." + name.substr(name.size() - 41);
            text(cat(fmt("%8.2f MiB ", mib(double(g.v(v).bytes()))), name));
        }
    }
    double lx = f.x0;  // the legend, in a row under the plot
    const double ly = H - 14;
    for (size_t k = 0; k < 4; k++)
        if (p.arena_bytes[size_t(kFixed[k])] > 0) {
            s += legend_entry(lx, ly, kFixedColor[k], category_name(kFixed[k]));
            lx += 130;
        }
    for (int k = 0; k < kLiveKindCount; k++) {
        s += legend_entry(lx, ly, kKindColor[k], live_kind_name(LiveKind(k)));
        lx += 130;
    }
    if (without) s += legend_entry(880, ty + 8, "#000", "without recompute (shaded: removed)", true);
    return s + "</svg>\n";
}

std::string frontier_svg(const std::vector<BudgetStep>& steps, const std::vector<FrontierMark>& marks,
                         const std::string& title) {
    GL_CHECK(!steps.empty(), "frontier_svg: no steps");
    // The steps a budget can pick: each lowers the smallest plan so far.
    std::vector<const BudgetStep*> front;
    for (const BudgetStep& st : steps)
        if (front.empty() || st.total_bytes < front.back()->total_bytes) front.push_back(&st);
    double xmin = mib(double(front.back()->total_bytes)), xmax = mib(double(front.front()->total_bytes));
    double ymax = 0;
    for (const BudgetStep* st : front) ymax = std::max(ymax, st->predicted_seconds * 1e3);
    for (const FrontierMark& m : marks) {
        xmin = std::min(xmin, mib(double(m.total_bytes)));
        xmax = std::max(xmax, mib(double(m.total_bytes)));
        ymax = std::max(ymax, m.predicted_seconds * 1e3);
    }
    const double pad = std::max(xmax - xmin, 1.0) * 0.05;
    Frame f{70, 860, 50, 470, xmax + pad, ymax * 1.1, std::max(0.0, xmin - pad)};
    std::string s = svg_open(1100, 530, title.empty() ? "recompute frontier" : title);
    s += f.axes("planned total (MiB)", "predicted step time (ms)", "%.0f");
    // A budget between two steps gets the larger step: a staircase from the right.
    std::string pts;
    for (size_t k = 0; k < front.size(); k++) {
        const double x = f.px(mib(double(front[k]->total_bytes))), y = f.py(front[k]->predicted_seconds * 1e3);
        if (k > 0) pts += cat(x, ",", f.py(front[k - 1]->predicted_seconds * 1e3), " ");
        pts += cat(x, ",", y, " ");
    }
    s += cat("<polyline fill=\"none\" stroke=\"#1565c0\" stroke-width=\"2\" points=\"", pts, "\"/>\n");
    for (const BudgetStep* st : front)
        s += cat("<circle cx=\"", f.px(mib(double(st->total_bytes))), "\" cy=\"", f.py(st->predicted_seconds * 1e3),
                 "\" r=\"2.5\" fill=\"#1565c0\"/>\n");
    for (const FrontierMark& m : marks) {
        const double x = f.px(mib(double(m.total_bytes))), y = f.py(m.predicted_seconds * 1e3);
        s += cat("<rect x=\"", x - 4, "\" y=\"", y - 4, "\" width=\"8\" height=\"8\" fill=\"#ef6c00\"/><text x=\"", x + 7,
                 "\" y=\"", y - 6, "\">", esc(m.label),
                 fmt(" (%.0f MiB, %.1f ms)", mib(double(m.total_bytes)), m.predicted_seconds * 1e3), "</text>\n");
    }
    double ty = 60;
    auto text = [&](const std::string& t) {
        s += cat("<text x=\"875\" y=\"", ty, "\">", esc(t), "</text>\n");
        ty += 16;
    };
    text("recompute budget:");
    text(fmt("none: %.0f MiB, %.1f ms", mib(double(front.front()->total_bytes)), front.front()->predicted_seconds * 1e3));
    text(fmt("least: %.0f MiB, %.1f ms", mib(double(front.back()->total_bytes)), front.back()->predicted_seconds * 1e3));
    text(cat(steps.size(), " steps, ", front.size(), " on the frontier"));
    return s + "</svg>\n";
}

}  // namespace gl
