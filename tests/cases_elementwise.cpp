#include <doctest/doctest.h>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/rng.h"
#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

Register r({
    {"add", "same shape", [](CaseBuilder& b) { b.out(add(b.g, b.x("a", {3, 4}), b.x("b", {3, 4}))); },
     [](Graph& g) { add(g, g.input("a", DType::f32, {3, 4}), g.input("b", DType::f32, {4, 3})); }},
    {"add", "bias over NHWC channels", [](CaseBuilder& b) {
         b.out(add(b.g, b.x("x", {2, 3, 3, 5}), b.x("bias", {5})));
     },
     [](Graph& g) { add(g, g.input("a", DType::f32, {3}), g.input("b", DType::bf16, {3})); }},
    {"add", "both sides broadcast [3,1] + [1,4]", [](CaseBuilder& b) {
         b.out(add(b.g, b.x("a", {3, 1}), b.x("b", {1, 4})));
     },
     [](Graph& g) { add(g, g.input("a", DType::i32, {3}), g.input("b", DType::i32, {3})); }},
    {"sub", "broadcast over batch", [](CaseBuilder& b) {
         b.out(sub(b.g, b.x("a", {2, 3, 4}), b.x("b", {3, 4})));
     },
     [](Graph& g) { sub(g, g.input("a", DType::f32, {2, 3}), g.input("b", DType::f32, {3, 2})); }},
    {"mul", "per-sample scale [B,1,1,1]", [](CaseBuilder& b) {
         b.out(mul(b.g, b.x("x", {2, 2, 3, 4}), b.x("s", {2, 1, 1, 1})));
     },
     [](Graph& g) { mul(g, g.input("a", DType::f32, {2, 3}), g.input("b", DType::f32, {2})); }},
    {"add", "same shape [4,24] (CUDA: 8-element accesses)", [](CaseBuilder& b) {
         b.out(add(b.g, b.x("a", {4, 24}), b.x("b", {4, 24})));
     },
     [](Graph& g) { add(g, g.input("a", DType::f32, {4, 24}), g.input("b", DType::f32, {4, 16})); }},
    {"add", "per-sample channels [2,3,5,16] + [2,1,1,16] (CUDA: 8-element accesses, one broadcast run)",
     [](CaseBuilder& b) { b.out(add(b.g, b.x("h", {2, 3, 5, 16}), b.x("te", {2, 1, 1, 16}))); },
     [](Graph& g) { add(g, g.input("a", DType::f32, {2, 3, 5, 16}), g.input("b", DType::f32, {3, 1, 1, 16})); }},
    {"mul", "broadcast first [1,3,8] * [2,3,8] (CUDA: the operands swapped onto the vector path)",
     [](CaseBuilder& b) { b.out(mul(b.g, b.x("a", {1, 3, 8}), b.x("b", {2, 3, 8}))); },
     [](Graph& g) { mul(g, g.input("a", DType::f32, {2, 3, 8}), g.input("b", DType::f32, {2, 4, 8})); }},
    {"sub", "bias [2,4,8] - [8], and a broadcast first operand [8] - [2,4,8] (CUDA: vector, then general path)",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 4, 8}), c = b.x("c", {8});
         b.out(add(b.g, sub(b.g, x, c), sub(b.g, c, x)));
     },
     [](Graph& g) { sub(g, g.input("a", DType::f32, {2, 4, 8}), g.input("b", DType::f32, {4, 4})); }},
    {"mul", "square (same input twice sums both gradients)", [](CaseBuilder& b) {
         ValueId x = b.x("x", {5, 3});
         b.out(mul(b.g, x, x));
     },
     [](Graph& g) { mul(g, g.input("a", DType::f32, {4}), g.input("b", DType::f16, {4})); }},
    {"scale", "by -0.5", [](CaseBuilder& b) { b.out(scale(b.g, b.x("x", {4, 5}), -0.5f)); },
     [](Graph& g) { scale(g, g.input("ids", DType::i32, {4}), 2.0f); }},
    {"dropout", "p = 0.3, gradient uses the same mask", [](CaseBuilder& b) {
         b.out(dropout(b.g, b.x("x", {6, 7}), 0.3f, 1234));
     },
     [](Graph& g) { dropout(g, g.input("x", DType::f32, {4}), 1.0f, 1); }},
    {"dropout", "mask matches rng.h", [](CaseBuilder& b) {
         b.out(dropout(b.g, b.c("x", {64}, 1.0f, 1.0001f), 0.5f, 99));
     },
     [](Graph& g) { dropout(g, g.input("x", DType::f32, {4}), -0.1f, 1); },
     [](const std::vector<std::vector<float>>& in) {
         std::vector<float> y(in[0].size());
         for (size_t i = 0; i < y.size(); i++) y[i] = dropout_keep(99, i, 0.5f) ? in[0][i] * 2.0f : 0.0f;
         return std::vector<std::vector<float>>{y};
     },
     1e-6},
    {"dropout", "p = 0.25 with a per-step seed input; gradient uses the same mask", [](CaseBuilder& b) {
         b.out(dropout(b.g, b.x("x", {5, 8}), 0.25f, 77, b.ids("step_seed", Shape{}, 1 << 20)));
     },
     // a float seed input
     [](Graph& g) { dropout(g, g.input("x", DType::f32, {4}), 0.5f, 1, g.input("s", DType::f32, {})); }},
    {"dropout", "mask from dropout_step_seed(seed, input), bf16 input", [](CaseBuilder& b) {
         ValueId s = b.ids("step_seed", Shape{1}, 1 << 20);
         b.out(cast(b.g, dropout(b.g, b.c("x", {96}, 1.0f, 1.0001f, DType::bf16), 0.4f, 5, s), DType::f32));
     },
     // a seed input with two elements
     [](Graph& g) { dropout(g, g.input("x", DType::f32, {4}), 0.5f, 1, g.input("s", DType::i32, {2})); },
     [](const std::vector<std::vector<float>>& in) {
         const uint64_t seed = dropout_step_seed(5, int32_t(in[0][0]));
         std::vector<float> y(in[1].size());
         for (size_t i = 0; i < y.size(); i++) y[i] = dropout_keep(seed, i, 0.4f) ? 1.0f / 0.6f : 0.0f;
         return std::vector<std::vector<float>>{y};
     },
     1e-2},
    // ---- accumulate (in place; the case outputs are the updated accumulators) ----
    {"accumulate", "add 0.5 x into acc", [](CaseBuilder& b) {
         b.compute = DType::f32;
         ValueId acc = b.c("acc", {3, 7});
         ValueId ctl = b.c("ctl", {2});
         b.set(ctl, {0.0f, 0.5f});
         accumulate(b.g, acc, b.c("x", {3, 7}), ctl);
         b.out(acc);
     },
     // acc in bf16
     [](Graph& g) {
         accumulate(g, g.state("acc", DType::bf16, {4}), g.input("x", DType::f32, {4}), g.input("c", DType::f32, {2}));
     },
     [](const std::vector<std::vector<float>>& in) {
         std::vector<float> y = in[0];
         for (size_t i = 0; i < y.size(); i++) y[i] += 0.5f * in[2][i];
         return std::vector<std::vector<float>>{y};
     },
     1e-6},
    {"accumulate", "reset ignores a NaN left in acc; bf16 x", [](CaseBuilder& b) {
         b.compute = DType::f32;
         ValueId acc = b.c("acc", {40});
         b.set(acc, std::vector<float>(40, NAN));
         ValueId ctl = b.c("ctl", {2});
         b.set(ctl, {1.0f, 0.25f});
         accumulate(b.g, acc, b.c("x", {5, 8}, -1.0f, 1.0f, DType::bf16), ctl);
         b.out(acc);
     },
     // x with another element count
     [](Graph& g) {
         accumulate(g, g.state("acc", DType::f32, {4}), g.input("x", DType::f32, {5}), g.input("c", DType::f32, {2}));
     },
     [](const std::vector<std::vector<float>>& in) {
         std::vector<float> y(in[2].size());
         for (size_t i = 0; i < y.size(); i++) y[i] = 0.25f * in[2][i];
         return std::vector<std::vector<float>>{y};
     },
     1e-2},  // x was rounded to bf16
});

// The point of the seed input: one built graph, a new mask per step.
TEST_CASE("dropout with a seed input draws a new mask when the input changes and repeats it for the same value") {
    Graph g;
    ValueId x = g.input("x", DType::f32, {4096});
    ValueId seed = g.input("seed", DType::i32, {});
    ValueId y = dropout(g, x, 0.5f, 3, seed);
    g.mark_output(y);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->write_f32(x, std::vector<float>(4096, 1.0f));
    auto run = [&](float s) {
        rt->write_f32(seed, {s});
        rt->run();
        return rt->read_f32(y);
    };
    const auto a = run(1), b = run(2), a2 = run(1);
    CHECK(a == a2);
    size_t differ = 0, kept = 0;
    for (size_t i = 0; i < a.size(); i++) {
        differ += a[i] != b[i];
        kept += a[i] != 0.0f;
    }
    // Independent masks with p = 0.5 differ in about half the elements.
    CHECK(differ > 1600);
    CHECK(differ < 2500);
    CHECK(kept > 1800);
    CHECK(kept < 2300);
}

}  // namespace
}  // namespace gltest
