// The budget search: a budget-independent sequence of growing recompute sets (see the header),
// and the choice of one prefix of it for a budget.
#include "ggml-lite/core/recompute_budget.h"

#include <algorithm>
#include <cstdio>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/fusion.h"

namespace gl {

namespace {

// A step adds candidates until they take this share of the plan off the peak (estimated).
constexpr double kStepShare = 0.01;
// At most this many candidates per step: a budget tries each prefix of its step's choices.
constexpr size_t kMovesPerStep = 16;
// A step whose choices raise the plan is retried without the culprit this many times at most.
constexpr size_t kAttemptsPerStep = 16;
// A candidate that needs more nodes than this to recompute is not considered.
constexpr size_t kMaxChain = 64;
// The sequence ends after this many steps at the latest (planning time stays bounded).
constexpr size_t kMaxSteps = 600;

double mib(size_t b) { return double(b) / (1024.0 * 1024.0); }

bool eligible(const Graph& g, const Node& n) {
    const uint32_t f = op_def(n.op).flags;
    if (n.backward || (f & (kOpView | kOpMutates)) || n.out.empty()) return false;
    bool droppable = false;
    for (ValueId y : n.out) {
        const Value& v = g.v(y);
        if (v.category != Category::activations) return false;
        droppable = droppable || (v.base == y && !v.output);
    }
    return droppable;
}

BudgetStep figures(const Plan& p, int set_size) {
    BudgetStep s;
    s.total_bytes = p.total_bytes();
    s.peak_live_bytes = p.peak_live_bytes;
    s.predicted_seconds = p.predicted_seconds;
    s.recompute_seconds = p.recompute_seconds;
    s.recompute_nodes = p.recompute_nodes;
    s.set_size = set_size;
    return s;
}

struct Candidate {
    int key = 0;             // its seed: a node index, or -1 - segment index
    std::vector<int> nodes;  // the forward nodes to add, ascending
    size_t bytes = 0;        // estimated bytes off the peak
    double seconds = 0;      // predicted recompute time added
};

// What one step looks at: the plan of the current set, read against the input graph.
class StepView {
public:
    StepView(const Graph& g, const Plan& p, const std::vector<bool>& set, const std::vector<bool>& ok,
             const std::vector<double>& seconds)
        : g_(g), p_(p), set_(set), ok_(ok), seconds_(seconds), in_(g.nodes.size(), false) {
        const Graph& r = p.graph;
        const size_t V = size_t(g.value_count());
        last_fw_.assign(V, -1);
        first_bw_.assign(V, -1);
        for (size_t i = 0; i < r.nodes.size(); i++)
            for (ValueId x : r.nodes[i].in) {
                const ValueId b = r.v(x).base;
                if (size_t(b) >= V) continue;  // a clone's storage
                if (!r.nodes[i].backward) last_fw_[size_t(b)] = int(i);
                else if (first_bw_[size_t(b)] < 0) first_bw_[size_t(b)] = int(i);
            }
    }

    // Storage alive at the peak only because a later backward node reads it.
    bool saved_across_peak(ValueId v) const {
        const Value& x = g_.v(v);
        const int peak = p_.peak_node;
        return x.base == v && x.category == Category::activations && !x.output && x.producer >= 0 &&
               p_.first[size_t(v)] <= peak && p_.last[size_t(v)] >= peak && last_fw_[size_t(v)] < peak &&
               first_bw_[size_t(v)] > peak;
    }
    bool alive_at_peak(ValueId b) const {
        return p_.first[size_t(b)] <= p_.peak_node && p_.last[size_t(b)] >= p_.peak_node;
    }

    // The seed nodes plus the producers of their inputs that are neither alive at the peak nor
    // recomputed already, transitively; false when that needs an ineligible node or too many.
    bool close(std::vector<int> seed, Candidate& c) {
        c = Candidate{};
        for (int n : seed) in_[size_t(n)] = true;
        bool ok = true;
        for (size_t k = 0; k < seed.size() && ok; k++) {
            for (ValueId x : g_.nodes[size_t(seed[k])].in) {
                const ValueId b = g_.v(x).base;
                const Value& bv = g_.v(b);
                if (bv.producer < 0 || bv.category != Category::activations || bv.output) continue;
                const int p = bv.producer;
                if (set_[size_t(p)] || in_[size_t(p)] || alive_at_peak(b)) continue;
                if (!ok_[size_t(p)] || seed.size() == kMaxChain) {
                    ok = false;
                    break;
                }
                in_[size_t(p)] = true;
                seed.push_back(p);
            }
        }
        for (int n : seed) in_[size_t(n)] = false;
        if (!ok) return false;
        std::sort(seed.begin(), seed.end());
        for (int n : seed) {
            if (!set_[size_t(n)]) c.seconds += seconds_[size_t(n)];
            for (ValueId y : g_.nodes[size_t(n)].out)
                if (saved_across_peak(y)) c.bytes += g_.v(y).bytes();
        }
        c.nodes = std::move(seed);
        return c.bytes > 0;
    }

private:
    const Graph& g_;
    const Plan& p_;
    const std::vector<bool>& set_;
    const std::vector<bool>& ok_;
    const std::vector<double>& seconds_;
    std::vector<bool> in_;  // scratch of close()
    std::vector<int> last_fw_, first_bw_;  // per input-graph value, node indices of the plan's graph
};

}  // namespace

RecomputeSearch::RecomputeSearch(const Graph& input, const PlanOptions& opt) : opt_(opt) {
    for (const Node& n : input.nodes)
        GL_CHECK(n.recompute_of < 0, "recompute budget: graph already holds recompute clones (plan the input graph)");
    FusionStats fused;
    g_ = opt.fusion ? fuse_epilogues(input, &fused, opt.pairs) : input;
    fused_adds_ = fused.adds;
    joined_pairs_ = fused.pairs;
    const Graph& g = g_;
    opt_.recompute = Recompute::none;
    opt_.budget = 0;
    const size_t N = g.nodes.size();
    eligible_.resize(N);
    seconds_.resize(N);
    for (size_t i = 0; i < N; i++) {
        eligible_[i] = eligible(g, g.nodes[i]);
        seconds_[i] = opt_.cost.node_seconds(g, g.nodes[i]);
    }
    // A segment's inner nodes: those whose storage no forward node outside the segment reads.
    std::vector<bool> outside(size_t(g.value_count()), false);
    for (const Node& n : g.nodes)
        if (!n.backward)
            for (ValueId x : n.in) {
                const ValueId b = g.v(x).base;
                const int p = g.v(b).producer;
                if (p < 0 || g.nodes[size_t(p)].segment != n.segment) outside[size_t(b)] = true;
            }
    inner_.resize(g.segment_names.size());
    for (size_t i = 0; i < N; i++) {
        const Node& n = g.nodes[i];
        bool in = n.segment >= 0 && eligible_[i];
        for (ValueId y : n.out) in = in && !outside[size_t(y)];
        if (in) inner_[size_t(n.segment)].push_back(int(i));
    }
    last_ = plan_set(std::vector<bool>(g.nodes.size(), false));
    moves_.emplace_back();
    steps_.push_back(figures(last_, 0));
}

Plan RecomputeSearch::plan_set(const std::vector<bool>& set) const {
    int added = 0;
    Graph r = rewrite_recompute_set(g_, set, &added);
    Plan p = plan_rewritten(std::move(r), opt_, added);
    p.fused_adds = fused_adds_;
    p.joined_pairs = joined_pairs_;
    return p;
}

std::vector<bool> RecomputeSearch::set_after(size_t step, size_t moves) const {
    std::vector<bool> set(g_.nodes.size(), false);
    for (size_t k = 1; k <= step; k++) {
        const size_t m = k == step ? moves : moves_[k].size();
        for (size_t j = 0; j < m; j++)
            for (int n : moves_[k][j]) set[size_t(n)] = true;
    }
    return set;
}

bool RecomputeSearch::advance() {
    if (ended_) return false;
    const size_t N = g_.nodes.size();
    if (last_.peak_node < 0 || steps_.size() >= kMaxSteps) {
        ended_ = true;
        return false;
    }
    const std::vector<bool> set = set_after(steps_.size() - 1, moves_.back().size());
    StepView view(g_, last_, set, eligible_, seconds_);

    // Seeds: every node with storage saved across the peak, and every segment's inner nodes
    // (those whose storage no forward node outside the segment reads).
    std::vector<Candidate> cands;
    Candidate c;
    for (size_t i = 0; i < N; i++) {
        if (!eligible_[i] || set[i] || rejected_.count(int(i))) continue;
        bool seed = false;
        for (ValueId y : g_.nodes[i].out) seed = seed || view.saved_across_peak(y);
        if (seed && view.close({int(i)}, c)) {
            c.key = int(i);
            cands.push_back(std::move(c));
        }
    }
    for (size_t s = 0; s < inner_.size(); s++) {
        std::vector<int> seed;
        for (int n : inner_[s])
            if (!set[size_t(n)]) seed.push_back(n);
        if (!seed.empty() && !rejected_.count(-1 - int(s)) && view.close(std::move(seed), c)) {
            c.key = -1 - int(s);
            cands.push_back(std::move(c));
        }
    }
    // Least predicted seconds per byte first; ties by key, for determinism.
    std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
        const double x = a.seconds * double(b.bytes), y = b.seconds * double(a.bytes);
        return x != y ? x < y : a.key < b.key;
    });

    const size_t want = size_t(kStepShare * double(last_.total_bytes()));
    for (size_t attempt = 0; attempt < kAttemptsPerStep; attempt++) {
        std::vector<std::vector<int>> moves;
        std::vector<int> keys;
        std::vector<bool> taken(N, false);
        size_t freed = 0;
        for (const Candidate& k : cands) {
            if (freed >= want || moves.size() == kMovesPerStep) break;
            bool skip = rejected_.count(k.key) > 0;
            for (int n : k.nodes) skip = skip || taken[size_t(n)];
            if (skip) continue;
            std::vector<int> add;
            for (int n : k.nodes) {
                taken[size_t(n)] = true;
                if (!set[size_t(n)]) add.push_back(n);
            }
            moves.push_back(std::move(add));
            keys.push_back(k.key);
            freed += k.bytes;
        }
        if (moves.empty()) break;
        // The whole step, else the longest prefix (by bisection) whose plan is no larger than the
        // current one; the move after it is not offered again. So step totals never grow.
        auto with = [&](size_t m) {
            std::vector<bool> next = set;
            for (size_t j = 0; j < m; j++)
                for (int n : moves[j]) next[size_t(n)] = true;
            return next;
        };
        Plan p = plan_set(with(moves.size()));
        size_t ok = moves.size();
        if (p.total_bytes() > last_.total_bytes()) {
            size_t lo = 0, hi = moves.size();
            Plan best;
            while (hi - lo > 1) {
                const size_t mid = (lo + hi) / 2;
                Plan q = plan_set(with(mid));
                if (q.total_bytes() <= last_.total_bytes()) {
                    lo = mid;
                    best = std::move(q);
                } else {
                    hi = mid;
                }
            }
            rejected_.insert(keys[lo]);
            if (lo == 0) continue;
            ok = lo;
            p = std::move(best);
        }
        moves.resize(ok);
        int size = 0;
        for (bool b : with(ok)) size += b;
        last_ = std::move(p);
        moves_.push_back(std::move(moves));
        steps_.push_back(figures(last_, size));
        return true;
    }
    ended_ = true;
    return false;
}

const std::vector<BudgetStep>& RecomputeSearch::frontier() {
    while (advance()) {
    }
    return steps_;
}

size_t RecomputeSearch::min_bytes() {
    size_t m = SIZE_MAX;
    for (const BudgetStep& s : frontier()) m = std::min(m, s.total_bytes);
    return m;
}

Plan RecomputeSearch::plan(size_t budget, std::vector<bool>* set) {
    size_t k = 0;
    for (;; k++) {
        if (k == steps_.size() && !advance()) {
            const size_t least = min_bytes();
            fail("recompute budget: no plan fits ", budget, " bytes (", mib(budget), " MiB); the least recompute "
                 "search reaches ", least, " bytes (", mib(least), " MiB), recompute none needs ", mib(steps_[0].total_bytes),
                 " MiB");
        }
        if (steps_[k].total_bytes <= budget) break;
    }
    // The shortest prefix of step k's choices that fits (the whole step does).
    Plan p;
    std::vector<bool> chosen;
    for (size_t j = k == 0 ? 0 : 1; j <= moves_[k].size(); j++) {
        const auto known = prefix_bytes_.find({k, j});
        if (known != prefix_bytes_.end() && known->second > budget) continue;
        chosen = set_after(k, j);
        p = plan_set(chosen);
        prefix_bytes_[{k, j}] = p.total_bytes();
        if (p.total_bytes() <= budget) break;
    }
    GL_CHECK(p.total_bytes() <= budget, "recompute budget: internal error, step ", k, " no longer fits");
    if (set) *set = std::move(chosen);
    p.options.recompute = Recompute::budget;
    p.options.budget = budget;
    return p;
}

std::string RecomputeSearch::frontier_table() {
    const std::vector<BudgetStep>& f = frontier();
    const size_t least = min_bytes();
    const double base = f[0].predicted_seconds;
    std::string s = cat("recompute frontier (", f.size(), " steps; the steps that lower the smallest plan so far, "
                        "which are the ones a budget can pick)\n");
    char line[200];
    std::snprintf(line, sizeof line, "  %5s %12s %12s %12s %8s %12s %7s\n", "step", "planned MiB", "peak MiB", "predicted",
                  "x none", "recompute", "clones");
    s += line;
    size_t best = SIZE_MAX;
    for (size_t k = 0; k < f.size(); k++) {
        if (f[k].total_bytes >= best) continue;
        best = f[k].total_bytes;
        std::snprintf(line, sizeof line, "  %5zu %12.1f %12.1f %9.2f ms %8.3f %9.2f ms %7d%s\n", k, mib(f[k].total_bytes),
                      mib(f[k].peak_live_bytes), f[k].predicted_seconds * 1e3,
                      base > 0 ? f[k].predicted_seconds / base : 0.0, f[k].recompute_seconds * 1e3, f[k].recompute_nodes,
                      f[k].total_bytes == least ? "  (smallest)" : "");
        s += line;
    }
    return s;
}

Plan plan_within_budget(const Graph& g, const PlanOptions& opt) {
    GL_CHECK(opt.budget > 0, "recompute budget: PlanOptions::budget is 0 (set the bytes the plan may take)");
    return RecomputeSearch(g, opt).plan(opt.budget);
}

}  // namespace gl
