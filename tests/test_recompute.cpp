// The recompute rewrite: its structure (ids kept, one clone per segment, placed before its
// first backward reader, only what is needed) and its effect (bitwise-identical results on
// the CPU backend, a lower activation peak).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/fusion.h"
#include "ggml-lite/ops/builder.h"
#include "planner_nets.h"

using namespace gl;
using namespace gltest;

namespace {

bool reads(const Node& n, ValueId v) { return std::find(n.in.begin(), n.in.end(), v) != n.in.end(); }

// Checks every promise of rewrite_for_recompute(g) == r. Returns clone value -> original.
std::vector<ValueId> check_rewrite(const Graph& g, const Graph& r, int added) {
    REQUIRE(check_topology(r) == "");
    const ValueId V = g.value_count();
    std::vector<ValueId> orig(size_t(r.value_count()), kNoValue);
    std::vector<int> to_g(r.nodes.size(), -1);  // non-clone node of r -> its node in g
    std::vector<int> cloned(g.nodes.size(), 0);
    size_t gi = 0;
    int clones = 0;
    for (size_t i = 0; i < r.nodes.size(); i++) {
        const Node& n = r.nodes[i];
        if (n.recompute_of >= 0) {
            clones++;
            REQUIRE(n.recompute_of < int(i));
            const Node& src = r.nodes[size_t(n.recompute_of)];
            REQUIRE(src.recompute_of < 0);
            CHECK(!src.backward);
            CHECK(src.segment >= 0);
            CHECK(n.backward);
            CHECK(n.segment == -1);
            CHECK(n.op == src.op);
            CHECK((n.p.i == src.p.i && n.p.f == src.p.f));
            cloned[size_t(to_g[size_t(n.recompute_of)])]++;
            REQUIRE(n.out.size() == src.out.size());
            for (size_t k = 0; k < n.out.size(); k++) {
                const Value &a = r.v(n.out[k]), &b = r.v(src.out[k]);
                CHECK(n.out[k] >= V);
                CHECK((a.dtype == b.dtype && a.shape() == b.shape() && a.layout.offset == b.layout.offset));
                CHECK(a.category == Category::activations);
                CHECK(!a.output);
                orig[size_t(n.out[k])] = src.out[k];
            }
            REQUIRE(n.in.size() == src.in.size());
            for (size_t j = 0; j < n.in.size(); j++) CHECK((n.in[j] == src.in[j] || orig[size_t(n.in[j])] == src.in[j]));
            continue;
        }
        REQUIRE(gi < g.nodes.size());
        const Node& o = g.nodes[gi];
        to_g[i] = int(gi++);
        CHECK(n.op == o.op);
        CHECK(n.backward == o.backward);
        CHECK(n.segment == o.segment);
        CHECK(n.out == o.out);
        REQUIRE(n.in.size() == o.in.size());
        for (size_t j = 0; j < n.in.size(); j++)
            CHECK((n.in[j] == o.in[j] || (n.backward && orig[size_t(n.in[j])] == o.in[j])));
    }
    CHECK(gi == g.nodes.size());
    CHECK(clones == added);
    for (int c : cloned) CHECK(c <= 1);

    // Value ids of g keep their meaning.
    for (ValueId v = 0; v < V; v++) {
        const Value &a = g.v(v), &b = r.v(v);
        CHECK((a.name == b.name && a.dtype == b.dtype && a.layout.offset == b.layout.offset && a.shape() == b.shape() &&
               a.role == b.role && a.category == b.category && a.output == b.output));
        // A backward view of a dropped value views the clone's storage instead.
        CHECK((a.base == b.base || orig[size_t(b.base)] == a.base));
        if (b.producer >= 0) CHECK(to_g[size_t(b.producer)] == a.producer);
    }

    // Backward nodes read no segment storage the forward pass could drop.
    std::vector<std::vector<bool>> read_in(g.segment_names.size() + 1, std::vector<bool>(size_t(V), false));
    for (const Node& n : g.nodes)
        if (!n.backward)
            for (ValueId x : n.in) read_in[size_t(n.segment + 1)][size_t(g.v(x).base)] = true;
    auto seg = [&](ValueId v) {
        int p = r.v(v).producer;
        return v >= V || p < 0 || r.nodes[size_t(p)].backward ? -1 : r.nodes[size_t(p)].segment;
    };
    for (const Node& n : r.nodes) {
        if (!n.backward || n.recompute_of >= 0) continue;
        for (ValueId x : n.in) {
            ValueId b = r.v(x).base;
            int s = seg(b);
            if (s < 0) continue;
            bool outside = r.v(b).output;
            for (size_t t = 0; t < read_in.size(); t++) outside = outside || (int(t) - 1 != s && b < V && read_in[t][size_t(b)]);
            CHECK_MESSAGE(outside, "backward reads ", r.describe(x), " which segment ", s, " could drop");
        }
    }

    // Each clone is read; each segment's clones form one run that ends right before a
    // backward node reading them.
    std::vector<int> block_at(g.segment_names.size(), -1);
    for (size_t i = 0; i < r.nodes.size(); i++) {
        const Node& n = r.nodes[i];
        if (n.recompute_of < 0) continue;
        bool used = false;
        for (size_t j = i + 1; j < r.nodes.size() && !used; j++)
            for (ValueId y : n.out) used = used || reads(r.nodes[j], y);
        CHECK_MESSAGE(used, "clone of node ", n.recompute_of, " is never read");
        int s = r.nodes[size_t(n.recompute_of)].segment;
        size_t next = i + 1;
        while (next < r.nodes.size() && r.nodes[next].recompute_of >= 0) next++;
        REQUIRE(next < r.nodes.size());
        if (block_at[size_t(s)] < 0) block_at[size_t(s)] = int(next);
        CHECK(block_at[size_t(s)] == int(next));
    }
    for (size_t s = 0; s < block_at.size(); s++) {
        if (block_at[s] < 0) continue;
        const Node& first = r.nodes[size_t(block_at[s])];
        CHECK(first.backward);
        bool reads_segment = false;
        for (ValueId x : first.in)
            reads_segment = reads_segment || (orig[size_t(x)] != kNoValue &&
                                              r.nodes[size_t(r.v(orig[size_t(x)]).producer)].segment == int(s));
        CHECK_MESSAGE(reads_segment, "segment ", s, " is recomputed before a node that does not read it");
    }
    return orig;
}

void check_bitwise(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); k++) {
        CAPTURE(k);
        REQUIRE(a[k].size() == b[k].size());
        CHECK(std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) == 0);
        for (float x : a[k]) REQUIRE(std::isfinite(x));
    }
}

// Plans net.g with both policies, checks the rewrite (of the fused graph: the planner fuses first)
// and returns the two peaks.
std::pair<size_t, size_t> compare_policies(const Net& net) {
    Plan none = make_plan(net.g, {Recompute::none, 64});
    Plan blocks = make_plan(net.g, {Recompute::blocks, 64});
    check_rewrite(fuse_epilogues(net.g), blocks.graph, blocks.recompute_nodes);
    CHECK(check_overlaps(blocks) == "");
    check_bitwise(run_net(net, none), run_net(net, blocks));
    Plan cheap = make_plan(net.g, {Recompute::cheap, 64});
    REQUIRE(check_topology(cheap.graph) == "");
    CHECK(check_overlaps(cheap) == "");
    check_bitwise(run_net(net, none), run_net(net, cheap));
    return {none.peak_live_bytes, blocks.peak_live_bytes};
}

// NHWC conv block and a transformer block, each a segment, dropout inside both.
Net conv_attention_net() {
    Net n;
    Graph& g = n.g;
    const int64_t B = 2, H = 4, W = 4, C = 8, heads = 2;
    ValueId x = n.leaf(Role::input, "x", {B, H, W, C});
    ValueId target = n.leaf(Role::input, "target", {B, H * W, C});
    ValueId x1;
    {
        Segment s(g, "res");
        ValueId h = group_norm(g, x, n.leaf(Role::param, "gn.gamma", {C}), n.leaf(Role::weight, "gn.beta", {C}), 2, 1e-5f, true);
        h = dropout(g, h, 0.2f, 11);
        h = conv2d(g, h, n.leaf(Role::param, "conv.w", {C, 3, 3, C}), n.leaf(Role::weight, "conv.b", {C}), 1, 1);
        x1 = add(g, x, h);
    }
    ValueId x2;
    {
        Segment s(g, "attn");
        ValueId t = reshape(g, x1, {B, H * W, C});
        ValueId ln = layer_norm(g, t, n.leaf(Role::weight, "ln.gamma", {C}), n.leaf(Role::param, "ln.beta", {C}), 1e-5f);
        auto proj = [&](const char* name, Role role) {
            return reshape(g, linear(g, ln, n.leaf(role, name, {C, C})), {B, H * W, heads, C / heads});
        };
        ValueId o = attention(g, proj("wq", Role::param), proj("wk", Role::weight), proj("wv", Role::param));
        o = dropout(g, reshape(g, o, {B, H * W, C}), 0.1f, 12);
        x2 = add(g, t, linear(g, o, n.leaf(Role::param, "wo", {C, C}), n.leaf(Role::param, "bo", {C})));
    }
    n.loss = mse_loss(g, x2, target);
    g.mark_output(n.loss);
    n.grads = backward(g, n.loss);
    return n;
}

}  // namespace

TEST_CASE("recompute: conv + attention + norm net gives bitwise-identical gradients") {
    Net net = conv_attention_net();
    int added = 0;
    Graph r = rewrite_for_recompute(net.g, Recompute::blocks, &added);
    std::vector<ValueId> orig = check_rewrite(net.g, r, added);
    bool dropout_cloned = false;
    std::vector<int> per_segment(2, 0);
    for (const Node& n : r.nodes)
        if (n.recompute_of >= 0) {
            dropout_cloned = dropout_cloned || n.op == Op::dropout;
            per_segment[size_t(r.nodes[size_t(n.recompute_of)].segment)]++;
        }
    CHECK(dropout_cloned);
    CHECK(per_segment[0] > 0);
    CHECK(per_segment[1] > 0);
    for (ValueId p : net.params) CHECK(net.grads[p] != kNoValue);
    compare_policies(net);
    Plan P = make_plan(net.g, {Recompute::blocks, 256});
    int added_fused = 0;  // the planner rewrites the fused graph
    rewrite_for_recompute(fuse_epilogues(net.g), Recompute::blocks, &added_fused);
    CHECK(P.recompute_nodes == added_fused);
    CHECK(P.recompute_flops > 0);
    CHECK(P.report().find("recompute blocks") != std::string::npos);
}

TEST_CASE("recompute: random graphs with segments rewrite correctly and run bitwise identical") {
    int rewritten = 0;
    for (uint32_t seed = 500; seed < 650; seed++) {
        CAPTURE(seed);
        Net net = random_net(seed, 12 + int(seed % 20), true, true);
        compare_policies(net);
        int added = 0;
        rewrite_for_recompute(net.g, Recompute::blocks, &added);
        rewritten += added > 0;
    }
    CHECK(rewritten > 25);
}

TEST_CASE("recompute: a deep chain of blocks has a lower activation peak") {
    Net net;
    Graph& g = net.g;
    ValueId h = net.leaf(Role::input, "x", {8, 32});
    for (int i = 0; i < 8; i++) {
        Segment s(g, cat("block", i));
        // Scaled so that activations stay near 1 through the chain.
        ValueId u = scale(g, silu(g, linear(g, h, net.leaf(Role::param, cat("up", i), {128, 32}))), 0.2f);
        u = mul(g, u, scale(g, silu(g, linear(g, h, net.leaf(Role::weight, cat("gate", i), {128, 32}))), 0.2f));
        h = add(g, h, scale(g, linear(g, u, net.leaf(Role::param, cat("down", i), {32, 128})), 0.1f));
    }
    net.loss = mean(g, mul(g, h, h));
    g.mark_output(net.loss);
    net.grads = backward(g, net.loss);
    auto [none, blocks] = compare_policies(net);
    MESSAGE("activation peak: none ", none, " bytes, blocks ", blocks, " bytes");
    CHECK(blocks * 2 < none);
}

TEST_CASE("recompute: multi-output nodes keep their boundary output and recompute the rest") {
    Net net;
    Graph& g = net.g;
    ValueId x = net.leaf(Role::input, "x", {2, 8, 8});
    ValueId o;
    {
        Segment s(g, "attn");
        auto proj = [&](const char* name) {
            return reshape(g, linear(g, x, net.leaf(Role::param, name, {8, 8})), {2, 8, 2, 4});
        };
        o = attention(g, proj("wq"), proj("wk"), proj("wv"));
    }
    const int attn_node = g.v(o).producer;
    const ValueId lse = g.nodes[size_t(attn_node)].out[1];
    net.differentiate({silu(g, o)});
    int added = 0;
    Graph r = rewrite_for_recompute(g, Recompute::blocks, &added);
    std::vector<ValueId> orig = check_rewrite(g, r, added);
    // attention_grad reads the kept output o itself and the recomputed lse.
    bool checked = false;
    for (const Node& n : r.nodes) {
        if (n.op != Op::attention_grad) continue;
        CHECK(reads(n, o));
        CHECK(!reads(n, lse));
        bool clone_lse = false;
        for (ValueId v : n.in) clone_lse = clone_lse || orig[size_t(v)] == lse;
        CHECK(clone_lse);
        checked = true;
    }
    CHECK(checked);
    compare_policies(net);
}

TEST_CASE("recompute: values read only through views are recomputed with their views") {
    Net net;
    Graph& g = net.g;
    ValueId x = net.leaf(Role::input, "x", {4, 6});
    ValueId y, h, hv, xv;
    {
        Segment s(g, "seg");
        h = linear(g, x, net.leaf(Role::param, "w", {6, 6}));
        hv = reshape(g, h, {2, 12});                 // a view of dropped storage
        xv = reshape(g, x, {2, 12});                 // a view of the segment's input: kept
        y = mul(g, mul(g, hv, hv), xv);
    }
    net.differentiate({y});
    int added = 0;
    Graph r = rewrite_for_recompute(g, Recompute::blocks, &added);
    std::vector<ValueId> orig = check_rewrite(g, r, added);
    ValueId h2 = kNoValue, hv2 = kNoValue;
    for (ValueId v = g.value_count(); v < r.value_count(); v++) {
        if (orig[size_t(v)] == h) h2 = v;
        if (orig[size_t(v)] == hv) hv2 = v;
        CHECK(orig[size_t(v)] != xv);
    }
    REQUIRE(h2 != kNoValue);
    REQUIRE(hv2 != kNoValue);
    CHECK(r.v(hv2).base == h2);
    CHECK(r.v(h2).base == h2);
    for (const Node& n : r.nodes) {
        if (!n.backward) continue;
        CHECK(!reads(n, h));
        CHECK(!reads(n, hv));
    }
    compare_policies(net);
}

TEST_CASE("recompute: outputs, boundary values and inputs are kept") {
    Net net;
    Graph& g = net.g;
    ValueId x = net.leaf(Role::param, "x", {3, 5});
    ValueId a, b, c;
    {
        Segment s(g, "seg");
        a = silu(g, x);        // a graph output
        b = mul(g, a, a);      // read through a view outside the segment
        c = mul(g, b, x);
    }
    g.mark_output(a);
    ValueId tail = mul(g, slice(g, b, 0, 1, 2), slice(g, c, 0, 0, 2));
    net.differentiate({tail, c});
    int added = 0;
    Graph r = rewrite_for_recompute(g, Recompute::blocks, &added);
    check_rewrite(g, r, added);
    CHECK(added == 0);  // everything backward reads is kept
    compare_policies(net);
}

TEST_CASE("recompute: policy none, graphs without backward, and errors") {
    Net net = conv_attention_net();
    int added = -1;
    Graph same = rewrite_for_recompute(net.g, Recompute::none, &added);
    CHECK(added == 0);
    REQUIRE(same.nodes.size() == net.g.nodes.size());
    for (size_t i = 0; i < same.nodes.size(); i++) {
        CHECK(same.nodes[i].in == net.g.nodes[i].in);
        CHECK(same.nodes[i].out == net.g.nodes[i].out);
    }
    CHECK(same.value_count() == net.g.value_count());

    Net fwd = random_net(9, 20, false, true);
    Graph r = rewrite_for_recompute(fwd.g, Recompute::blocks, &added);
    CHECK(added == 0);
    CHECK(r.nodes.size() == fwd.g.nodes.size());

    Graph twice = rewrite_for_recompute(net.g, Recompute::blocks, &added);
    REQUIRE(added > 0);
    CHECK_THROWS_AS(rewrite_for_recompute(twice, Recompute::blocks), gl::Error);
    CHECK_THROWS_AS(rewrite_for_recompute(net.g, Recompute(7)), gl::Error);

    Graph g;
    g.begin_segment("outer");
    CHECK_THROWS_AS(g.begin_segment("inner"), gl::Error);
    g.end_segment();
    CHECK_THROWS_AS(g.end_segment(), gl::Error);
    {
        Segment s(g, "a");
        CHECK_THROWS_AS(Segment(g, "b"), gl::Error);
    }
    CHECK(g.current_segment() == -1);
}

TEST_CASE("recompute cheap: one-pass outputs are dropped and recomputed, never keeping an input longer") {
    Net net;
    Graph& g = net.g;
    ValueId x = net.leaf(Role::input, "x", {4, 8});
    // x -> layer_norm -> linear: the norm's output is read by the weight gradient; its input is a
    // graph input (always there): dropped and recomputed.
    ValueId ln = layer_norm(g, x, net.leaf(Role::weight, "ln.gamma", {8}), net.leaf(Role::weight, "ln.beta", {8}), 1e-5f);
    ValueId y = linear(g, ln, net.leaf(Role::param, "w", {8, 8}));
    // x -> bf16 -> silu -> f32 cast -> linear: the cast's output is read by the weight gradient,
    // but its input (silu's output) by nothing in the backward pass: recomputing the cast would keep
    // that input alive through the whole backward, so the cast's output stays.
    ValueId s = silu(g, cast(g, x, DType::bf16));
    ValueId c = cast(g, s, DType::f32);
    ValueId u = linear(g, c, net.leaf(Role::param, "w2", {8, 8}));
    net.differentiate({y, u});
    Plan none = make_plan(g, {Recompute::none, 64}), cheap = make_plan(g, {Recompute::cheap, 64});
    REQUIRE(check_topology(cheap.graph) == "");
    CHECK(check_overlaps(cheap) == "");
    int ln_clones = 0, cast_clones = 0;
    for (const Node& n : cheap.graph.nodes) {
        if (n.recompute_of < 0) continue;
        CHECK(n.backward);
        ln_clones += n.op == Op::layer_norm;
        cast_clones += n.op == Op::cast && n.out[0] != kNoValue && cheap.graph.v(n.in[0]).base == g.v(s).base;
    }
    CHECK(ln_clones == 1);
    CHECK(cast_clones == 0);
    // The norm's output no longer lives through the backward pass.
    CHECK(cheap.last[size_t(ln)] < none.last[size_t(ln)]);
    CHECK(cheap.peak_live_bytes <= none.peak_live_bytes);
    check_bitwise(run_net(net, none), run_net(net, cheap));
    CHECK(parse_recompute("cheap") == Recompute::cheap);
    CHECK(std::string(recompute_name(Recompute::cheap)) == "cheap");
}

TEST_CASE("recompute cheap: the one-pass ops are those flagged kOpCheapRecompute in the op table") {
    // The policy's memory figures (bench/RESULTS.md) were measured with these four; a change to the
    // set is a decision to re-measure, not a side effect.
    std::vector<std::string> flagged;
    for (int k = 0; k < kOpCount; k++)
        if (op_def(Op(k)).flags & kOpCheapRecompute) flagged.push_back(op_name(Op(k)));
    std::sort(flagged.begin(), flagged.end());
    CHECK(flagged == std::vector<std::string>{"cast", "geglu", "group_norm", "layer_norm"});
    for (int k = 0; k < kOpCount; k++) {
        const uint32_t f = op_def(Op(k)).flags;
        CHECK_MESSAGE(!((f & kOpCheapRecompute) && (f & (kOpView | kOpMutates | kOpGradHelper))), op_name(Op(k)),
                      ": a view, an in-place update or a backward helper cannot be recomputed cheaply");
    }
}
