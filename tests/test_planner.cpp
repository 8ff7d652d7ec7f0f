// The memory planner: no two live values share bytes, the reported peak is the true peak,
// the arena is close to the best packing on small graphs, and the runtime allocates what
// the plan says.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "planner_nets.h"

using namespace gl;
using namespace gltest;

namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool is_act_owner(const Graph& g, ValueId v) { return g.v(v).base == v && g.v(v).category == Category::activations; }

// Live range of every storage owner computed from the node list alone: from its producer
// (-1 for leaves) to its last reader (a view's reader reads its base); to the end for
// leaves, outputs and persistent categories.
void brute_liveness(const Graph& g, std::vector<int>& first, std::vector<int>& last) {
    const int N = int(g.nodes.size());
    first.assign(size_t(g.value_count()), -1);
    last.assign(size_t(g.value_count()), -1);
    for (ValueId v = 0; v < g.value_count(); v++) {
        const Value& x = g.v(v);
        if (x.base != v) continue;
        first[size_t(v)] = last[size_t(v)] = x.producer;
        if (x.producer < 0 || x.output || x.category != Category::activations) last[size_t(v)] = N;
    }
    for (int i = 0; i < N; i++)
        for (ValueId x : g.nodes[size_t(i)].in) last[size_t(g.v(x).base)] = std::max(last[size_t(g.v(x).base)], i);
}

// The largest sum over nodes of the activation bytes live at that node, an in-place pair
// counted once. With `align`, sizes are rounded up (a lower bound on any arena).
size_t brute_peak(const Plan& P, size_t align = 1) {
    const Graph& g = P.graph;
    std::vector<int> first, last;
    brute_liveness(g, first, last);
    auto bytes = [&](ValueId v) { return align_up(std::max<size_t>(g.v(v).bytes(), align > 1 ? 1 : 0), align); };
    size_t peak = 0;
    for (ValueId v = 0; v < g.value_count(); v++)
        if (is_act_owner(g, v) && first[size_t(v)] < 0) peak += bytes(v);
    for (int i = 0; i < int(g.nodes.size()); i++) {
        size_t live = 0;
        for (ValueId v = 0; v < g.value_count(); v++)
            if (is_act_owner(g, v) && first[size_t(v)] <= i && last[size_t(v)] >= i) live += bytes(v);
        for (ValueId y : g.nodes[size_t(i)].out)
            if (P.inplace_of[size_t(y)] != kNoValue) live -= bytes(P.inplace_of[size_t(y)]);
        peak = std::max(peak, live);
    }
    return peak;
}

// Everything a plan promises, checked independently of the planner's own bookkeeping.
void check_plan(const Plan& P) {
    const Graph& g = P.graph;
    REQUIRE(check_topology(g) == "");
    REQUIRE(check_overlaps(P) == "");
    std::vector<int> first, last;
    brute_liveness(g, first, last);
    for (ValueId v = 0; v < g.value_count(); v++) {
        const Value& x = g.v(v);
        const size_t arena = P.arena_bytes[size_t(x.category)];
        if (x.base == v) {
            CHECK(P.first[size_t(v)] == first[size_t(v)]);
            CHECK(P.last[size_t(v)] == last[size_t(v)]);
            REQUIRE(P.offset[size_t(v)] >= 0);
            CHECK(size_t(P.offset[size_t(v)]) % P.options.alignment == 0);
            CHECK(size_t(P.offset[size_t(v)]) + x.bytes() <= arena);
        } else {
            // A view's elements lie inside its base's bytes.
            CHECK(P.offset[size_t(v)] == -1);
            CHECK(x.category == g.v(x.base).category);
            CHECK(size_t(x.layout.span()) * dtype_size(x.dtype) <= g.v(x.base).bytes());
        }
        ValueId src = P.inplace_of[size_t(v)];
        if (src != kNoValue) {
            // In place only over a computed input of the producer that dies there: input 0 of an
            // in-place op, or the residual of a product (a fused add).
            const Node& n = g.nodes[size_t(x.producer)];
            const OpDef& def = op_def(n.op);
            CHECK(n.out[0] == v);
            if (def.flags & kOpInplace) {
                CHECK(n.in[0] == src);
            } else {
                REQUIRE(bool(def.residual_input));
                REQUIRE(def.residual_input(n) >= 0);
                CHECK(n.in[size_t(def.residual_input(n))] == src);
                for (size_t j = 0; j < n.in.size(); j++)  // a product's other operands never share its bytes
                    if (int(j) != def.residual_input(n)) CHECK(g.v(n.in[j]).base != src);
            }
            CHECK(last[size_t(src)] == x.producer);
            CHECK(g.v(src).role == Role::computed);
            CHECK(g.v(src).bytes() == x.bytes());
            CHECK(P.offset[size_t(src)] == P.offset[size_t(v)]);
        }
    }
    CHECK(P.peak_live_bytes == brute_peak(P));
    CHECK(P.arena_bytes[size_t(Category::activations)] >= brute_peak(P, P.options.alignment));
}

// The smallest arena found by placing storage owners, in every order, each at the lowest
// offset free of the owners already placed whose lives overlap it (in-place pairs may share).
size_t best_packing(const Plan& P) {
    const Graph& g = P.graph;
    std::vector<ValueId> vs;
    for (ValueId v = 0; v < g.value_count(); v++)
        if (is_act_owner(g, v) && g.v(v).bytes() > 0) vs.push_back(v);
    auto size = [&](ValueId v) { return align_up(g.v(v).bytes(), P.options.alignment); };
    auto clash = [&](ValueId a, ValueId b) {
        if (P.first[size_t(a)] > P.last[size_t(b)] || P.first[size_t(b)] > P.last[size_t(a)]) return false;
        return P.inplace_of[size_t(a)] != b && P.inplace_of[size_t(b)] != a;
    };
    std::sort(vs.begin(), vs.end());
    size_t best = SIZE_MAX;
    do {
        std::vector<std::pair<size_t, size_t>> placed(vs.size());
        size_t top = 0;
        for (size_t i = 0; i < vs.size(); i++) {
            size_t off = 0;
            for (bool moved = true; moved;) {
                moved = false;
                for (size_t j = 0; j < i; j++)
                    if (clash(vs[i], vs[j]) && off < placed[j].second && placed[j].first < off + size(vs[i])) {
                        off = placed[j].second;
                        moved = true;
                    }
            }
            placed[i] = {off, off + size(vs[i])};
            top = std::max(top, placed[i].second);
        }
        best = std::min(best, top);
    } while (std::next_permutation(vs.begin(), vs.end()));
    return vs.empty() ? 0 : best;
}

}  // namespace

TEST_CASE("planner: random graphs plan without overlaps, with the true peak") {
    const size_t aligns[] = {1, 16, 256};
    int with_inplace = 0, with_clones = 0, with_fused = 0, over_residual = 0;
    for (uint32_t seed = 0; seed < 300; seed++) {
        Net net = random_net(seed, 4 + int(seed % 37), seed % 2 == 0, seed % 3 != 2);
        for (Recompute rc : {Recompute::none, Recompute::blocks, Recompute::cheap}) {
            CAPTURE(seed);
            CAPTURE(recompute_name(rc));
            Plan P = make_plan(net.g, {rc, aligns[seed % 3]});
            check_plan(P);
            with_clones += P.recompute_nodes > 0;
            with_fused += P.fused_adds > 0;
            for (ValueId v = 0; v < P.graph.value_count(); v++) {
                if (P.inplace_of[size_t(v)] == kNoValue) continue;
                with_inplace++;
                over_residual += !(op_def(P.graph.nodes[size_t(P.graph.v(v).producer)].op).flags & kOpInplace);
            }
        }
    }
    // The generator must exercise the interesting paths.
    MESSAGE("random plans: ", with_inplace, " in place (", over_residual, " over a residual), ", with_clones,
            " with clones, ", with_fused, " with fused adds");
    CHECK(with_inplace > 50);
    CHECK(with_fused > 20);
    CHECK(over_residual > 5);
    CHECK(with_clones > 12);
}

TEST_CASE("planner: a corrupted plan is caught by the overlap checker") {
    Net net = random_net(7, 30, true, false);
    Plan P = make_plan(net.g);
    REQUIRE(check_overlaps(P) == "");
    const Graph& g = P.graph;
    // Two activation owners alive at the same node, not an in-place pair.
    ValueId a = kNoValue, b = kNoValue;
    for (ValueId x = 0; x < g.value_count() && b == kNoValue; x++)
        for (ValueId y = x + 1; y < g.value_count() && b == kNoValue; y++)
            if (is_act_owner(g, x) && is_act_owner(g, y) && g.v(x).bytes() && g.v(y).bytes() && P.first[size_t(x)] <= P.last[size_t(y)] &&
                P.first[size_t(y)] <= P.last[size_t(x)] && P.inplace_of[size_t(x)] != y && P.inplace_of[size_t(y)] != x) {
                a = x;
                b = y;
            }
    REQUIRE(b != kNoValue);
    Plan bad = P;
    bad.offset[size_t(b)] = bad.offset[size_t(a)];
    CHECK(check_overlaps(bad) != "");
    bad = P;  // partially overlapping by a few bytes
    bad.offset[size_t(b)] = bad.offset[size_t(a)] + int64_t(g.v(a).bytes()) - 4;
    bad.arena_bytes[size_t(Category::activations)] += g.v(b).bytes();
    CHECK(check_overlaps(bad) != "");
    bad = P;  // past the end of the arena
    bad.offset[size_t(a)] = int64_t(bad.arena_bytes[size_t(Category::activations)]);
    CHECK(check_overlaps(bad).find("past the arena") != std::string::npos);
    bad = P;  // persistent categories never share bytes
    ValueId p0 = net.params.at(0), g0 = net.grads[p0];
    REQUIRE(g0 != kNoValue);
    bad.offset[size_t(g0)] = bad.offset[size_t(p0)];
    CHECK(check_overlaps(bad) != "");
}

TEST_CASE("planner: on tiny graphs the arena is near the best packing") {
    int checked = 0;
    double worst = 1.0;
    for (uint32_t seed = 1000; seed < 1300 && checked < 60; seed++) {
        Net net = random_net(seed, 3 + int(seed % 4), false, false);
        Plan P = make_plan(net.g, {Recompute::none, 64});
        int owners = 0;
        for (ValueId v = 0; v < P.graph.value_count(); v++) owners += is_act_owner(P.graph, v) && P.graph.v(v).bytes() > 0;
        if (owners > 7 || owners < 3) continue;
        checked++;
        size_t arena = P.arena_bytes[size_t(Category::activations)];
        size_t best = best_packing(P);
        CAPTURE(seed);
        CHECK(arena >= brute_peak(P, 64));
        CHECK(arena <= best * 3 / 2);
        worst = std::max(worst, double(arena) / double(best));
    }
    CHECK(checked >= 30);
    MESSAGE("worst arena / best packing over ", checked, " tiny graphs: ", worst);
}

TEST_CASE("planner: the CPU runtime allocates what the plan says") {
    for (uint32_t seed = 200; seed < 240; seed++) {
        Net net = random_net(seed, 20, true, true);
        Plan P = make_plan(net.g, {Recompute::blocks, 32});
        auto rt = make_cpu_runtime(P);
        for (int c = 0; c < kCategoryCount; c++) CHECK(rt->allocated_bytes(Category(c)) == P.arena_bytes[size_t(c)]);
        size_t params = 0;
        for (ValueId p : net.params) params += align_up(net.g.v(p).bytes(), 32);
        size_t grads = 0;
        for (ValueId p : net.params)
            if (net.grads[p] != kNoValue) grads += align_up(net.g.v(net.grads[p]).bytes(), 32);
        CHECK(P.arena_bytes[size_t(Category::trainable)] == params + grads);
    }
}

TEST_CASE("planner: leaves stay bound, so a plan runs twice with the same result") {
    // x is read only by the first node; its bytes must not be handed to later values.
    Net net;
    Graph& g = net.g;
    ValueId x = net.leaf(Role::input, "x", {64});
    ValueId h = scale(g, x, 0.5f);
    for (int i = 0; i < 4; i++) h = contiguous(g, silu(g, h), true);
    net.loss = sum(g, h);
    g.mark_output(net.loss);
    Plan P = make_plan(g);
    CHECK(P.last[size_t(x)] == int(g.nodes.size()));
    auto rt = make_cpu_runtime(P);
    rt->poison(0xff);
    for (auto& [v, d] : net.data) rt->write_f32(v, d);
    rt->run();
    std::vector<float> first = rt->read_f32(net.loss);
    rt->run();
    CHECK(rt->read_f32(net.loss) == first);
    CHECK(rt->read_f32(x) == net.data[0].second);
}

TEST_CASE("planner: report names the categories and the peak") {
    Net net = random_net(3, 25, true, true);
    Plan P = make_plan(net.g, {Recompute::blocks, 256});
    std::string r = P.report(3);
    for (int c = 0; c < kCategoryCount; c++) CHECK(r.find(category_name(Category(c))) != std::string::npos);
    CHECK(r.find("activation peak") != std::string::npos);
    CHECK(r.find("recompute blocks") != std::string::npos);
    REQUIRE(!P.live_at_peak.empty());
    for (size_t i = 1; i < P.live_at_peak.size(); i++)
        CHECK(P.graph.v(P.live_at_peak[i - 1]).bytes() >= P.graph.v(P.live_at_peak[i]).bytes());
    size_t sum = 0;
    for (ValueId v : P.live_at_peak) sum += P.graph.v(v).bytes();
    CHECK(sum == P.peak_live_bytes);
}

TEST_CASE("planner: bad options and policy names are errors") {
    Graph g;
    ValueId x = g.input("x", DType::f32, {4});
    g.mark_output(scale(g, x, 2.0f));
    CHECK_THROWS_AS(make_plan(g, {Recompute::none, 24}), gl::Error);
    CHECK_THROWS_AS(make_plan(g, {Recompute::none, 0}), gl::Error);
    CHECK(parse_recompute("none") == Recompute::none);
    CHECK(parse_recompute("blocks") == Recompute::blocks);
    CHECK_THROWS_AS(parse_recompute("fast"), gl::Error);
    CHECK_THROWS_AS(parse_recompute(""), gl::Error);
    CHECK_THROWS_AS(parse_recompute("Blocks"), gl::Error);
}
