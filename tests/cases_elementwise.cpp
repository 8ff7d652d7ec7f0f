#include "op_cases.h"
#include "ggml-lite/ops/rng.h"

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
});

}  // namespace
}  // namespace gltest
