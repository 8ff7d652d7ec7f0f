// The fusion pass (core/fusion.h): adds folded into the epilogues of the products before them.
// A fused graph computes what the unfused one does (f32 bit for bit: the same two roundings;
// bf16 within one rounding), the pass fuses the LoRA joins, residual joins and gradient sums of
// the tiny UNet's training step, refuses what it must, and the planner reports it, can do without
// it, and lets a product write over its residual.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "models/sd15/sd_config.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/fusion.h"
#include "ggml-lite/core/recompute_budget.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "ggml-lite/ops/param_casts.h"
#include "planner_nets.h"
#include "train/trainer.h"
#include "plan_train.h"
#include "train_fixtures.h"

using namespace gl;
using namespace gltest;

namespace {

PlanOptions unfused() {
    PlanOptions o;
    o.fusion = false;
    return o;
}

PlanOptions adds_only() {
    PlanOptions o;
    o.pairs = false;
    return o;
}

int count_op(const Graph& g, Op op) {
    int n = 0;
    for (const Node& x : g.nodes) n += x.op == op;
    return n;
}

// A LoRA'd linear (base + up(down(x)) * 0.5, the scale folded into a view of up's output), a
// resnet-like join of two convs of one input, and a matmul joined to a leaf; x and x4 are read by
// two products each, so their gradients are sums. With `bf16`, computed in bf16.
Net joins_net(bool bf16) {
    Net n;
    Graph& g = n.g;
    const DType t = bf16 ? DType::bf16 : DType::f32;
    auto in = [&](ValueId v) { return bf16 ? cast(g, v, t) : v; };
    const ValueId x = in(n.leaf(Role::param, "x", {2, 6, 16}));
    const ValueId base = linear(g, x, in(n.leaf(Role::param, "w", {16, 16})), in(n.leaf(Role::param, "b", {16})));
    const ValueId down = linear(g, x, in(n.leaf(Role::param, "down", {4, 16})));
    const ValueId up = scale(g, linear(g, down, in(n.leaf(Role::param, "up", {16, 4}))), 0.5f);
    const ValueId x4 = in(n.leaf(Role::param, "x4", {1, 6, 5, 8}));
    const ValueId c1 = conv2d(g, x4, in(n.leaf(Role::param, "w1", {8, 3, 3, 8})), kNoValue, 1, 1);
    const ValueId sc = conv2d(g, x4, in(n.leaf(Role::param, "w2", {8, 1, 1, 8})), kNoValue, 1, 0);
    const ValueId r3 = in(n.leaf(Role::weight, "r3", {5, 3}));
    const ValueId m = matmul(g, in(n.leaf(Role::param, "a", {5, 7})), in(n.leaf(Role::param, "bm", {7, 3})));
    std::vector<ValueId> ys = {add(g, base, up), add(g, sc, c1), add(g, r3, m)};
    for (ValueId& y : ys) {
        if (bf16) y = cast(g, y, DType::f32);
        g.mark_output(y);  // the sums: outputs, the products fused into them are not
    }
    REQUIRE(fold_param_scales(g) == 1);
    n.differentiate(ys);
    return n;
}

}  // namespace

TEST_CASE("fusion: the fused graph computes the unfused one, f32 bit for bit") {
    Net n = joins_net(false);
    FusionStats st;
    const Graph f = fuse_epilogues(n.g, &st, false);  // adds only: joined pairs reassociate
    // The three joins and the two gradient sums (of x and of x4), none reassociated.
    CHECK(st.adds == 5);
    CHECK(st.chained == 0);
    CHECK(count_op(n.g, Op::add) - count_op(f, Op::add) == 5);
    CHECK(int(n.g.nodes.size()) - int(f.nodes.size()) == st.nodes_removed);
    CHECK(check_topology(f) == "");
    const Plan fused = make_plan(n.g, adds_only()), plain = make_plan(n.g, unfused());
    CHECK(fused.fused_adds == 5);
    CHECK(fused.joined_pairs == 0);
    CHECK(check_overlaps(fused) == "");
    const auto a = run_net(n, fused), b = run_net(n, plain);
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); k++) {
        CAPTURE(k);
        REQUIRE(a[k].size() == b[k].size());
        CHECK(std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) == 0);
    }
}

// Norms of a frozen affine before a product, joined to their input (a transformer block's
// x + attn(layer_norm(x)), a resnet's x + conv(group_norm(x))): x's gradient sums the incoming one
// and the norm's dx, which the norm gradient (dx alone) takes as its residual.
Net norm_joins_net() {
    Net n;
    Graph& g = n.g;
    const ValueId x = n.leaf(Role::param, "x", {2, 6, 16});
    const ValueId ln = layer_norm(g, x, n.leaf(Role::weight, "ln.gamma", {16}), n.leaf(Role::weight, "ln.beta", {16}), 1e-5f);
    const ValueId x4 = n.leaf(Role::param, "x4", {1, 4, 5, 8});
    const ValueId gn = group_norm(g, x4, n.leaf(Role::weight, "gn.gamma", {8}), n.leaf(Role::weight, "gn.beta", {8}), 2,
                                  1e-5f, true);
    std::vector<ValueId> ys = {add(g, x, linear(g, ln, n.leaf(Role::param, "w", {16, 16}))),
                               add(g, x4, conv2d(g, gn, n.leaf(Role::param, "wc", {8, 3, 3, 8}), kNoValue, 1, 1))};
    for (ValueId y : ys) g.mark_output(y);
    n.differentiate(ys);
    return n;
}

int norm_grads_with_residual(const Graph& g) {
    int k = 0;
    for (const Node& x : g.nodes)
        if (x.op == Op::layer_norm_grad || x.op == Op::group_norm_grad) k += op_def(x.op).residual_input(x) >= 0;
    return k;
}

TEST_CASE("fusion: a gradient sum onto a frozen norm's dx is taken by the norm gradient, f32 bit for bit") {
    Net n = norm_joins_net();
    for (const Node& x : n.g.nodes)  // frozen gamma and beta: the norm gradients make dx alone
        if (x.op == Op::layer_norm_grad || x.op == Op::group_norm_grad) CHECK(x.out.size() == 1);
    const Graph f = fuse_epilogues(n.g);
    CHECK(norm_grads_with_residual(n.g) == 0);
    CHECK(norm_grads_with_residual(f) == 2);
    CHECK(check_topology(f) == "");
    const Plan fused = make_plan(n.g), plain = make_plan(n.g, unfused());
    CHECK(check_overlaps(fused) == "");
    const auto a = run_net(n, fused), b = run_net(n, plain);
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); k++) {
        CAPTURE(k);
        REQUIRE(a[k].size() == b[k].size());
        CHECK(std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) == 0);
    }
}

TEST_CASE("fusion: in bf16 the fused sum is rounded once, within a rounding of the unfused one") {
    Net n = joins_net(true);
    const Plan fused = make_plan(n.g), plain = make_plan(n.g, unfused());
    CHECK(fused.fused_adds == 5);
    const auto a = run_net(n, fused), b = run_net(n, plain);
    REQUIRE(a.size() == b.size());
    bool any_differs = false;
    for (size_t k = 0; k < a.size(); k++) {
        CAPTURE(k);
        if (a[k].size() == 1) continue;  // the loss sums the joins' roundings over every element
        float largest = 0, worst = 0;
        for (size_t i = 0; i < a[k].size(); i++) {
            largest = std::max(largest, std::fabs(b[k][i]));
            worst = std::max(worst, std::fabs(a[k][i] - b[k][i]));
        }
        CHECK(worst <= largest / 128.0f);  // 2^-7: one bf16 rounding of the product and one of the sum
        any_differs = any_differs || worst > 0;
    }
    CHECK(any_differs);  // the unfused graph rounds the product first: the two are not the same arithmetic
}

TEST_CASE("fusion: what it must not fuse") {
    auto fused_adds = [](const Graph& g) {
        FusionStats st;
        fuse_epilogues(g, &st);
        return st.adds;
    };
    auto leaf = [](Graph& g, const char* name, Shape s, DType t = DType::f32) { return g.input(name, t, s); };
    {  // the product read by another node too
        Graph g;
        const ValueId y = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
        add(g, y, leaf(g, "r", {4, 6}));
        silu(g, y);
        CHECK(fused_adds(g) == 0);
    }
    {  // a broadcast (a per-channel bias)
        Graph g;
        add(g, linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8})), leaf(g, "r", {6}));
        CHECK(fused_adds(g) == 0);
    }
    {  // another dtype between the product and the add
        Graph g;
        const ValueId y = linear(g, leaf(g, "x", {4, 8}, DType::bf16), leaf(g, "w", {6, 8}, DType::bf16));
        add(g, cast(g, y, DType::f32), leaf(g, "r", {4, 6}));
        CHECK(fused_adds(g) == 0);
    }
    {  // the product is a graph output
        Graph g;
        const ValueId y = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
        g.mark_output(y);
        add(g, y, leaf(g, "r", {4, 6}));
        CHECK(fused_adds(g) == 0);
    }
    {  // the residual is made after the product (and by no product): not ready where the product runs
        Graph g;
        const ValueId y = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
        add(g, y, silu(g, leaf(g, "z", {4, 6})));
        CHECK(fused_adds(g) == 0);
    }
    {  // a view of part of the product, the same product twice, a product in another segment
        Graph g;
        const ValueId y = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
        add(g, slice(g, y, 0, 0, 2), leaf(g, "r", {2, 6}));
        const ValueId y2 = linear(g, leaf(g, "x2", {4, 8}), leaf(g, "w2", {6, 8}));
        add(g, y2, y2);
        ValueId y3;
        {
            Segment s(g, "a");
            y3 = linear(g, leaf(g, "x3", {4, 8}), leaf(g, "w3", {6, 8}));
        }
        Segment s(g, "b");
        add(g, y3, leaf(g, "r3", {4, 6}));
        CHECK(fused_adds(g) == 0);
    }
    {  // gradient accumulation over micro-batches updates its state in place: no add to fold
        Graph g;
        const ValueId acc = g.state("acc", DType::f32, {4, 6});
        accumulate(g, acc, linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8})), leaf(g, "ctl", {2}));
        CHECK(fused_adds(g) == 0);
    }
    {  // a product takes one residual: the second add of a chain stays
        Graph g;
        const ValueId y = add(g, linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8})), leaf(g, "r", {4, 6}));
        add(g, y, leaf(g, "r2", {4, 6}));
        CHECK(fused_adds(g) == 1);
    }
    {  // an add of two products: the later one takes the earlier as its residual
        Graph g;
        const ValueId y1 = matmul(g, leaf(g, "a", {4, 8}), leaf(g, "b", {8, 6}));
        const ValueId y2 = linear(g, leaf(g, "x", {4, 8}), leaf(g, "w", {6, 8}));
        const ValueId s = add(g, y1, y2);
        const Graph f = fuse_epilogues(g);
        REQUIRE(f.v(s).producer >= 0);
        const Node& n = f.nodes[size_t(f.v(s).producer)];
        CHECK(n.op == Op::linear);
        CHECK(n.in.back() == y1);
        CHECK(f.v(y2).base == s);  // the former output: a view of the sum, made by no node
        CHECK(f.v(y2).producer == -1);
    }
    {  // a graph holding recompute clones is refused
        Net n = random_net(3, 20, true, true);
        const Graph r = rewrite_for_recompute(n.g, Recompute::blocks);
        bool cloned = false;
        for (const Node& x : r.nodes) cloned = cloned || x.recompute_of >= 0;
        if (cloned) CHECK_THROWS_AS(fuse_epilogues(r), gl::Error);
    }
}

TEST_CASE("fusion: a sum onto a fused product is taken by its residual's maker") {
    // h + (base + up), as a transformer block joins a LoRA'd output projection: base + up folds
    // into up, then h into base, which up reads as its residual.
    for (bool base_read_twice : {false, true}) {
        CAPTURE(base_read_twice);
        Net n;
        Graph& g = n.g;
        const ValueId h = silu(g, n.leaf(Role::param, "z", {3, 8}));
        const ValueId base = linear(g, n.leaf(Role::param, "x", {3, 6}), n.leaf(Role::param, "w", {8, 6}));
        const ValueId up = linear(g, n.leaf(Role::param, "d", {3, 2}), n.leaf(Role::param, "u", {8, 2}));
        const ValueId y = add(g, h, add(g, base, up));
        std::vector<ValueId> terms = {y};
        if (base_read_twice) terms.push_back(gelu(g, base));
        n.differentiate(terms);
        FusionStats st;
        const Graph f = fuse_epilogues(n.g, &st, false);  // the adds' structure (pairs: their own tests)
        CHECK(check_topology(f) == "");
        const Node& wrote_y = f.nodes[size_t(f.v(y).producer)];
        if (!base_read_twice) {
            CHECK(st.chained == 1);
            REQUIRE(f.v(base).producer >= 0);
            CHECK(f.nodes[size_t(f.v(base).producer)].in.back() == h);  // base's product holds base + h
            CHECK(wrote_y.in.back() == base);                             // and up's writes y
        } else {
            CHECK(st.chained == 0);  // base is read by another node: its value must stay base
            CHECK(wrote_y.op == Op::add);  // h + (base + up) stays an add
        }
        const auto a = run_net(n, make_plan(n.g)), b = run_net(n, make_plan(n.g, unfused()));
        REQUIRE(a.size() == b.size());
        for (size_t k = 0; k < a.size(); k++)
            for (size_t i = 0; i < a[k].size(); i++) CHECK(a[k][i] == doctest::Approx(b[k][i]).epsilon(1e-6));
    }
}

TEST_CASE("fusion: the planner reports it, can plan without it, and a product may write over its residual") {
    Graph g;
    const ValueId x = g.input("x", DType::f32, {4, 8}), z = g.input("z", DType::f32, {4, 6});
    const ValueId w = g.weight("w", DType::f32, {6, 8});
    const ValueId r = silu(g, z);  // computed, read by the add alone
    const ValueId y = add(g, r, linear(g, x, w));
    g.mark_output(y);
    const Plan p = make_plan(g);
    CHECK(p.report().find("fused: 1 adds into epilogues, 0 products joined") != std::string::npos);
    CHECK(p.graph.nodes.size() == g.nodes.size() - 1);
    CHECK(p.inplace_of[size_t(y)] == r);  // the residual dies at the product: its bytes become the output's
    CHECK(check_overlaps(p) == "");
    const Plan q = make_plan(g, unfused());
    CHECK(q.report().find("fusion off") != std::string::npos);
    CHECK(q.graph.nodes.size() == g.nodes.size());
    CHECK(q.fused_adds == 0);
    std::vector<std::vector<float>> out;
    for (const Plan* pl : {&p, &q}) {
        auto rt = make_cpu_runtime(*pl);
        rt->poison(0xff);
        std::vector<float> xs(32), zs(24), ws(48);
        for (size_t i = 0; i < xs.size(); i++) xs[i] = float(int(i % 7) - 3) * 0.3f;
        for (size_t i = 0; i < zs.size(); i++) zs[i] = float(int(i % 5) - 2) * 0.7f;
        for (size_t i = 0; i < ws.size(); i++) ws[i] = float(int(i % 9) - 4) * 0.1f;
        rt->write_f32(x, xs);
        rt->write_f32(z, zs);
        rt->write_f32(w, ws);
        rt->run();
        out.push_back(rt->read_f32(y));
    }
    CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)) == 0);
}

TEST_CASE("fusion: the tiny UNet's training step, fused, trains as unfused, and recompute clones the fused nodes") {
    using namespace train_test;
    const train::StepOptions o = tiny_options(train::Precision::fp32, 2, 1, 1e-3f);
    auto s = train::build_step(o);
    FusionStats st;
    const Graph f = fuse_epilogues(s->g, &st);
    const int lora_modules = int(s->net->modules().size());
    MESSAGE("tiny UNet step: ", s->g.nodes.size(), " nodes, ", count_op(s->g, Op::add), " adds; fused ", st.adds,
            " adds (", st.chained, " reassociated), ", st.nodes_removed, " nodes fewer; ", lora_modules, " LoRA modules");
    CHECK(int(s->g.nodes.size()) - int(f.nodes.size()) == st.nodes_removed);
    CHECK(count_op(s->g, Op::add) - count_op(f, Op::add) == st.adds);
    int forward_adds = 0;  // forward adds the pass removed
    for (int k = 0; k < 2; k++) {
        const Graph& h = k == 0 ? s->g : f;
        int n = 0;
        for (size_t i = 0; i < size_t(h.backward_begin()); i++) n += h.nodes[i].op == Op::add;
        forward_adds = k == 0 ? n : forward_adds - n;
    }
    // Every LoRA join, and the transformer blocks' residual joins after them (reassociated: one
    // per LoRA'd output projection, attention's to_out.0 and the feed-forward's ff.net.2).
    CHECK(forward_adds >= lora_modules + st.chained);
    CHECK(st.chained > 0);
    CHECK(st.adds > forward_adds);  // and gradient sums
    CHECK(norm_grads_with_residual(f) > 0);  // some of them onto the frozen norms' dx
    FusionStats again;
    fuse_epilogues(f, &again);
    CHECK(again.adds == 0);  // one pass fuses everything that qualifies
    CHECK(check_topology(f) == "");
    const Plan fused = make_plan(s->g), plain = make_plan(s->g, unfused());
    CHECK(fused.peak_live_bytes <= plain.peak_live_bytes);
    auto train = [&](Plan p) { return train_two_steps(*s, o, std::move(p)); };
    const std::vector<float> a = train(fused), b = train(plain);
    REQUIRE(a.size() == b.size());
    double worst = 0, largest = 0;
    for (size_t i = 0; i < a.size(); i++) {
        worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
        largest = std::max(largest, std::fabs(double(b[i])));
    }
    CHECK(worst <= 1e-5 * largest);  // the reassociated sums round differently in f32
    // Recompute clones the fused products: blocks and a budget train the same bits as none.
    CHECK(train(make_plan(s->g, {Recompute::blocks})) == a);
    RecomputeSearch search(s->g, {});
    CHECK(search.graph().nodes.size() == f.nodes.size());
    const Plan half = search.plan((search.frontier()[0].total_bytes + search.min_bytes()) / 2);
    CHECK(half.recompute_nodes > 0);
    CHECK(half.fused_adds == st.adds);
    CHECK(train(half) == a);
}
