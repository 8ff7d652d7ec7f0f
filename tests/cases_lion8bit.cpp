// 8-bit Lion op cases: the reference is a plain scalar port of bitsandbytes' 1-state block-wise LION
// step with an exhaustive nearest-code search, so codes must match exactly.
#include <cmath>
#include <vector>

#include "q8_fixtures.h"

namespace gltest {
namespace {

using namespace gl;

// hyper: lr, beta1, beta2, (eps), weight_decay, step, grad_scale.
const std::vector<float> kHyper = {1e-3f, 0.9f, 0.99f, 0.0f, 0.1f, 7.0f, 0.5f, 0.0f};

// One tensor: leaves p, g, m codes, absmax, then hyper and the optional gstat.
std::vector<std::vector<float>> lion8bit_reference(const std::vector<std::vector<float>>& in) {
    const auto& h = in[4];
    const float lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], gs = h[6];
    return q8::one_state_reference(in, [&](float& p, float g, float gmul, float mi) {
        const float gi = (g * gs) * gmul;
        const float c = mi * b1 + (1.0f - b1) * gi;
        p = p * (1.0f - lr * wd) - lr * (c > 0 ? 1.0f : c < 0 ? -1.0f : 0.0f);
        return mi * b2 + (1.0f - b2) * gi;
    });
}

// A ragged last block; block 0 holds small negative moments whose nearest code is zero (the sign
// fix moves them to the smallest negative code).
void build_lion8bit(CaseBuilder& b, int64_t n, int gate) {
    b.compute = DType::f32;
    const int64_t blocks = (n + 255) / 256;
    const int zero = adam8bit_quantize(adam8bit_qmap(true), 0.0f);
    ValueId p = b.c("param", {n});
    ValueId g = b.c("grad", {n}, -0.05f, 0.05f);
    ValueId m = b.c("m", {n}, 0.0f, 255.0f, DType::u8);
    std::vector<float> gd = b.random(n, -0.05f, 0.05f), md = b.random(n, 0.0f, 255.0f);
    for (float& c : md) c = std::floor(c);
    for (int i = 1; i < 12; i++) gd[size_t(i)] = -1e-7f, md[size_t(i)] = float(zero);
    b.set(g, gd);
    b.set(m, md);
    ValueId am = b.c("absmax_m", {blocks}, 0.001f, 0.01f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, kHyper);
    ValueId gs = q8::gate_leaf(b, gate);
    lion8bit_step(b.g, {p}, {g}, {m}, {am}, h, gs);
    for (ValueId x : {p, m, am}) b.out(x);
}

// Two tensors of one group in one node, each checked as the single-tensor reference sees it.
void build_lion8bit_multi(CaseBuilder& b) {
    q8::build_two_tensors(b, "m", "absmax_m", kHyper,
                          [](Graph& g, const std::vector<ValueId>& ps, const std::vector<ValueId>& gs,
                             const std::vector<ValueId>& ms, const std::vector<ValueId>& ams,
                             ValueId h) { lion8bit_step(g, ps, gs, ms, ams, h); });
}

std::vector<std::vector<float>> lion8bit_multi_reference(const std::vector<std::vector<float>>& in) {
    return q8::two_tensor_reference(in, lion8bit_reference);
}

void bad_lion8bit(Graph& g, DType codes, int64_t blocks) {
    ValueId p = g.param("p", DType::f32, {512});
    lion8bit_step(g, {p}, {g.input("g", DType::f32, {512})}, {g.state("m", codes, {512})},
                  {g.state("am", DType::f32, {blocks})}, g.input("h", DType::f32, {8}));
}

Register r({
    {"lion8bit_step", "ragged last block, small negative moments keep their sign",
     [](CaseBuilder& b) { build_lion8bit(b, 4096 + 300, 0); }, [](Graph& g) { bad_lion8bit(g, DType::f32, 2); },
     lion8bit_reference, 1e-6},
    {"lion8bit_step", "two tensors of one group in one node", [](CaseBuilder& b) { build_lion8bit_multi(b); },
     [](Graph& g) { bad_lion8bit(g, DType::u8, 3); }, lion8bit_multi_reference, 1e-6},
    {"lion8bit_step", "gstat multiplies the gradient", [](CaseBuilder& b) { build_lion8bit(b, 4096 + 77, 1); },
     [](Graph& g) { bad_lion8bit(g, DType::u8, 1); }, lion8bit_reference, 1e-6},
    {"lion8bit_step", "gstat's non-finite flag skips the step", [](CaseBuilder& b) { build_lion8bit(b, 4096, 2); },
     [](Graph& g) { bad_lion8bit(g, DType::u8, 4); }, lion8bit_reference, 0.0},
});

}  // namespace
}  // namespace gltest
