// Liveness, in-place reuse, best-fit offsets and the memory report.
#include "ggml-lite/core/planner.h"

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <map>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/fusion.h"
#include "ggml-lite/core/recompute_budget.h"

namespace gl {

const char* recompute_name(Recompute r) {
    switch (r) {
        case Recompute::blocks: return "blocks";
        case Recompute::cheap: return "cheap";
        case Recompute::budget: return "budget";
        default: return "none";
    }
}

Recompute parse_recompute(const std::string& s) {
    if (s == "none") return Recompute::none;
    if (s == "blocks") return Recompute::blocks;
    if (s == "cheap") return Recompute::cheap;
    if (s == "budget") return Recompute::budget;
    fail("unknown recompute policy '", s, "' (expected none, blocks, cheap or budget)");
}

// Arena offsets and sizes stay below 2^63 (offsets are int64); a graph whose bytes add up to more
// is refused, naming the category, instead of wrapping into a small arena.
static size_t arena_add(size_t a, size_t b, const char* category) {
    GL_CHECK(a <= size_t(INT64_MAX) && b <= size_t(INT64_MAX) - a, "plan: the ", category,
             " arena would exceed 2^63 bytes (", a, " + ", b, ")");
    return a + b;
}
static size_t align_up(size_t x, size_t a, const char* category) { return arena_add(x, a - 1, category) / a * a; }

namespace {

// Free-list allocator over one arena: best fit, coalescing, grows at the top.
class BestFit {
public:
    explicit BestFit(size_t align) : align_(align) {}
    size_t alloc(size_t bytes) {
        size_t need = align_up(std::max<size_t>(bytes, 1), align_, kName);
        auto best = free_.end();
        for (auto it = free_.begin(); it != free_.end(); ++it)
            if (it->second >= need && (best == free_.end() || it->second < best->second)) best = it;
        if (best != free_.end()) {
            size_t off = best->first, size = best->second;
            free_.erase(best);
            if (size > need) free_[off + need] = size - need;
            return off;
        }
        // Grow: extend a free block that ends at the top, else append.
        size_t off = top_;
        if (!free_.empty()) {
            auto last = std::prev(free_.end());
            if (last->first + last->second == top_) {
                off = last->first;
                free_.erase(last);
            }
        }
        top_ = arena_add(off, need, kName);
        return off;
    }
    void release(size_t off, size_t bytes) {
        size_t size = align_up(std::max<size_t>(bytes, 1), align_, kName);
        auto it = free_.emplace(off, size).first;
        auto next = std::next(it);
        if (next != free_.end() && it->first + it->second == next->first) {
            it->second += next->second;
            free_.erase(next);
        }
        if (it != free_.begin()) {
            auto prev = std::prev(it);
            if (prev->first + prev->second == it->first) {
                prev->second += it->second;
                free_.erase(it);
            }
        }
    }
    size_t top() const { return top_; }

private:
    static constexpr const char* kName = "activations";
    size_t align_;
    size_t top_ = 0;
    std::map<size_t, size_t> free_;  // offset -> size
};

bool is_owner(const Graph& g, ValueId v) { return g.v(v).base == v; }

// The input whose bytes output 0 may take when that input dies at the node: input 0 of in-place
// ops, the residual of an epilogue op (its kernels read r[i] before writing out[i]); -1 for none.
int inplace_source(const OpDef& def, const Node& n) {
    if (n.in.empty()) return -1;
    if (def.flags & kOpInplace) return 0;
    return def.residual_input ? def.residual_input(n) : -1;
}

}  // namespace

Plan make_plan(const Graph& input, const PlanOptions& opt) {
    if (opt.recompute == Recompute::budget) return plan_within_budget(input, opt);
    FusionStats fused;
    Graph g = opt.fusion ? fuse_epilogues(input, &fused, opt.pairs) : input;
    int added = 0;
    if (opt.recompute != Recompute::none) g = rewrite_for_recompute(g, opt.recompute, &added);
    Plan P = plan_rewritten(std::move(g), opt, added);
    P.fused_adds = fused.adds;
    P.joined_pairs = fused.pairs;
    return P;
}

Plan plan_rewritten(Graph rewritten, const PlanOptions& opt, int recompute_nodes) {
    GL_CHECK(opt.alignment > 0 && (opt.alignment & (opt.alignment - 1)) == 0, "plan: alignment must be a power of two");
    Plan P;
    P.options = opt;
    P.graph = std::move(rewritten);
    P.recompute_nodes = recompute_nodes;
    const Graph& g = P.graph;
    const int N = int(g.nodes.size());
    const size_t V = size_t(g.value_count());
    P.offset.assign(V, -1);
    P.first.assign(V, -1);
    P.last.assign(V, -1);
    P.inplace_of.assign(V, kNoValue);

    // Liveness of storage owners: readers of a view keep its base alive. Leaves live to the
    // end: they are bound once and a runtime may run the plan again without binding them anew.
    for (ValueId v = 0; v < ValueId(V); v++) {
        const Value& x = g.v(v);
        if (!is_owner(g, v)) continue;
        P.first[size_t(v)] = x.producer;
        P.last[size_t(v)] = x.producer;  // a value nobody reads still needs bytes while written
        if (x.output || x.producer < 0 || x.category != Category::activations) P.last[size_t(v)] = N;
    }
    for (int i = 0; i < N; i++)
        for (ValueId x : g.nodes[size_t(i)].in) {
            ValueId b = g.v(x).base;
            P.last[size_t(b)] = std::max(P.last[size_t(b)], i);
        }
    for (int i = 0; i < N; i++) {
        const Node& n = g.nodes[size_t(i)];
        const double s = opt.cost.node_seconds(g, n);
        P.predicted_seconds += s;
        if (n.recompute_of < 0) continue;
        OpCall c{n.op, g, n.in, n.p};
        P.recompute_flops += op_def(n.op).cost(c).flops;
        P.recompute_seconds += s;
    }

    // Persistent categories: laid out once, in value order.
    for (ValueId v = 0; v < ValueId(V); v++) {
        const Value& x = g.v(v);
        if (!is_owner(g, v) || x.category == Category::activations) continue;
        size_t& top = P.arena_bytes[size_t(x.category)];
        P.offset[size_t(v)] = int64_t(top);
        top = align_up(arena_add(top, x.bytes(), category_name(x.category)), opt.alignment, category_name(x.category));
    }

    // Activations: simulate the node list with a best-fit free list.
    BestFit arena(opt.alignment);
    size_t live = 0;
    auto is_act = [&](ValueId v) { return is_owner(g, v) && g.v(v).category == Category::activations; };
    for (ValueId v = 0; v < ValueId(V); v++)
        if (is_act(v) && g.v(v).producer < 0) {
            P.offset[size_t(v)] = int64_t(arena.alloc(g.v(v).bytes()));
            live += g.v(v).bytes();
        }
    P.peak_live_bytes = live;  // a graph without nodes still holds its bound inputs
    std::vector<bool> handed_over(V, false);
    P.live_bytes.reserve(size_t(N));
    for (int i = 0; i < N; i++) {
        const Node& n = g.nodes[size_t(i)];
        const OpDef& def = op_def(n.op);
        for (size_t k = 0; k < n.out.size(); k++) {
            ValueId y = n.out[k];
            if (!is_act(y)) continue;
            const Value& yv = g.v(y);
            const int src = k == 0 ? inplace_source(def, n) : -1;
            if (src >= 0) {
                ValueId x = n.in[size_t(src)];
                const Value& xv = g.v(x);
                bool ok = is_act(x) && xv.role == Role::computed && !xv.output && P.last[size_t(x)] == i &&
                          !handed_over[size_t(x)] && xv.bytes() == yv.bytes() && xv.dtype == yv.dtype &&
                          xv.layout.is_contiguous() && yv.layout.is_contiguous();
                // Another view of x's bytes would be overwritten while read; an elementwise op may
                // read x itself twice, a product reads its operands long before its epilogue.
                const bool elementwise = src == 0 && (def.flags & kOpInplace);
                for (size_t j = 0; ok && j < n.in.size(); j++)
                    if (int(j) != src) ok = !(g.v(n.in[j]).base == x && (n.in[j] != x || !elementwise));
                if (ok) {
                    P.offset[size_t(y)] = P.offset[size_t(x)];
                    P.inplace_of[size_t(y)] = x;
                    handed_over[size_t(x)] = true;
                    live += yv.bytes();
                    live -= xv.bytes();
                    continue;
                }
            }
            P.offset[size_t(y)] = int64_t(arena.alloc(yv.bytes()));
            live += yv.bytes();
        }
        P.live_bytes.push_back(live);
        if (live > P.peak_live_bytes || P.peak_node < 0) {
            P.peak_live_bytes = live;
            P.peak_node = i;
        }
        // Free what dies here (inputs read last here, outputs nobody reads).
        auto release = [&](ValueId b) {
            if (!is_act(b) || P.last[size_t(b)] != i || handed_over[size_t(b)] || P.offset[size_t(b)] < 0) return;
            handed_over[size_t(b)] = true;  // released exactly once
            arena.release(size_t(P.offset[size_t(b)]), g.v(b).bytes());
            live -= g.v(b).bytes();
        };
        for (ValueId x : n.in) release(g.v(x).base);
        for (ValueId y : n.out) release(y);
    }
    P.arena_bytes[size_t(Category::activations)] = arena.top();

    if (P.peak_node >= 0) {
        for (ValueId v = 0; v < ValueId(V); v++) {
            if (!is_act(v) || P.first[size_t(v)] > P.peak_node || P.last[size_t(v)] < P.peak_node) continue;
            ValueId y = kNoValue;  // skip an input handed over in-place at the peak node
            for (ValueId o : g.nodes[size_t(P.peak_node)].out)
                if (P.inplace_of[size_t(o)] == v) y = o;
            if (y == kNoValue) P.live_at_peak.push_back(v);
        }
        std::stable_sort(P.live_at_peak.begin(), P.live_at_peak.end(),
                         [&](ValueId a, ValueId b) { return g.v(a).bytes() > g.v(b).bytes(); });
    }
    return P;
}

size_t Plan::total_bytes() const {
    size_t t = 0;
    for (size_t b : arena_bytes) t = arena_add(t, b, "combined");
    return t;
}

static std::string fmt_mib(size_t b) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%10.2f MiB", double(b) / (1024.0 * 1024.0));
    return buf;
}

std::string Plan::report(int top) const {
    char budget[48] = "";
    if (options.recompute == Recompute::budget)
        std::snprintf(budget, sizeof budget, " <= %.1f MiB", double(options.budget) / (1024.0 * 1024.0));
    std::string s = cat("memory plan (recompute ", recompute_name(options.recompute), budget, ", ", graph.nodes.size(),
                        " nodes, ", recompute_nodes, " recomputed)\n");
    s += options.fusion ? cat("  fused: ", fused_adds, " adds into epilogues, ", joined_pairs, " products joined",
                              options.pairs ? "" : " (pairs off)", "\n")
                        : std::string("  fusion off\n");
    for (int c = 0; c < kCategoryCount; c++) {
        char line[128];
        std::snprintf(line, sizeof line, "  %-20s %s\n", category_name(Category(c)), fmt_mib(arena_bytes[size_t(c)]).c_str());
        s += line;
    }
    char line[160];
    std::snprintf(line, sizeof line, "  %-20s %s\n", "total", fmt_mib(total_bytes()).c_str());
    s += line;
    std::snprintf(line, sizeof line, "  %-20s %10.2f ms predicted (recompute %.2f ms)\n", "time", predicted_seconds * 1e3,
                  recompute_seconds * 1e3);
    s += line;
    if (peak_node >= 0) {
        const Node& n = graph.nodes[size_t(peak_node)];
        s += cat("  activation peak      ", fmt_mib(peak_live_bytes), " live at node ", peak_node, " (", op_name(n.op),
                 " -> ", graph.v(n.out[0]).name, ")\n");
        int shown = 0;
        for (ValueId v : live_at_peak) {
            if (shown++ == top) break;
            std::snprintf(line, sizeof line, "    %s  %s\n", fmt_mib(graph.v(v).bytes()).c_str(), graph.describe(v).c_str());
            s += line;
        }
    }
    return s;
}

std::string check_overlaps(const Plan& P) {
    const Graph& g = P.graph;
    struct Item {
        ValueId v;
        int cat;
        size_t lo, hi;
    };
    GL_CHECK(P.offset.size() == size_t(g.value_count()) && P.first.size() == P.offset.size() &&
                 P.last.size() == P.offset.size() && P.inplace_of.size() == P.offset.size(),
             "check_overlaps: plan tables do not match its graph");
    std::vector<Item> items;
    for (ValueId v = 0; v < g.value_count(); v++) {
        const Value& x = g.v(v);
        if (x.base != v) continue;
        if (P.offset[size_t(v)] < 0) return cat(category_name(x.category), ": ", g.describe(v), " has no offset");
        size_t lo = size_t(P.offset[size_t(v)]), hi = lo + x.bytes();
        if (hi > P.arena_bytes[size_t(x.category)])
            return cat(category_name(x.category), ": ", g.describe(v), " [", lo, ", ", hi, ") ends past the arena (",
                       P.arena_bytes[size_t(x.category)], " bytes)");
        if (x.bytes() == 0) continue;
        items.push_back({v, int(x.category), lo, hi});
    }
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
        return a.cat != b.cat ? a.cat < b.cat : a.lo < b.lo;
    });
    auto lives_overlap = [&](ValueId a, ValueId b) {
        int fa = P.first[size_t(a)], la = P.last[size_t(a)], fb = P.first[size_t(b)], lb = P.last[size_t(b)];
        if (fa > lb || fb > la) return false;
        // An in-place hand-over: b written over a at the node where a is read for the last time.
        if (P.inplace_of[size_t(b)] == a && la == fb) return false;
        if (P.inplace_of[size_t(a)] == b && lb == fa) return false;
        return true;
    };
    for (size_t i = 0; i < items.size(); i++) {
        for (size_t j = i + 1; j < items.size() && items[j].cat == items[i].cat && items[j].lo < items[i].hi; j++) {
            if (items[i].cat != int(Category::activations) || lives_overlap(items[i].v, items[j].v))
                return cat(category_name(Category(items[i].cat)), ": ", g.describe(items[i].v), " [", items[i].lo, ", ",
                           items[i].hi, ") live ", P.first[size_t(items[i].v)], "..", P.last[size_t(items[i].v)],
                           " overlaps ", g.describe(items[j].v), " [", items[j].lo, ", ", items[j].hi, ") live ",
                           P.first[size_t(items[j].v)], "..", P.last[size_t(items[j].v)]);
        }
    }
    return "";
}

}  // namespace gl
