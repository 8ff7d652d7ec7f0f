// 8-bit SGD op cases (bitsandbytes' SGD8bit, kohya's SGDNesterov8bit): the reference is a plain
// scalar port of bitsandbytes' 1-state block-wise MOMENTUM step with an exhaustive nearest-code
// search, so codes must match exactly.
#include <cmath>
#include <vector>

#include "q8_fixtures.h"

namespace gltest {
namespace {

using namespace gl;

constexpr float kMomentum = 0.9f;

// hyper: lr, (beta1, beta2, eps), weight_decay, step, grad_scale.
std::vector<float> hyper(float step, float wd) { return {1e-2f, 0.0f, 0.0f, 0.0f, wd, step, 0.5f, 0.0f}; }

// One tensor: leaves p, g, buf codes, absmax, then hyper and the optional gstat.
std::vector<std::vector<float>> sgd8bit_reference(const std::vector<std::vector<float>>& in) {
    const auto& h = in[4];
    const float lr = h[kLr], wd = h[kWeightDecay], gs = h[kGradScale];
    const bool first = h[kStep] == 1.0f;
    return q8::one_state_reference(in, [&](float& p, float g, float gmul, float mi) {
        float gi = (g * gs) * gmul;
        if (wd > 0) gi = gi + p * wd;
        const float s = first ? gi : mi * kMomentum + gi;
        p = p - lr * s;
        return s;
    });
}

// gate: 0 none, 1 a multiplier, 2 the non-finite flag.
void build_sgd8bit(CaseBuilder& b, int64_t n, float step, float wd, int gate) {
    b.compute = DType::f32;
    const int64_t blocks = (n + 255) / 256;
    ValueId p = b.c("param", {n});
    ValueId g = b.c("grad", {n}, -0.05f, 0.05f);
    ValueId m = b.c("buf", {n}, 0.0f, 255.0f, DType::u8);
    std::vector<float> md = b.random(n, 0.0f, 255.0f);
    for (float& c : md) c = std::floor(c);
    b.set(m, md);
    ValueId am = b.c("absmax", {blocks}, 0.001f, 0.01f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper(step, wd));
    ValueId gs = q8::gate_leaf(b, gate);
    sgd8bit_step(b.g, {p}, {g}, {m}, {am}, h, kMomentum, gs);
    for (ValueId x : {p, m, am}) b.out(x);
}

void build_sgd8bit_multi(CaseBuilder& b) {
    q8::build_two_tensors(b, "buf", "absmax", hyper(3.0f, 0.01f),
                          [](Graph& g, const std::vector<ValueId>& ps, const std::vector<ValueId>& gs,
                             const std::vector<ValueId>& ms, const std::vector<ValueId>& ams,
                             ValueId h) { sgd8bit_step(g, ps, gs, ms, ams, h, kMomentum); });
}

std::vector<std::vector<float>> sgd8bit_multi_reference(const std::vector<std::vector<float>>& in) {
    return q8::two_tensor_reference(in, sgd8bit_reference);
}

void bad_sgd8bit(Graph& g, DType codes, int64_t blocks, float momentum = kMomentum) {
    ValueId p = g.param("p", DType::f32, {512});
    sgd8bit_step(g, {p}, {g.input("g", DType::f32, {512})}, {g.state("m", codes, {512})},
                 {g.state("am", DType::f32, {blocks})}, g.input("h", DType::f32, {8}), momentum);
}

Register r({
    {"sgd8bit_step", "mid-run, ragged last block, weight decay", [](CaseBuilder& b) { build_sgd8bit(b, 4096 + 300, 7, 0.05f, 0); },
     [](Graph& g) { bad_sgd8bit(g, DType::f32, 2); }, sgd8bit_reference, 1e-6},
    {"sgd8bit_step", "first step: the buffer is the gradient", [](CaseBuilder& b) { build_sgd8bit(b, 4096 + 5, 1, 0.0f, 0); },
     [](Graph& g) { bad_sgd8bit(g, DType::u8, 2, 0.0f); }, sgd8bit_reference, 1e-6},
    {"sgd8bit_step", "two tensors of one group in one node", [](CaseBuilder& b) { build_sgd8bit_multi(b); },
     [](Graph& g) { bad_sgd8bit(g, DType::u8, 3); }, sgd8bit_multi_reference, 1e-6},
    {"sgd8bit_step", "gstat multiplies the gradient", [](CaseBuilder& b) { build_sgd8bit(b, 4096 + 77, 4, 0.0f, 1); },
     [](Graph& g) { bad_sgd8bit(g, DType::u8, 1); }, sgd8bit_reference, 1e-6},
    {"sgd8bit_step", "gstat's non-finite flag skips the step", [](CaseBuilder& b) { build_sgd8bit(b, 4096, 4, 0.01f, 2); },
     [](Graph& g) { bad_sgd8bit(g, DType::u8, 4); }, sgd8bit_reference, 0.0},
});

}  // namespace
}  // namespace gltest
