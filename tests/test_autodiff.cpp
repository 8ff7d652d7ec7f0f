// Autodiff: which values get gradients, how repeated uses add up, where gradients live,
// and what it refuses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "planner_nets.h"

using namespace gl;
using namespace gltest;

namespace {

int count_backward(const Graph& g) {
    int n = 0;
    for (const Node& x : g.nodes) n += x.backward;
    return n;
}

bool has_op(const Graph& g, Op op) {
    for (const Node& n : g.nodes)
        if (n.op == op) return true;
    return false;
}

std::vector<float> leaf_data(const Net& net, ValueId v) {
    for (auto& [id, d] : net.data)
        if (id == v) return d;
    return {};
}

// Runs net on the CPU and returns the gradient of parameter p.
std::vector<float> grad_of(const Net& net, ValueId p) {
    auto rt = make_cpu_runtime(make_plan(net.g));
    rt->poison(0xff);
    for (auto& [v, d] : net.data) rt->write_f32(v, d);
    rt->run();
    return rt->read_f32(net.grads[p]);
}

}  // namespace

TEST_CASE("autodiff: gradients of a parameter used several times are summed") {
    Net net;
    Graph& g = net.g;
    ValueId p = net.leaf(Role::param, "p", {6});
    ValueId a = net.leaf(Role::weight, "a", {6});
    ValueId b = net.leaf(Role::weight, "b", {6});
    // loss = sum(p * a) + sum(p * p * b) + sum(3 p): dloss/dp = a + 2 p b + 3
    net.loss = add(g, add(g, sum(g, mul(g, p, a)), sum(g, mul(g, mul(g, p, p), b))), sum(g, scale(g, p, 3.0f)));
    g.mark_output(net.loss);
    net.grads = backward(g, net.loss);
    REQUIRE(net.grads[p] != kNoValue);
    std::vector<float> got = grad_of(net, p), pv = leaf_data(net, p), av = leaf_data(net, a), bv = leaf_data(net, b);
    for (size_t i = 0; i < got.size(); i++) CHECK(got[i] == doctest::Approx(av[i] + 2 * pv[i] * bv[i] + 3).epsilon(1e-5));
}

TEST_CASE("autodiff: values that lead to no parameter get no gradient and no backward nodes") {
    // The same graph twice: once with a frozen branch computing u, once with u as an input.
    auto build = [](bool branch, ValueId* u_out) {
        Net net;
        Graph& g = net.g;
        ValueId x = net.leaf(Role::input, "x", {3, 4});
        ValueId w = net.leaf(Role::weight, "w", {3, 4});
        ValueId p = net.leaf(Role::param, "p", {3, 4});
        ValueId u = branch ? scale(g, silu(g, mul(g, x, w)), 2.0f) : x;
        *u_out = u;
        net.loss = sum(g, mul(g, u, p));
        g.mark_output(net.loss);
        net.grads = backward(g, net.loss);
        return net;
    };
    ValueId u = kNoValue, u_plain = kNoValue;
    Net with = build(true, &u), without = build(false, &u_plain);
    for (ValueId v = 0; v < with.g.value_count(); v++)
        if (with.g.v(v).role != Role::param && with.grads[v] != kNoValue) {
            // Only the path loss -> mul(u, p) carries gradients; nothing behind u.
            CHECK(v >= u);
        }
    CHECK(with.grads[u] == kNoValue);
    CHECK(with.grads[0] == kNoValue);  // x
    CHECK(with.grads[1] == kNoValue);  // w
    CHECK(with.grads[2] != kNoValue);  // p
    CHECK(count_backward(with.g) == count_backward(without.g));
    CHECK(!has_op(with.g, Op::act_grad));

    // A loss that reaches no parameter: no gradients, no backward pass.
    Net frozen;
    ValueId x = frozen.leaf(Role::input, "x", {5});
    ValueId w = frozen.leaf(Role::weight, "w", {5});
    ValueId loss = sum(frozen.g, mul(frozen.g, x, w));
    const size_t nodes = frozen.g.nodes.size();
    Gradients gr = backward(frozen.g, loss);
    CHECK(frozen.g.nodes.size() == nodes);
    for (ValueId v = 0; v < frozen.g.value_count(); v++) CHECK(gr[v] == kNoValue);
}

TEST_CASE("autodiff: frozen weights get no gradient") {
    for (bool train_w : {false, true}) {
        CAPTURE(train_w);
        Net net;
        Graph& g = net.g;
        ValueId x = net.leaf(Role::input, "x", {1, 4, 4, 3});
        ValueId lora = net.leaf(Role::param, "lora", {3});
        ValueId w = net.leaf(train_w ? Role::param : Role::weight, "conv.w", {5, 3, 3, 3});
        ValueId lw = net.leaf(Role::weight, "linear.w", {2, 5});
        ValueId h = conv2d(g, mul(g, x, lora), w, kNoValue, 1, 1);
        net.differentiate({linear(g, h, lw)});
        CHECK((net.grads[w] != kNoValue) == train_w);
        CHECK(net.grads[lw] == kNoValue);
        CHECK(net.grads[x] == kNoValue);
        CHECK(net.grads[lora] != kNoValue);
        CHECK(has_op(g, Op::conv2d_grad_weight) == train_w);
        for (ValueId v = 0; v < g.value_count(); v++)
            if (g.v(v).category == Category::trainable && g.v(v).role == Role::computed)
                CHECK((v == net.grads[lora] || (train_w && v == net.grads[w])));
    }
}

TEST_CASE("autodiff: the loss must be a float scalar") {
    Graph g;
    ValueId p = g.param("p", DType::f32, {2, 3});
    CHECK_THROWS_AS(backward(g, sum(g, p, 1, false)), gl::Error);           // [2]
    CHECK_THROWS_AS(backward(g, cast(g, sum(g, p), DType::i32)), gl::Error);  // i32 scalar
    CHECK_THROWS_AS(backward(g, p), gl::Error);                               // [2, 3]
    CHECK_THROWS_AS(backward(g, 12345), gl::Error);                           // not a value
    CHECK(count_backward(g) == 0);
    CHECK(!g.in_backward);
    Gradients gr = backward(g, sum(g, p));
    CHECK(gr[p] != kNoValue);
}

TEST_CASE("autodiff: parameter gradients are distinct outputs in the trainable arena") {
    Net net;
    Graph& g = net.g;
    ValueId p1 = net.leaf(Role::param, "p1", {2, 3});
    ValueId p2 = net.leaf(Role::param, "p2", {2, 3});
    ValueId p3 = net.leaf(Role::param, "p3", {3});
    ValueId p4 = net.leaf(Role::param, "p4", {4});
    // p1 and p2 receive the same gradient value; p3's is a broadcast reduction; p4's the seed's expansion.
    net.loss = add(g, sum(g, add(g, add(g, p1, p2), p3)), sum(g, p4));
    g.mark_output(net.loss);
    net.grads = backward(g, net.loss);
    std::vector<ValueId> seen;
    for (ValueId p : {p1, p2, p3, p4}) {
        ValueId gp = net.grads[p];
        REQUIRE(gp != kNoValue);
        const Value& v = g.v(gp);
        CHECK(v.category == Category::trainable);
        CHECK(v.output);
        CHECK(v.base == gp);
        CHECK(v.role == Role::computed);
        CHECK(v.shape() == g.shape(p));
        CHECK(v.dtype == g.dtype(p));
        CHECK(std::find(seen.begin(), seen.end(), gp) == seen.end());
        seen.push_back(gp);
    }
    Plan P = make_plan(g);
    CHECK(check_overlaps(P) == "");
    auto rt = make_cpu_runtime(P);
    rt->poison(0xff);
    for (auto& [v, d] : net.data) rt->write_f32(v, d);
    rt->run();
    CHECK(rt->read_f32(net.grads[p1]) == std::vector<float>(6, 1.0f));
    CHECK(rt->read_f32(net.grads[p2]) == std::vector<float>(6, 1.0f));
    CHECK(rt->read_f32(net.grads[p3]) == std::vector<float>(3, 2.0f));
    CHECK(rt->read_f32(net.grads[p4]) == std::vector<float>(4, 1.0f));
}

TEST_CASE("autodiff: a graph is differentiated once") {
    Graph g;
    ValueId p = g.param("p", DType::f32, {3});
    ValueId loss = sum(g, mul(g, p, p));
    backward(g, loss);
    const size_t nodes = g.nodes.size();
    CHECK_THROWS_AS(backward(g, loss), gl::Error);
    CHECK(g.nodes.size() == nodes);
    CHECK(!g.in_backward);
}
