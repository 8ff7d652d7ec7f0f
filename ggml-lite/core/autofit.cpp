// Auto-fit over caller-built configurations, and byte sizes as users write them.
#include "ggml-lite/core/autofit.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/fusion.h"
#include "ggml-lite/core/parallel.h"
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

constexpr size_t kAct = size_t(Category::activations);

FitBuild build_option(const FitOption& o) {
    FitBuild b;
    try {
        b = o.build();
    } catch (const Error& e) {
        fail("auto-fit: building '", o.label, "' failed: ", e.what());
    }
    GL_CHECK(!b.graphs.empty(), "auto-fit: '", o.label, "' built no graphs");
    for (size_t i = 0; i < b.graphs.size(); i++) {
        const FitGraph& f = b.graphs[i];
        GL_CHECK(f.graph != nullptr, "auto-fit: '", o.label, "' built a null graph (", i, ")");
        GL_CHECK(!f.planned || (&f.planned->graph == f.graph && !f.recompute), "auto-fit: '", o.label, "': graph ", i,
                 " is planned by its owner, so it is its plan's graph and is not recomputed");
        GL_CHECK(f.runs >= 0 && std::isfinite(f.runs), "auto-fit: '", o.label, "' runs graph ", i, " ", f.runs, " times");
        GL_CHECK(f.like < int(i) && (f.like < 0 || b.graphs[size_t(f.like)].recompute), "auto-fit: '", o.label,
                 "': graph ", i, " is like graph ", f.like, " (an earlier recomputable graph)");
    }
    return b;
}

// One configuration's graphs as planned, laid out on one memory.
struct Planned {
    std::vector<Plan> plans;
    SharedLayout layout;
    size_t total = 0;  // layout and extra bytes
    double seconds = 0, recompute_seconds = 0;
};

void lay_out(const FitBuild& b, const FitSettings& st, Planned& p) {
    std::vector<const Plan*> ptrs;
    for (const Plan& q : p.plans) ptrs.push_back(&q);
    p.layout = make_shared_layout(ptrs, st.rules);
    p.total = p.layout.total_bytes() + b.extra_bytes;
    p.seconds = b.extra_seconds;
    p.recompute_seconds = 0;
    for (size_t i = 0; i < p.plans.size(); i++) {
        p.seconds += b.graphs[i].runs * p.plans[i].predicted_seconds;
        p.recompute_seconds += b.graphs[i].runs * p.plans[i].recompute_seconds;
    }
}

Planned plan_none(const FitBuild& b, const FitSettings& st) {
    PlanOptions none = st.plan;
    none.recompute = Recompute::none;
    Planned p;
    p.plans.resize(b.graphs.size());
    parallel_for(int64_t(b.graphs.size()), 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            const FitGraph& f = b.graphs[size_t(i)];
            p.plans[size_t(i)] = f.planned ? *f.planned : make_plan(*f.graph, none);
        }
    });
    lay_out(b, st, p);
    return p;
}

// A graph's predicted time without recompute as its plan predicts it: fused when the plans fuse.
double seconds_as_planned(const Graph& g, const PlanOptions& o) {
    return o.cost.graph_seconds(o.fusion ? fuse_epilogues(g, nullptr, o.pairs) : g);
}

// Everything but the activation arena: what no recompute can lower (graph executables grow with it).
size_t beside_activations(const Planned& p) { return p.total - p.layout.arena_bytes[kAct]; }

// Plans the recomputable graphs of b (planned without recompute in p) with the least recompute
// that lets the whole layout fit st.limit: each gets the budget of its other arenas plus the room
// left for the activation arena, and when the executables of the clones push the layout over, the
// room shrinks by the excess and the graphs over it are planned again (each search is monotone, so
// the rounds only add recompute). On success p holds the fitted plans; else *least and *note say
// what the run needs at least.
bool plan_recompute(const FitBuild& b, const FitSettings& st, Planned& p, size_t* least, std::string* note) {
    const size_t n = b.graphs.size();
    std::vector<size_t> fixed(n);  // per graph: its plan's bytes other than activations
    size_t fixed_act = 0;          // the largest activation arena of graphs that cannot recompute
    for (size_t i = 0; i < n; i++) {
        fixed[i] = p.plans[i].total_bytes() - p.plans[i].arena_bytes[kAct];
        if (!b.graphs[i].recompute) fixed_act = std::max(fixed_act, p.plans[i].arena_bytes[kAct]);
    }
    std::vector<std::unique_ptr<RecomputeSearch>> search(n);
    std::vector<std::vector<bool>> sets(n);
    std::vector<std::string> failed(n);
    PlanOptions budget = st.plan;
    budget.recompute = Recompute::budget;
    size_t room = 0;
    auto replan = [&](size_t i) {
        const Graph& g = *b.graphs[i].graph;
        const size_t want = fixed[i] + room;
        const int like = b.graphs[i].like;
        if (like >= 0 && !sets[size_t(like)].empty()) {
            try {  // the set of the same nodes at a larger batch (sets index the fused graphs)
                FusionStats fused;
                const Graph f = st.plan.fusion ? fuse_epilogues(g, &fused, st.plan.pairs) : g;
                GL_CHECK(sets[size_t(like)].size() == f.nodes.size(), "auto-fit: graph ", i, " has other nodes than graph ", like);
                int added = 0;
                Graph r = rewrite_recompute_set(f, sets[size_t(like)], &added);
                Plan q = plan_rewritten(std::move(r), st.plan, added);
                q.fused_adds = fused.adds;
                q.joined_pairs = fused.pairs;
                if (q.total_bytes() <= want) {
                    q.options.recompute = Recompute::budget;
                    q.options.budget = want;
                    p.plans[i] = std::move(q);
                    sets[i] = sets[size_t(like)];
                    return;
                }
            } catch (const Error&) {
            }
        }
        if (!search[i]) search[i] = std::make_unique<RecomputeSearch>(g, budget);
        try {
            p.plans[i] = search[i]->plan(want, &sets[i]);
        } catch (const Error&) {
            failed[i] = cat(b.graphs[i].label.empty() ? cat("graph ", i) : b.graphs[i].label, " needs at least ",
                            format_bytes(search[i]->min_bytes() - fixed[i]), " of activations with recompute");
        }
    };
    for (int round = 0; round < 16; round++) {
        const size_t beside = beside_activations(p);
        const size_t bound = beside + std::max(fixed_act, size_t(1));
        if (bound > st.limit) {
            *least = bound;
            *note = cat("the run needs ", format_bytes(beside), " beside its activations",
                        fixed_act ? cat(", and its graphs that cannot recompute ", format_bytes(fixed_act), " of them")
                                  : std::string());
            return false;
        }
        room = st.limit - beside;
        // First the graphs whose own search decides, then those that borrow a set.
        for (bool borrowing : {false, true}) {
            std::vector<size_t> todo;
            for (size_t i = 0; i < n; i++)
                if (b.graphs[i].recompute && (b.graphs[i].like >= 0) == borrowing &&
                    p.plans[i].arena_bytes[kAct] > room)
                    todo.push_back(i);
            parallel_for(int64_t(todo.size()), 1, [&](int64_t lo, int64_t hi) {
                for (int64_t k = lo; k < hi; k++) replan(todo[size_t(k)]);
            });
            for (size_t i : todo)
                if (!failed[i].empty()) {
                    *least = beside + (search[i]->min_bytes() - fixed[i]);
                    *note = failed[i];
                    return false;
                }
        }
        lay_out(b, st, p);
        if (p.total <= st.limit) return true;
        // The clones' executables (or a scratch) grew past the limit: shrink the room by the excess.
        GL_CHECK(p.layout.arena_bytes[kAct] <= room, "auto-fit: internal error, an activation arena above its room");
    }
    *least = p.total;
    *note = "no recompute budget fits beside the graph executables it adds";
    return false;
}

}  // namespace

FitResult auto_fit(const std::vector<FitOption>& options, const FitSettings& st) {
    GL_CHECK(st.limit > 0, "auto-fit: the memory limit is 0");
    GL_CHECK(!options.empty(), "auto-fit: no configurations to choose from");
    for (const FitOption& o : options) GL_CHECK(o.build, "auto-fit: '", o.label, "' has no builder");

    struct Best {
        size_t option = SIZE_MAX;
        double seconds = std::numeric_limits<double>::infinity();
        FitBuild build;
        Planned planned;
    } best;
    auto consider = [&](size_t i, FitBuild& b, Planned& p) {
        if (p.seconds >= best.seconds) return;
        best.option = i;
        best.seconds = p.seconds;
        best.build = std::move(b);
        best.planned = std::move(p);
    };

    // First every option's time without recompute, from its graphs alone (the cost model needs no
    // plan): an option can only get slower with recompute, so options are planned fastest first,
    // and once one fits, the slower ones are not planned at all (unless st.plan_all).
    FitResult R;
    R.limit = st.limit;
    std::vector<double> none_seconds(options.size());
    size_t kept_option = SIZE_MAX;  // the fastest so far keeps its build: it is planned first
    FitBuild kept;
    for (size_t i = 0; i < options.size(); i++) {
        FitRow row;
        row.label = options[i].label;
        row.needs = options[i].needs;
        row.option = i;
        FitBuild b = build_option(options[i]);
        double t = b.extra_seconds;
        for (const FitGraph& f : b.graphs)
            t += f.runs * (f.planned ? f.planned->predicted_seconds : seconds_as_planned(*f.graph, st.plan));
        row.seconds = none_seconds[i] = t;
        if (kept_option == SIZE_MAX || t < none_seconds[kept_option]) {
            kept_option = i;
            kept = std::move(b);
        }
        R.rows.push_back(std::move(row));
    }
    std::vector<size_t> order(options.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return none_seconds[a] < none_seconds[b]; });
    for (size_t i : order) {
        FitRow& row = R.rows[i];
        if (none_seconds[i] >= best.seconds && !st.plan_all) {
            row.planned = false;
            row.note = "not planned: no faster than the choice even without recompute";
            continue;
        }
        FitBuild b = i == kept_option ? std::move(kept) : build_option(options[i]);
        Planned p = plan_none(b, st);
        row.peak_bytes = p.total;
        if (p.total <= st.limit) {
            row.fits = true;
            consider(i, b, p);
            continue;
        }
        const size_t beside = beside_activations(p);
        if (beside >= st.limit) {
            row.least_bytes = beside;
            row.note = cat("everything but the activations alone needs ", format_bytes(beside));
            continue;
        }
        if (none_seconds[i] >= best.seconds) {
            row.note = "not planned with recompute: no faster than the choice even without";
            continue;
        }
        if (!plan_recompute(b, st, p, &row.least_bytes, &row.note)) continue;
        row.fits = true;
        row.recompute = std::any_of(p.plans.begin(), p.plans.end(), [](const Plan& q) { return q.recompute_nodes > 0; })
                            ? Recompute::budget
                            : Recompute::none;
        row.peak_bytes = p.total;
        row.seconds = p.seconds;
        row.recompute_seconds = p.recompute_seconds;
        consider(i, b, p);
    }
    std::stable_sort(R.rows.begin(), R.rows.end(), [](const FitRow& a, const FitRow& b) {
        if (a.fits != b.fits) return a.fits;
        return a.fits ? a.seconds < b.seconds : false;
    });
    if (best.option != SIZE_MAX) {
        // The row kept (the first of equally fast ones planned) leads.
        const auto kept = std::find_if(R.rows.begin(), R.rows.end(), [&](const FitRow& r) { return r.option == best.option; });
        std::rotate(R.rows.begin(), kept, kept + 1);
        R.choice.build = std::move(best.build);
        R.choice.plans = std::move(best.planned.plans);
        R.choice.layout = std::move(best.planned.layout);
    }
    return R;
}

std::string FitResult::table(bool advice) const {
    std::string s = advice ? cat("what would fit within ", format_bytes(limit), " (", limit, " bytes)",
                                 chosen() ? "" : ": nothing", "\n")
                           : cat("auto-fit within ", format_bytes(limit), " (", limit, " bytes): ",
                                 chosen() ? cat("chose '", chosen()->label, "'") : std::string("nothing fits"), "\n");
    char line[320];
    std::snprintf(line, sizeof line, "  %-2s %-56s %-9s %12s %14s %12s  %s\n", "", "configuration", "recompute",
                  "planned", "predicted", "recompute", "note");
    s += line;
    for (const FitRow& r : rows) {
        std::string label = r.label.size() > 56 ? r.label.substr(0, 53) + "..." : r.label;
        std::string note = r.fits ? "" : r.note.empty() ? "does not fit without recompute" : r.note;
        if (!r.needs.empty()) note = note.empty() ? "needs " + r.needs : "needs " + r.needs + "; " + note;
        const char* mark = advice ? (r.fits ? "+" : "") : (&r == chosen() ? "*" : "");
        std::snprintf(line, sizeof line, "  %-2s %-56s %-9s %12s %11.2f ms %9.2f ms  %s\n", mark, label.c_str(),
                      r.fits ? recompute_name(r.recompute) : "-",
                      r.peak_bytes ? format_bytes(r.peak_bytes).c_str() : "-", r.seconds * 1e3,
                      r.recompute_seconds * 1e3, note.c_str());
        s += line;
    }
    return s;
}

}  // namespace gl
