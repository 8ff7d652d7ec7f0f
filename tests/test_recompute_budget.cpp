// Budget-driven recompute: the set rewrite (clones on demand, chains in order), the search
// (every plan within its budget, monotone in the budget, infeasible budgets refused with the
// least that fits) and its effect (bitwise-identical results on the CPU backend), on random graphs,
// the tiny training step and the full-size SD1.5 step (planned only).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/recompute_budget.h"
#include "ggml-lite/ops/builder.h"
#include "planner_nets.h"
#include "ggml-lite/io/safetensors.h"
#include "train/trainer.h"
#include "plan_train.h"
#include "train_fixtures.h"

using namespace gl;
using namespace gltest;

namespace {

// The input-graph nodes a plan recomputes (clone -> the node it repeats, in input numbering).
std::vector<bool> cloned_nodes(const Plan& p, size_t input_nodes) {
    std::vector<int> to_input(p.graph.nodes.size(), -1);
    std::vector<bool> cloned(input_nodes, false);
    int k = 0;
    for (size_t i = 0; i < p.graph.nodes.size(); i++) {
        const Node& n = p.graph.nodes[i];
        if (n.recompute_of < 0) {
            to_input[i] = k++;
            continue;
        }
        REQUIRE(to_input[size_t(n.recompute_of)] >= 0);
        cloned[size_t(to_input[size_t(n.recompute_of)])] = true;
    }
    REQUIRE(size_t(k) == input_nodes);
    return cloned;
}

bool subset(const std::vector<bool>& a, const std::vector<bool>& b) {
    for (size_t i = 0; i < a.size(); i++)
        if (a[i] && !b[i]) return false;
    return true;
}

void check_same(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); k++) {
        CAPTURE(k);
        REQUIRE(a[k].size() == b[k].size());
        CHECK(std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) == 0);
    }
}

// Budgets from the least reachable plan to recompute none's, ascending; each plan fits its budget,
// is a valid plan, and recomputes no node (of the searched, fused graph) that a smaller budget's
// plan does not.
std::vector<Plan> sweep(RecomputeSearch& search, int points, size_t alignment) {
    const size_t lo = search.min_bytes(), hi = search.frontier()[0].total_bytes;
    std::vector<Plan> plans;
    std::vector<bool> prev;
    double prev_seconds = 1e300;
    for (int k = 0; k < points; k++) {
        const size_t budget = lo + (hi - lo) * size_t(k) / size_t(points - 1);
        CAPTURE(budget);
        Plan p = search.plan(budget);
        CHECK(p.total_bytes() <= budget);
        CHECK(p.options.recompute == Recompute::budget);
        CHECK(p.options.alignment == alignment);
        CHECK(check_overlaps(p) == "");
        REQUIRE(check_topology(p.graph) == "");
        std::vector<bool> cloned = cloned_nodes(p, search.graph().nodes.size());
        if (!prev.empty()) CHECK(subset(cloned, prev));  // a larger budget never recomputes more
        CHECK(p.recompute_seconds <= prev_seconds);
        prev_seconds = p.recompute_seconds;
        prev = std::move(cloned);
        plans.push_back(std::move(p));
    }
    CHECK(plans.back().recompute_nodes == 0);  // recompute none's total fits: nothing recomputed
    return plans;
}

}  // namespace

TEST_CASE("recompute set: clones made once, on demand, chains in order") {
    Net net;
    Graph& g = net.g;
    ValueId x = net.leaf(Role::input, "x", {4, 8});
    ValueId w = net.leaf(Role::param, "w", {8, 8});
    ValueId a = silu(g, x);  // a -> b -> c: the backward reads b and a view of a
    ValueId b = scale(g, a, 0.5f);
    ValueId c = linear(g, b, w);
    ValueId d = mul(g, c, reshape(g, reshape(g, a, {8, 4}), {4, 8}));  // a view of a, read by mul's backward
    net.differentiate({d});
    std::vector<bool> set(g.nodes.size(), false);
    for (ValueId v : {a, b, c}) set[size_t(g.v(v).producer)] = true;
    int added = 0;
    Graph r = rewrite_recompute_set(g, set, &added);
    REQUIRE(check_topology(r) == "");
    // The weight gradient reads b (a chain: silu, then scale), mul's gradient reads the view of a
    // (silu's clone, then the two reshapes); nothing reads c, so the linear is not repeated.
    std::vector<Op> ops;
    for (const Node& n : r.nodes)
        if (n.recompute_of >= 0) ops.push_back(n.op);
    CHECK(ops == std::vector<Op>{Op::silu, Op::reshape, Op::reshape, Op::scale});
    CHECK(added == 4);  // silu, scale, linear and the two reshapes of a's clone
    std::vector<int> seen(g.nodes.size(), 0);
    for (size_t i = 0; i < r.nodes.size(); i++) {
        const Node& n = r.nodes[i];
        if (n.recompute_of < 0) {
            if (!n.backward) continue;
            for (ValueId v : n.in) CHECK((v != a && v != b && v != c));  // the backward reads clones only
            continue;
        }
        CHECK(n.backward);
        CHECK(n.segment == -1);
        CHECK(r.nodes[size_t(n.recompute_of)].op == n.op);
        seen[size_t(n.recompute_of)]++;
        bool read_later = false;  // each clone is made for a reader after it
        for (size_t j = i + 1; j < r.nodes.size() && !read_later; j++)
            for (ValueId v : r.nodes[j].in) read_later = read_later || r.v(v).base == r.v(n.out[0]).base;
        CHECK(read_later);
    }
    for (int s : seen) CHECK(s <= 1);
    Plan none = make_plan(g, {Recompute::none, 64});
    Plan set_plan = plan_rewritten(r, {Recompute::none, 64}, added);
    CHECK(check_overlaps(set_plan) == "");
    check_same(run_net(net, none), run_net(net, set_plan));
}

TEST_CASE("recompute set: bad sets are refused") {
    Net net;
    Graph& g = net.g;
    ValueId x = net.leaf(Role::param, "x", {3, 4});
    ValueId v = reshape(g, silu(g, x), {4, 3});
    net.differentiate({mul(g, v, v)});  // mul's gradient reads silu's output (through the view)
    std::vector<bool> set(g.nodes.size(), false);
    CHECK_THROWS_AS(rewrite_recompute_set(g, std::vector<bool>(2, false)), gl::Error);
    set[size_t(g.v(v).producer)] = true;  // a view
    CHECK_THROWS_AS(rewrite_recompute_set(g, set), gl::Error);
    set.assign(g.nodes.size(), false);
    set.back() = true;  // a backward node
    CHECK_THROWS_AS(rewrite_recompute_set(g, set), gl::Error);
    set.assign(g.nodes.size(), false);
    int added = 0;
    Graph r = rewrite_recompute_set(g, set, &added);
    CHECK(added == 0);
    CHECK(r.nodes.size() == g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); i++) set[i] = g.nodes[i].op == Op::silu && !g.nodes[i].backward;
    Graph cloned = rewrite_recompute_set(g, set, &added);
    REQUIRE(added == 2);  // silu and the view of it
    CHECK_THROWS_AS(rewrite_recompute_set(cloned, std::vector<bool>(cloned.nodes.size(), false)), gl::Error);
    CHECK_THROWS_AS(RecomputeSearch(cloned, {}), gl::Error);
    CHECK_THROWS_AS(make_plan(g, {Recompute::budget}), gl::Error);  // no budget given
    CHECK(parse_recompute("budget") == Recompute::budget);
    CHECK(std::string(recompute_name(Recompute::budget)) == "budget");
}

TEST_CASE("recompute budget: random graphs fit every budget, monotone, bitwise identical") {
    int with_range = 0;
    for (uint32_t seed = 700; seed < 760; seed++) {
        CAPTURE(seed);
        Net net = random_net(seed, 14 + int(seed % 24), true, seed % 2 == 0);
        RecomputeSearch search(net.g, {Recompute::none, 64});
        const std::vector<Plan> plans = sweep(search, 5, 64);
        with_range += plans.front().total_bytes() < plans.back().total_bytes();
        const std::vector<std::vector<float>> ref = run_net(net, make_plan(net.g, {Recompute::none, 64}));
        check_same(ref, run_net(net, plans.front()));
        check_same(ref, run_net(net, plans[2]));
        // Below the least reachable plan: refused, naming it.
        const size_t least = search.min_bytes();
        try {
            search.plan(least - 1);
            FAIL("a budget below the least plan was accepted");
        } catch (const gl::Error& e) {
            CHECK(std::string(e.what()).find(std::to_string(least) + " bytes") != std::string::npos);
        }
        // The same graph and budget give the same plan (deterministic), through make_plan too.
        PlanOptions o{Recompute::budget, 64};
        o.budget = plans[1].options.budget;
        Plan again = make_plan(net.g, o);
        CHECK(again.total_bytes() == plans[1].total_bytes());
        CHECK(again.graph.nodes.size() == plans[1].graph.nodes.size());
        CHECK(again.offset == plans[1].offset);
    }
    CHECK(with_range > 8);  // as with blocks, a fair share of random graphs has something to recompute
}

TEST_CASE("recompute budget: the tiny LoRA training step trains bitwise identically at half its activations") {
    using namespace train_test;
    const train::StepOptions o = tiny_options(train::Precision::fp32, 2, 1, 1e-3f);
    auto s = train::build_step(o);
    RecomputeSearch search(s->g, {});
    const size_t none = search.frontier()[0].total_bytes, least = search.min_bytes();
    REQUIRE(least < none);
    Plan half = search.plan((none + least) / 2);
    CHECK(half.recompute_nodes > 0);
    auto train = [&](Plan p) { return train_two_steps(*s, o, std::move(p)); };
    check_same({train(make_plan(s->g))}, {train(std::move(half))});
}

TEST_CASE("recompute budget: the full-size SD1.5 LoRA step over a sweep of budgets (planned only)") {
    train::StepOptions o;  // 512x512, batch 1, bf16, kohya targets, rank 16
    o.lora = lora::LoraConfig{16, 16.0f, 1.0f};
    auto s = train::build_step(o);
    RecomputeSearch search(s->g, {});
    const std::vector<Plan> plans = sweep(search, 9, 256);
    const double mib = 1024.0 * 1024.0;
    // The budget policy reaches below both fixed policies, and at cheap's memory it predicts a
    // faster step than cheap.
    const Plan cheap = make_plan(s->g, {Recompute::cheap}), blocks = make_plan(s->g, {Recompute::blocks});
    CHECK(search.min_bytes() < blocks.total_bytes());
    const Plan at_cheap = search.plan(cheap.total_bytes());
    CHECK(at_cheap.predicted_seconds < cheap.predicted_seconds);
    MESSAGE("SD1.5 step batch 1: recompute none ", plans.back().total_bytes() / mib, " MiB ",
            plans.back().predicted_seconds * 1e3, " ms predicted; least ", plans.front().total_bytes() / mib, " MiB ",
            plans.front().predicted_seconds * 1e3, " ms; at cheap's ", cheap.total_bytes() / mib, " MiB ",
            at_cheap.predicted_seconds * 1e3, " ms (cheap ", cheap.predicted_seconds * 1e3, ")");
    const std::string table = search.frontier_table();
    CHECK(table.find("(smallest)") != std::string::npos);
    char none_row[32];
    std::snprintf(none_row, sizeof none_row, "%12.1f", plans.back().total_bytes() / mib);
    CHECK(table.find(none_row) != std::string::npos);
    CHECK(plans.front().report().find("recompute budget <= ") != std::string::npos);
    try {
        search.plan(search.min_bytes() / 2);
        FAIL("half the least plan was accepted");
    } catch (const gl::Error& e) {
        CHECK(std::string(e.what()).find("no plan fits") != std::string::npos);
    }
}
