#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "ggml-lite/core/parallel.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;
using Leaves = std::vector<std::vector<float>>;

ValueId f32(Graph& g, const Shape& s) { return g.input("x", DType::f32, s); }

// Expected mse: mean over samples of w[b] * mean over the sample of (p - t)^2, in double.
std::vector<float> ref_mse(const std::vector<float>& p, const std::vector<float>& t, const std::vector<float>* w, int B) {
    size_t M = p.size() / size_t(B);
    double total = 0;
    for (size_t b = 0; b < size_t(B); b++) {
        double se = 0;
        for (size_t i = b * M; i < (b + 1) * M; i++) se += (double(p[i]) - t[i]) * (double(p[i]) - t[i]);
        total += (w ? double((*w)[b]) : 1.0) * se / double(M);
    }
    return {float(total / B)};
}

Register r({
    // ---- sum ----
    {"sum", "all elements of [2,3,4] -> scalar", [](CaseBuilder& b) { b.out(sum(b.g, b.x("x", {2, 3, 4}))); },
     [](Graph& g) { sum(g, g.input("ids", DType::i32, {3})); }},
    {"sum", "axis 1 of [2,3,4], no keepdim -> [2,4]", [](CaseBuilder& b) { b.out(sum(b.g, b.x("x", {2, 3, 4}), 1, false)); },
     [](Graph& g) { sum(g, f32(g, {2, 3}), 2, false); }},
    {"sum", "axis -1 keepdim of [3,5] -> [3,1]", [](CaseBuilder& b) { b.out(sum(b.g, b.x("x", {3, 5}), -1, true)); },
     [](Graph& g) { sum(g, f32(g, {2, 3}), -3, true); }},
    {"sum", "axis 0 of a vector -> scalar", [](CaseBuilder& b) { b.out(sum(b.g, b.x("x", {7}), 0, false)); },
     [](Graph& g) { sum(g, f32(g, {}), 0, false); }},
    {"sum", "axis 2 of a permuted 4-D view", [](CaseBuilder& b) {
         b.out(sum(b.g, permute(b.g, b.x("x", {2, 3, 4, 5}), {0, 3, 1, 2}), 2, true));
     },
     [](Graph& g) { sum(g, f32(g, {2, 3, 4, 5}), 4, true); }},
    {"sum", "values along each axis", [](CaseBuilder& b) {
         ValueId x = b.c("x", {2, 3}, 0, 1);
         b.set(x, {1, 2, 3, 4, 5, 6});
         b.out(sum(b.g, x));
         b.out(sum(b.g, x, 0, false));
         b.out(sum(b.g, x, 1, true));
     },
     [](Graph& g) { sum(g, g.input("x", DType::u8, {2})); },
     [](const Leaves&) { return Leaves{{21}, {5, 7, 9}, {6, 15}}; }, 0.0},
    // ---- mean ----
    {"mean", "all elements of [4,6] -> scalar", [](CaseBuilder& b) { b.out(mean(b.g, b.x("x", {4, 6}))); },
     [](Graph& g) { mean(g, g.input("ids", DType::i32, {3})); }},
    {"mean", "axis 0 keepdim of [3,4] -> [1,4]", [](CaseBuilder& b) { b.out(mean(b.g, b.x("x", {3, 4}), 0, true)); },
     [](Graph& g) { mean(g, f32(g, {3, 4}), 2, true); }},
    {"mean", "axis 2 of [2,3,4,5] -> [2,3,5]", [](CaseBuilder& b) { b.out(mean(b.g, b.x("x", {2, 3, 4, 5}), 2, false)); },
     [](Graph& g) { mean(g, f32(g, {2}), -2, false); }},
    {"mean", "values, and bf16 input", [](CaseBuilder& b) {
         ValueId x = b.c("x", {2, 4}, 0, 1, DType::bf16);
         b.set(x, {1, 2, 3, 4, 0.5f, 0.25f, -1, 8});
         b.out(cast(b.g, mean(b.g, x), DType::f32));
         b.out(cast(b.g, mean(b.g, x, 1, false), DType::f32));
     },
     [](Graph& g) { mean(g, g.input("x", DType::i8, {2}), 0, false); },
     [](const Leaves&) { return Leaves{{17.75f / 8}, {2.5f, 7.75f / 4}}; }, 1e-2},
    // ---- sum_to ----
    {"sum_to", "[2,3,4,5] -> [3,1,5] (bias-style broadcast back)", [](CaseBuilder& b) {
         b.out(sum_to(b.g, b.x("x", {2, 3, 4, 5}), {3, 1, 5}));
     },
     [](Graph& g) { sum_to(g, f32(g, {2, 3}), {3, 3}); }},
    {"sum_to", "[2,600] -> [1,600] (runs longer than one block)", [](CaseBuilder& b) {
         b.out(sum_to(b.g, b.x("x", {2, 600}), {1, 600}));
     },
     [](Graph& g) { sum_to(g, f32(g, {2, 3}), {2}); }},
    {"sum_to", "[3,4] -> [] scalar, and [2,3,4] -> [4]", [](CaseBuilder& b) {
         b.out(sum_to(b.g, b.x("x", {3, 4}), Shape{}));
         b.out(sum_to(b.g, b.x("y", {2, 3, 4}), {4}));
     },
     [](Graph& g) { sum_to(g, f32(g, {3}), {2, 3}); }},
    {"sum_to", "values", [](CaseBuilder& b) {
         ValueId x = b.c("x", {2, 2, 3}, 0, 1);
         b.set(x, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
         b.out(sum_to(b.g, x, {2, 1, 3}));
         b.out(sum_to(b.g, x, {2, 1}));
     },
     [](Graph& g) { sum_to(g, g.input("x", DType::i32, {2, 3}), {3}); },
     [](const Leaves&) { return Leaves{{5, 7, 9, 17, 19, 21}, {30, 48}}; }, 0.0},
    // ---- mse_loss ----
    {"mse_loss", "no weights, [2,3,4]", [](CaseBuilder& b) {
         b.out(mse_loss(b.g, b.x("pred", {2, 3, 4}), b.x("target", {2, 3, 4})));
     },
     [](Graph& g) { mse_loss(g, f32(g, {2, 3}), g.input("t", DType::f32, {3, 2})); }},
    {"mse_loss", "trainable weights [3] over NHWC [3,2,2,2]", [](CaseBuilder& b) {
         ValueId p = b.x("pred", {3, 2, 2, 2});
         ValueId t = b.x("target", {3, 2, 2, 2});
         b.out(mse_loss(b.g, p, t, b.x("w", {3}, 0.5f, 1.5f)));
     },
     [](Graph& g) { mse_loss(g, f32(g, {3, 2}), g.input("t", DType::f32, {3, 2}), g.input("w", DType::f32, {2})); }},
    {"mse_loss", "constant weights, 2-D", [](CaseBuilder& b) {
         ValueId p = b.x("pred", {2, 5});
         b.out(mse_loss(b.g, p, b.c("target", {2, 5}), b.c("w", {2}, 0.5f, 2.0f)));
     },
     [](Graph& g) { mse_loss(g, f32(g, {}), g.input("t", DType::f32, {})); }},
    {"mse_loss", "values with and without weights", [](CaseBuilder& b) {
         ValueId p = b.c("pred", {3, 4});
         ValueId t = b.c("target", {3, 4});
         ValueId w = b.c("w", {3}, 0, 2);
         b.out(mse_loss(b.g, p, t));
         b.out(mse_loss(b.g, p, t, w));
     },
     [](Graph& g) { mse_loss(g, f32(g, {3, 4}), g.input("t", DType::i32, {3, 4})); },
     [](const Leaves& in) { return Leaves{ref_mse(in[0], in[1], nullptr, 3), ref_mse(in[0], in[1], &in[2], 3)}; },
     1e-6},
});

// Runs `build` once per thread count and returns its output's bytes.
std::vector<float> run_with_threads(int threads, const std::function<ValueId(Graph&)>& build, const std::vector<float>& x) {
    set_cpu_threads(threads);
    Graph g;
    ValueId y = build(g);
    g.mark_output(y);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->write_f32(0, x);
    rt->run();
    return rt->read_f32(y);
}

TEST_CASE("reductions are bitwise identical across thread counts and accumulate in double") {
    const int saved = cpu_threads();
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(size_t(64 * 48 * 40));
    for (auto& e : x) e = u(rng) * 1000.0f;
    std::vector<std::function<ValueId(Graph&)>> builds = {
        [](Graph& g) { return sum(g, g.input("x", DType::f32, {64, 48, 40})); },
        [](Graph& g) { return mean(g, g.input("x", DType::f32, {64, 48, 40}), 1, false); },
        [](Graph& g) { return sum_to(g, g.input("x", DType::f32, {64, 48, 40}), {40}); },
        [](Graph& g) {
            ValueId a = g.input("x", DType::f32, {64, 48, 40});
            return mse_loss(g, a, fill(g, {64, 48, 40}, 0.5f));
        },
    };
    for (auto& build : builds) {
        std::vector<float> one = run_with_threads(1, build, x), many = run_with_threads(7, build, x);
        REQUIRE(one.size() == many.size());
        CHECK(std::memcmp(one.data(), many.data(), one.size() * 4) == 0);
    }
    // A sum whose float running total would drift: 2^20 copies of 0.1.
    std::vector<float> tenth(size_t(1) << 20, 0.1f);
    std::vector<float> s = run_with_threads(3, [](Graph& g) { return sum(g, g.input("x", DType::f32, {1 << 20})); }, tenth);
    CHECK(s[0] == float(double(0.1f) * double(1 << 20)));
    set_cpu_threads(saved);
}

}  // namespace
}  // namespace gltest
