#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/planner.h"
#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;
using Leaves = std::vector<std::vector<float>>;

// Straightforward double-precision definitions the kernels are checked against.
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_act(Act k, double x) {
    switch (k) {
        case Act::silu: return x * ref_sigmoid(x);
        case Act::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        case Act::gelu_tanh: {
            const double pi = 3.14159265358979323846;
            return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
        }
        case Act::quick_gelu: return x * ref_sigmoid(1.702 * x);
    }
    return 0;
}
std::function<Leaves(const Leaves&)> ref_of(Act k) {
    return [k](const Leaves& in) {
        std::vector<float> y;
        for (float x : in[0]) y.push_back(float(ref_act(k, x)));
        return Leaves{y};
    };
}

ValueId ints(Graph& g) { return g.input("ids", DType::i32, {2, 3}); }

Register r({
    {"silu", "[2,3,4] over [-4, 4)", [](CaseBuilder& b) { b.out(silu(b.g, b.x("x", {2, 3, 4}, -4, 4))); },
     [](Graph& g) { silu(g, ints(g)); }},
    {"silu", "in place over a dying input; its gradient in place over gy", [](CaseBuilder& b) {
         ValueId x = b.x("x", {3, 5}, -3, 3);
         b.out(scale(b.g, silu(b.g, scale(b.g, x, 2.0f)), 0.5f));
     },
     [](Graph& g) {
         act_grad(g, g.input("x", DType::f32, {2, 3}), g.input("gy", DType::f32, {3, 2}), Act::silu);
     }},
    {"silu", "values match x * sigmoid(x), including saturated tails", [](CaseBuilder& b) {
         ValueId x = b.c("x", {8}, -1, 1);
         b.set(x, {-100.0f, -8.0f, -1.0f, -0.25f, 0.0f, 0.5f, 3.0f, 100.0f});
         b.out(silu(b.g, x));
     },
     [](Graph& g) { silu(g, g.input("u", DType::u8, {4})); }, ref_of(Act::silu), 1e-6},
    {"gelu", "erf form, [3,5] over [-3, 3)", [](CaseBuilder& b) { b.out(gelu(b.g, b.x("x", {3, 5}, -3, 3))); },
     [](Graph& g) { gelu(g, ints(g)); }},
    {"gelu", "tanh approximation, [4,4] over [-3, 3)", [](CaseBuilder& b) {
         b.out(gelu(b.g, b.x("x", {4, 4}, -3, 3), true));
     },
     [](Graph& g) { gelu(g, ints(g), true); }},
    {"gelu", "erf form values on bf16 input", [](CaseBuilder& b) {
         ValueId x = b.c("x", {6}, -1, 1, DType::bf16);
         b.set(x, {-3.0f, -1.0f, -0.5f, 0.0f, 1.0f, 2.5f});
         b.out(cast(b.g, gelu(b.g, x), DType::f32));
     },
     [](Graph& g) {
         Params p;
         p.i[0] = 7;  // neither erf nor tanh
         g.apply1(Op::gelu, {g.input("x", DType::f32, {2})}, p);
     },
     ref_of(Act::gelu_erf), 1e-2},
    {"gelu", "tanh approximation values", [](CaseBuilder& b) { b.out(gelu(b.g, b.c("x", {16}, -4, 4), true)); },
     [](Graph& g) { gelu(g, g.input("x", DType::i8, {2})); }, ref_of(Act::gelu_tanh), 1e-5},
    {"quick_gelu", "[2,8] over [-4, 4)", [](CaseBuilder& b) { b.out(quick_gelu(b.g, b.x("x", {2, 8}, -4, 4))); },
     [](Graph& g) { quick_gelu(g, ints(g)); }},
    {"quick_gelu", "values match x * sigmoid(1.702 x)", [](CaseBuilder& b) {
         b.out(quick_gelu(b.g, b.c("x", {16}, -5, 5)));
     },
     [](Graph& g) {
         ValueId x = g.input("x", DType::f32, {4});
         act_grad(g, x, x, Act(9));
     },
     ref_of(Act::quick_gelu), 1e-5},
    {"geglu", "[2,3,8] -> [2,3,4]", [](CaseBuilder& b) { b.out(geglu(b.g, b.x("x", {2, 3, 8}, -3, 3))); },
     [](Graph& g) { geglu(g, g.input("x", DType::f32, {2, 5})); }},
    {"geglu", "F = 16 over [3,2,32] (CUDA's 8-element vector path, forward and gradient)", [](CaseBuilder& b) {
         b.out(geglu(b.g, b.x("x", {3, 2, 32}, -3, 3)));
     },
     [](Graph& g) { geglu(g, g.input("x", DType::f32, {3})); }},
    {"geglu", "gradient in place over the projection output", [](CaseBuilder& b) {
         ValueId x = b.x("x", {4, 6}, -2, 2);
         b.out(geglu(b.g, scale(b.g, x, 1.5f)));
     },
     [](Graph& g) { geglu(g, g.input("x", DType::f32, {})); }},
    {"geglu", "values: first half times gelu_erf of the second half", [](CaseBuilder& b) {
         b.out(geglu(b.g, b.c("x", {3, 10}, -3, 3)));
     },
     [](Graph& g) { geglu(g, g.input("x", DType::i32, {2, 4})); },
     [](const Leaves& in) {
         std::vector<float> y;
         for (int r = 0; r < 3; r++)
             for (int j = 0; j < 5; j++) y.push_back(float(in[0][size_t(r * 10 + j)] * ref_act(Act::gelu_erf, in[0][size_t(r * 10 + 5 + j)])));
         return Leaves{y};
     },
     1e-5},
});

// The in-place cases above only test aliasing if the planner really places those outputs
// over their inputs; this pins that down. With a backward pass silu's input is kept for
// act_grad, so silu itself runs in place only in forward-only plans (the finite-difference runs).
std::set<Op> planned_inplace(const Graph& g) {
    Plan plan = make_plan(g);
    CHECK(check_overlaps(plan).empty());
    std::set<Op> ops;
    for (const Node& n : plan.graph.nodes)
        if (plan.inplace_of[size_t(n.out[0])] != kNoValue) ops.insert(n.op);
    return ops;
}

TEST_CASE("activations and their gradients are planned in place over dying inputs") {
    Graph g;
    ValueId x = g.param("x", DType::f32, {4, 6});
    ValueId y = geglu(g, silu(g, scale(g, x, 2.0f)));
    ValueId loss = sum(g, mul(g, y, geglu(g, scale(g, x, 1.5f))));
    CHECK(planned_inplace(g).count(Op::silu));
    backward(g, loss);
    std::set<Op> ops = planned_inplace(g);
    CHECK(ops.count(Op::act_grad));
    CHECK(ops.count(Op::geglu_grad));
}

}  // namespace
}  // namespace gltest
