// The fusion pass's joined pairs (core/fusion.h, ops/pair.h): a product whose residual is another
// product's output becomes one node. On LoRA-shaped graphs (the forward base + up join and the
// backward dx = dy W + dh A), what it joins, where the joined node runs, what it refuses, that the
// plan is no larger and the results agree with the unjoined graph (f32 within f32 roundings, bf16
// within one bf16 rounding); the tiny UNet's step joins its LoRA modules and trains as before.
#include <doctest/doctest.h>

#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/fusion.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "ggml-lite/ops/pair.h"
#include "ggml-lite/ops/param_casts.h"
#include "planner_nets.h"
#include "train/trainer.h"
#include "plan_train.h"
#include "train_fixtures.h"

using namespace gl;
using namespace gltest;

namespace {

PlanOptions adds_only() {
    PlanOptions o;
    o.pairs = false;
    return o;
}

int pair_nodes(const Graph& g, bool backward) {
    int n = 0;
    for (const Node& x : g.nodes) n += x.backward == backward && (x.op == Op::linear || x.op == Op::matmul) && has_pair(x.p);
    return n;
}

// The worst |a - b| over the largest |b|, per value.
double worst_rel(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0, largest = 0;
    for (size_t i = 0; i < a.size(); i++) {
        worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
        largest = std::max(largest, std::fabs(double(b[i])));
    }
    return largest > 0 ? worst / largest : worst;
}

// A transformer block's LoRA'd output projection joined to its residual stream: y = h + (base(x) +
// up(down(x)) * 0.5), differentiated for every leaf. With `bf16`, computed in bf16.
struct LoraNet {
    Net n;
    ValueId x = kNoValue, h = kNoValue, y = kNoValue;
};

LoraNet lora_net(bool bf16) {
    LoraNet l;
    Net& n = l.n;
    Graph& g = n.g;
    const DType t = bf16 ? DType::bf16 : DType::f32;
    auto in = [&](ValueId v) { return bf16 ? cast(g, v, t) : v; };
    l.x = in(n.leaf(Role::param, "x", {2, 6, 24}));
    l.h = silu(g, in(n.leaf(Role::param, "z", {2, 6, 16})));
    const ValueId base = linear(g, l.x, in(n.leaf(Role::param, "w", {16, 24})), in(n.leaf(Role::param, "b", {16})));
    const ValueId down = linear(g, l.x, in(n.leaf(Role::param, "down", {4, 24})));
    const ValueId up = scale(g, linear(g, down, in(n.leaf(Role::param, "up", {16, 4}))), 0.5f);
    l.y = add(g, l.h, add(g, base, up));
    ValueId out = bf16 ? cast(g, l.y, DType::f32) : l.y;
    g.mark_output(out);
    REQUIRE(fold_param_scales(g) == 1);
    n.differentiate({out});
    return l;
}

}  // namespace

TEST_CASE("fusion pairs: a LoRA's base and up projection join, and its input gradient dy W + dh A") {
    LoraNet l = lora_net(false);
    FusionStats adds, st;
    const Graph a = fuse_epilogues(l.n.g, &adds, false), f = fuse_epilogues(l.n.g, &st);
    CHECK(adds.pairs == 0);
    CHECK(st.adds == adds.adds);
    CHECK(st.pairs >= 2);
    CHECK(pair_nodes(f, false) == 1);  // base + up
    CHECK(pair_nodes(f, true) >= 1);   // dx: dy W joined to dh down
    CHECK(int(a.nodes.size()) - int(f.nodes.size()) == st.pairs);
    CHECK(st.nodes_removed == adds.nodes_removed + st.pairs);
    CHECK(check_topology(f) == "");
    // The forward pair: the up projection's output y, x w^T + bias first, (down) (up s)^T second,
    // the residual stream h last. It runs where up ran (down's output is made after base runs).
    REQUIRE(f.v(l.y).producer >= 0);
    const Node& j = f.nodes[size_t(f.v(l.y).producer)];
    CHECK(j.op == Op::linear);
    REQUIRE(j.in.size() == 6);
    CHECK(j.in[0] == l.x);
    CHECK(j.in[5] == l.h);
    // Again: nothing left to join.
    FusionStats again;
    fuse_epilogues(f, &again);
    CHECK(again.pairs == 0);
    CHECK(again.adds == 0);
    // Plans: the joined one is no larger, reports its pairs, and computes the same within f32 roundings.
    const Plan joined = make_plan(l.n.g), plain = make_plan(l.n.g, adds_only());
    CHECK(joined.joined_pairs == st.pairs);
    CHECK(plain.joined_pairs == 0);
    CHECK(joined.report().find(cat(st.pairs, " products joined")) != std::string::npos);
    CHECK(plain.report().find("0 products joined (pairs off)") != std::string::npos);
    CHECK(check_overlaps(joined) == "");
    CHECK(joined.total_bytes() <= plain.total_bytes());
    CHECK(joined.peak_live_bytes <= plain.peak_live_bytes);
    CHECK(joined.graph.nodes.size() + size_t(st.pairs) == plain.graph.nodes.size());
    const auto ra = run_net(l.n, joined), rb = run_net(l.n, plain);
    REQUIRE(ra.size() == rb.size());
    for (size_t k = 0; k < ra.size(); k++) {
        CAPTURE(k);
        REQUIRE(ra[k].size() == rb[k].size());
        CHECK(worst_rel(ra[k], rb[k]) <= 1e-6);
    }
}

TEST_CASE("fusion pairs: in bf16 the joined sum is rounded once, within a rounding of the unjoined one") {
    LoraNet l = lora_net(true);
    const Plan joined = make_plan(l.n.g), plain = make_plan(l.n.g, adds_only());
    CHECK(joined.joined_pairs >= 2);
    const auto ra = run_net(l.n, joined), rb = run_net(l.n, plain);
    REQUIRE(ra.size() == rb.size());
    for (size_t k = 0; k < ra.size(); k++) {
        CAPTURE(k);
        if (ra[k].size() == 1) continue;  // the loss sums the roundings over every element
        CHECK(worst_rel(ra[k], rb[k]) <= 1.0 / 128.0);  // 2^-7: one bf16 rounding of base, one of the sum
    }
}

TEST_CASE("fusion pairs: what it must not join, and a pair has no backward rule") {
    auto pairs = [](const Graph& g) {
        FusionStats st;
        fuse_epilogues(g, &st);
        return st.pairs;
    };
    auto leaf = [](Graph& g, const char* name, Shape s, DType t = DType::f32) { return g.input(name, t, s); };
    {  // the plain pattern joins
        Graph g;
        const ValueId q = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}), leaf(g, "b", {6}));
        g.mark_output(linear_add(g, leaf(g, "h", {4, 2}), leaf(g, "u", {6, 2}), kNoValue, q));
        CHECK(pairs(g) == 1);
    }
    {  // P has a bias of its own
        Graph g;
        const ValueId q = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
        g.mark_output(linear_add(g, leaf(g, "h", {4, 2}), leaf(g, "u", {6, 2}), leaf(g, "b", {6}), q));
        CHECK(pairs(g) == 0);
    }
    {  // Q's output is read by another node too, or is a graph output
        for (bool output : {false, true}) {
            Graph g;
            const ValueId q = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
            g.mark_output(linear_add(g, leaf(g, "h", {4, 2}), leaf(g, "u", {6, 2}), kNoValue, q));
            if (output) g.mark_output(q);
            else g.mark_output(silu(g, q));
            CHECK(pairs(g) == 0);
        }
    }
    {  // other ops or other transpose flags
        Graph g;
        const ValueId q = matmul(g, leaf(g, "a", {4, 8}), leaf(g, "b", {8, 6}));
        g.mark_output(linear_add(g, leaf(g, "h", {4, 2}), leaf(g, "u", {6, 2}), kNoValue, q));
        const ValueId q2 = matmul(g, leaf(g, "a2", {4, 8}), leaf(g, "b2", {8, 6}));
        g.mark_output(matmul_add(g, leaf(g, "c", {4, 2}), leaf(g, "d", {6, 2}), q2, false, true));
        CHECK(pairs(g) == 0);
    }
    {  // a quantized weight on either side
        Graph g;
        const QuantWeight w{leaf(g, "q", {6, 8}, DType::i8), leaf(g, "s", {6})};
        const ValueId q = linear(g, leaf(g, "x", {4, 8}), w);
        g.mark_output(linear_add(g, leaf(g, "h", {4, 2}), leaf(g, "u", {6, 2}), kNoValue, q));
        CHECK(pairs(g) == 0);
    }
    {  // the two products in other checkpoint segments
        Graph g;
        ValueId q;
        {
            Segment s(g, "a");
            q = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
        }
        Segment s(g, "b");
        g.mark_output(linear_add(g, leaf(g, "h", {4, 2}), leaf(g, "u", {6, 2}), kNoValue, q));
        CHECK(pairs(g) == 0);
    }
    {  // a chain joins once: the second product cannot take a third
        Graph g;
        const ValueId q = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
        const ValueId p = linear_add(g, leaf(g, "h", {4, 2}), leaf(g, "u", {6, 2}), kNoValue, q);
        g.mark_output(linear_add(g, leaf(g, "h3", {4, 3}), leaf(g, "u3", {6, 3}), kNoValue, p));
        FusionStats st;
        const Graph f = fuse_epilogues(g, &st);
        CHECK(st.pairs == 1);
        CHECK(check_topology(f) == "");
    }
    {  // a pair node is differentiated nowhere: it exists after fusion only
        Graph g;
        const ValueId x = g.param("x", DType::f32, {4, 8}), x2 = g.param("x2", DType::f32, {4, 2});
        Params p;
        p.i[kPairSlot] = 1;
        const ValueId y = g.apply1(Op::linear, {x, g.param("w", DType::f32, {6, 8}), x2, g.param("u", DType::f32, {6, 2})}, p);
        const ValueId loss = sum(g, y);
        CHECK_THROWS_WITH_AS(backward(g, loss), doctest::Contains("no backward rule"), gl::Error);
    }
}

TEST_CASE("fusion pairs: the tiny UNet's training step joins its LoRA products, plans no larger, trains alike") {
    using namespace train_test;
    const train::StepOptions o = tiny_options(train::Precision::fp32, 2, 1, 1e-3f);
    auto s = train::build_step(o);
    FusionStats st, adds;
    const Graph f = fuse_epilogues(s->g, &st);
    fuse_epilogues(s->g, &adds, false);
    const int lora_modules = int(s->net->modules().size());
    const int fwd = pair_nodes(f, false), bwd = pair_nodes(f, true);
    MESSAGE("tiny UNet step: ", st.pairs, " products joined (", fwd, " forward, ", bwd, " backward) over ", lora_modules,
            " LoRA modules");
    CHECK(st.pairs == fwd + bwd);
    CHECK(st.adds == adds.adds);
    CHECK(fwd > 0);
    CHECK(bwd > 0);
    CHECK(fwd <= lora_modules);
    CHECK(check_topology(f) == "");
    const Plan joined = make_plan(s->g), plain = make_plan(s->g, adds_only());
    CHECK(joined.joined_pairs == st.pairs);
    CHECK(check_overlaps(joined) == "");
    MESSAGE("planned total ", joined.total_bytes(), " bytes joined, ", plain.total_bytes(), " not; peak ",
            joined.peak_live_bytes, " vs ", plain.peak_live_bytes);
    CHECK(joined.total_bytes() <= plain.total_bytes());
    CHECK(joined.peak_live_bytes <= plain.peak_live_bytes);
    auto train = [&](Plan p) { return train_two_steps(*s, o, std::move(p)); };
    const std::vector<float> a = train(joined), b = train(plain);
    REQUIRE(a.size() == b.size());
    CHECK(worst_rel(a, b) <= 1e-5);  // the joined sums round differently in f32
    PlanOptions blocks;
    blocks.recompute = Recompute::blocks;
    CHECK(train(make_plan(s->g, blocks)) == a);  // recompute clones the joined nodes
}
