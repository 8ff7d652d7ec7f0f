// Auto-fit over caller-built configurations, and byte sizes as users write them.
#include "ggml-lite/core/autofit.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/recompute_budget.h"

namespace gl {

size_t parse_bytes(const std::string& text) {
    const char* s = text.c_str();
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s, &end);
    GL_CHECK(end != s && errno == 0 && std::isfinite(v) && v >= 0 && !std::isspace(static_cast<unsigned char>(*s)),
             "bytes: '", text, "' is not a size (say 8G, 7.5GiB, 512M or a number of bytes)");
    std::string unit(end);
    for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
    double scale = 0;
    for (const auto& [names, factor] : {std::pair<std::vector<const char*>, double>{{"", "b"}, 1.0},
                                        {{"k", "kb", "kib"}, 1024.0},
                                        {{"m", "mb", "mib"}, 1024.0 * 1024},
                                        {{"g", "gb", "gib"}, 1024.0 * 1024 * 1024},
                                        {{"t", "tb", "tib"}, 1024.0 * 1024 * 1024 * 1024}})
        for (const char* n : names)
            if (unit == n) scale = factor;
    GL_CHECK(scale > 0, "bytes: '", text, "' has an unknown unit '", std::string(end),
             "' (K, M, G or T, 1024-based, optionally followed by B or iB)");
    const double bytes = std::round(v * scale);
    GL_CHECK(bytes < 9.0e18, "bytes: '", text, "' is too large");
    return size_t(bytes);
}

std::string format_bytes(size_t b) {
    char buf[48];
    const double x = double(b);
    if (x >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", x / (1024.0 * 1024 * 1024));
    else if (x >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", x / (1024.0 * 1024));
    else if (x >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", x / 1024.0);
    else std::snprintf(buf, sizeof buf, "%zu B", b);
    return buf;
}

namespace {

size_t runtime_bytes(const FitSettings& st, const Graph& g) { return st.runtime_bytes ? st.runtime_bytes(g) : 0; }

FitBuild build(const FitOption& o, size_t shape) {
    try {
        return o.build(shape);
    } catch (const Error& e) {
        fail("auto-fit: building '", o.label, "' (shape ", shape, ") failed: ", e.what());
    }
}

double weighted(const std::vector<double>& per_shape, const std::vector<FitShape>& shapes) {
    double s = 0, w = 0;
    for (size_t k = 0; k < shapes.size(); k++) {
        s += shapes[k].weight * per_shape[k];
        w += shapes[k].weight;
    }
    return s / w;
}

}  // namespace

FitResult auto_fit(const std::vector<FitOption>& options, const FitSettings& st) {
    GL_CHECK(st.limit > 0, "auto-fit: the memory limit is 0");
    GL_CHECK(!options.empty(), "auto-fit: no configurations to choose from");
    GL_CHECK(!st.shapes.empty(), "auto-fit: no shapes");
    for (const FitShape& s : st.shapes)
        GL_CHECK(s.weight > 0 && std::isfinite(s.weight), "auto-fit: shape '", s.label, "' has weight ", s.weight);
    for (const FitOption& o : options) {
        GL_CHECK(o.build, "auto-fit: '", o.label, "' has no builder");
        GL_CHECK(o.runs > 0, "auto-fit: '", o.label, "' runs its graph ", o.runs, " times per update");
    }
    PlanOptions none = st.plan;
    none.recompute = Recompute::none;
    const size_t S = st.shapes.size();

    // Without recompute: every option, every shape.
    FitResult R;
    R.limit = st.limit;
    std::vector<double> none_seconds(options.size());
    std::vector<bool> hopeless(options.size(), false);  // its persistent arenas alone do not fit
    for (size_t i = 0; i < options.size(); i++) {
        FitRow row;
        row.label = options[i].label;
        row.option = i;
        row.fits = true;
        std::vector<double> secs(S), rec(S, 0.0);
        for (size_t k = 0; k < S; k++) {
            FitBuild b = build(options[i], k);
            const Plan p = make_plan(b.graph, none);
            const size_t beside = b.extra_bytes + runtime_bytes(st, p.graph);
            const size_t total = p.total_bytes() + beside;
            const size_t fixed = total - p.arena_bytes[size_t(Category::activations)];
            row.budgets.push_back(st.limit > beside ? st.limit - beside : 0);
            row.peak_bytes = std::max(row.peak_bytes, total);
            row.fits = row.fits && total <= st.limit;
            if (fixed > st.limit) {
                hopeless[i] = true;
                row.least_bytes = std::max(row.least_bytes, fixed);
            }
            secs[k] = options[i].runs * (p.predicted_seconds + b.extra_seconds);
        }
        row.seconds = none_seconds[i] = weighted(secs, st.shapes);
        if (hopeless[i]) row.note = cat("the arenas other than activations alone need ", format_bytes(row.least_bytes));
        R.rows.push_back(std::move(row));
    }

    // With recompute, fastest-without-recompute first: an option can only get slower with it.
    double best = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < options.size(); i++)
        if (R.rows[i].fits) best = std::min(best, none_seconds[i]);
    std::vector<size_t> order(options.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return none_seconds[a] < none_seconds[b]; });
    PlanOptions budget = st.plan;
    budget.recompute = Recompute::budget;
    for (size_t i : order) {
        FitRow& row = R.rows[i];
        if (row.fits || hopeless[i]) continue;
        if (none_seconds[i] >= best) {
            row.planned = false;
            row.note = "not planned with recompute: no faster than the choice even without";
            continue;
        }
        std::vector<double> secs(S), rec(S);
        size_t peak = 0, least = 0;
        bool fits = true;
        for (size_t k = 0; k < S && fits; k++) {
            FitBuild b = build(options[i], k);
            RecomputeSearch search(b.graph, budget);
            if (row.budgets[k] == 0) {
                fits = false;
                least = b.extra_bytes + runtime_bytes(st, search.plan(search.min_bytes()).graph) + search.min_bytes();
                break;
            }
            try {
                // Recompute adds nodes, so the runtime's bytes grow as the budget shrinks: lower the
                // budget by the excess until plan and runtime fit (a few rounds; monotone).
                for (int round = 0;; round++) {
                    const Plan p = search.plan(row.budgets[k]);
                    const size_t total = p.total_bytes() + b.extra_bytes + runtime_bytes(st, p.graph);
                    if (total > st.limit) {
                        const size_t excess = total - st.limit;
                        GL_CHECK(round < 8 && row.budgets[k] > excess, "auto-fit: no budget fits beside the runtime");
                        row.budgets[k] -= excess;
                        continue;
                    }
                    peak = std::max(peak, total);
                    secs[k] = options[i].runs * (p.predicted_seconds + b.extra_seconds);
                    rec[k] = options[i].runs * p.recompute_seconds;
                    break;
                }
            } catch (const Error&) {
                fits = false;
                least = b.extra_bytes + runtime_bytes(st, search.plan(search.min_bytes()).graph) + search.min_bytes();
            }
        }
        if (!fits) {
            row.least_bytes = least;
            row.note = cat("needs at least ", format_bytes(least), " with recompute");
            continue;
        }
        row.fits = true;
        row.recompute = Recompute::budget;
        row.peak_bytes = peak;
        row.seconds = weighted(secs, st.shapes);
        row.recompute_seconds = weighted(rec, st.shapes);
        best = std::min(best, row.seconds);
    }
    std::stable_sort(R.rows.begin(), R.rows.end(), [](const FitRow& a, const FitRow& b) {
        if (a.fits != b.fits) return a.fits;
        return a.fits ? a.seconds < b.seconds : false;
    });
    return R;
}

std::string FitResult::table() const {
    std::string s = cat("auto-fit within ", format_bytes(limit), " (", limit, " bytes): ",
                        chosen() ? cat("chose '", chosen()->label, "'") : std::string("nothing fits"), "\n");
    char line[256];
    std::snprintf(line, sizeof line, "  %-2s %-44s %-9s %12s %14s %12s  %s\n", "", "configuration", "recompute",
                  "planned", "predicted", "recompute", "note");
    s += line;
    for (const FitRow& r : rows) {
        std::string label = r.label.size() > 44 ? r.label.substr(0, 41) + "..." : r.label;
        std::snprintf(line, sizeof line, "  %-2s %-44s %-9s %12s %11.2f ms %9.2f ms  %s\n", &r == chosen() ? "*" : "",
                      label.c_str(), r.fits ? recompute_name(r.recompute) : "-", format_bytes(r.peak_bytes).c_str(),
                      r.seconds * 1e3, r.recompute_seconds * 1e3,
                      r.fits ? "" : r.note.empty() ? "does not fit without recompute" : r.note.c_str());
        s += line;
    }
    return s;
}

}  // namespace gl
