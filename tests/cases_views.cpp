#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

Register r({
    {"reshape", "[2,3,4] -> [6,4] then scaled", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 4});
         b.out(scale(b.g, reshape(b.g, x, {6, 4}), 2.0f));
     },
     [](Graph& g) { reshape(g, g.input("x", DType::f32, {2, 3}), {4, 2}); }},
    {"reshape", "of a permuted (non-contiguous) value copies first", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 4});
         b.out(reshape(b.g, permute(b.g, x, {2, 0, 1}), {4, 6}));
     },
     [](Graph& g) { reshape(g, g.input("x", DType::f32, {5}), {2, 3}); }},
    {"permute", "NHWC -> NCHW", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 4, 5});
         b.out(contiguous(b.g, permute(b.g, x, {0, 3, 1, 2})));
     },
     [](Graph& g) { permute(g, g.input("x", DType::f32, {2, 3}), {0, 0}); }},
    {"slice", "middle channels of NHWC", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 3, 6});
         b.out(slice(b.g, x, 3, 2, 3));
     },
     [](Graph& g) { slice(g, g.input("x", DType::f32, {2, 3}), 1, 2, 2); }},
    {"slice", "leading rows", [](CaseBuilder& b) {
         ValueId x = b.x("x", {5, 4});
         b.out(slice(b.g, x, 0, 0, 2));
     },
     [](Graph& g) { slice(g, g.input("x", DType::f32, {2, 3}), 4, 0, 1); }},
    {"expand", "[3,1] -> [2,3,4]", [](CaseBuilder& b) {
         ValueId x = b.x("x", {3, 1});
         b.out(expand(b.g, x, {2, 3, 4}));
     },
     [](Graph& g) { expand(g, g.input("x", DType::f32, {3, 2}), {3, 4}); }},
    {"contiguous", "copy of a transposed view", [](CaseBuilder& b) {
         ValueId x = b.x("x", {3, 5});
         b.out(contiguous(b.g, permute(b.g, x, {1, 0})));
     },
     [](Graph& g) { contiguous(g, 99); }},
    {"concat", "channels of two NHWC maps (UNet skip)", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 3, 4});
         ValueId y = b.x("y", {2, 3, 3, 2});
         b.out(concat(b.g, {x, y}, -1));
     },
     [](Graph& g) {
         concat(g, {g.input("a", DType::f32, {2, 3}), g.input("b", DType::f32, {3, 3})}, 1);
     }},
    {"concat", "three inputs along axis 0", [](CaseBuilder& b) {
         ValueId x = b.x("x", {1, 4});
         ValueId y = b.x("y", {2, 4});
         ValueId z = b.x("z", {3, 4});
         b.out(concat(b.g, {x, y, z}, 0));
     },
     [](Graph& g) {
         concat(g, {g.input("a", DType::f32, {2, 3}), g.input("b", DType::bf16, {2, 3})}, 0);
     }},
    {"fill", "constant", [](CaseBuilder& b) { b.out(fill(b.g, {2, 3}, 1.5f)); },
     [](Graph& g) { fill(g, {2, 3}, 0.0f, DType(17)); },
     [](const std::vector<std::vector<float>>&) { return std::vector<std::vector<float>>{std::vector<float>(6, 1.5f)}; },
     0.0},
    // On points where x and x +- eps are exact in bf16 the round trip is the identity, so
    // finite differences see its true slope; the analytic gradient passes through bf16 on its
    // way back (gradients take their value's dtype), hence bf16's half-ulp as the tolerance.
    {"cast", "f32 -> bf16 -> f32 keeps gradients", [](CaseBuilder& b) {
         ValueId x = b.x("x", {4, 4});
         std::vector<float> v(16);
         for (size_t i = 0; i < v.size(); i++) v[i] = 0.25f * float(int(i) - 8);
         b.set(x, v);
         b.out(cast(b.g, cast(b.g, x, DType::bf16), DType::f32));
     },
     [](Graph& g) { cast(g, g.input("x", DType::f32, {2}), DType(42)); }, nullptr, 4e-3, 0.25f},
    {"cast", "f32 -> f16 rounds to nearest even", [](CaseBuilder& b) {
         ValueId x = b.c("x", {4}, 0, 1);
         b.set(x, {1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f, 65520.0f, 1e-8f});
         b.out(cast(b.g, x, DType::f16));
     },
     [](Graph& g) { cast(g, g.input("x", DType::f32, {2}), DType(-1)); },
     [](const std::vector<std::vector<float>>&) {
         float inf = std::numeric_limits<float>::infinity();
         return std::vector<std::vector<float>>{{1.0f, 1.0f + 4.0f / 2048.0f, inf, 0.0f}};
     },
     0.0},
    {"cast_multi", "three masters to bf16 and back in one node, gradients through both", [](CaseBuilder& b) {
         std::vector<ValueId> xs;
         for (int k = 0; k < 3; k++) {
             const Shape s = k == 0 ? Shape{5, 3} : k == 1 ? Shape{7} : Shape{2, 2, 3};
             ValueId x = b.x("x" + std::to_string(k), s);
             std::vector<float> v(size_t(s.numel()));
             for (size_t i = 0; i < v.size(); i++) v[i] = 0.25f * float(int(i) - 4) + 0.5f * float(k);
             b.set(x, v);
             xs.push_back(x);
         }
         for (ValueId y : cast_multi(b.g, cast_multi(b.g, xs, DType::bf16), DType::f32)) b.out(y);
     },
     [](Graph& g) { cast_multi(g, {g.input("a", DType::f32, {2}), g.input("b", DType::bf16, {2})}, DType::f16); },
     nullptr, 4e-3, 0.25f},
    {"cast_multi", "rounds each tensor to nearest even as cast does", [](CaseBuilder& b) {
         ValueId x = b.c("x", {4}, 0, 1), y = b.c("y", {2}, 0, 1);
         b.set(x, {1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f, 3.0e38f, -1.5f});
         b.set(y, {0.1f, -0.0f});
         for (ValueId v : cast_multi(b.g, {x, y}, DType::bf16)) b.out(v);
     },
     [](Graph& g) { cast_multi(g, {}, DType::bf16); },
     [](const std::vector<std::vector<float>>& in) {
         std::vector<std::vector<float>> r;
         for (const auto& t : {in[0], in[1]}) {
             std::vector<float> o;
             for (float v : t) o.push_back(bf16_to_f32(f32_to_bf16(v)));
             r.push_back(o);
         }
         return r;
     },
     0.0},
});

}  // namespace
}  // namespace gltest
