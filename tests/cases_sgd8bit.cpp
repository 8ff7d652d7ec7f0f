// 8-bit SGD op cases (bitsandbytes' SGD8bit, kohya's SGDNesterov8bit): the reference is a plain
// scalar port of bitsandbytes' 1-state block-wise MOMENTUM step with an exhaustive nearest-code
// search, so codes must match exactly.
#include <algorithm>
#include <cmath>
#include <vector>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

constexpr float kMomentum = 0.9f;

// hyper: lr, (beta1, beta2, eps), weight_decay, step, grad_scale.
std::vector<float> hyper(float step, float wd) { return {1e-2f, 0.0f, 0.0f, 0.0f, wd, step, 0.5f, 0.0f}; }

// One tensor: leaves p, g, buf codes, absmax, then hyper and the optional gstat.
std::vector<std::vector<float>> sgd8bit_reference(const std::vector<std::vector<float>>& in) {
    std::vector<float> p = in[0], cm = in[2], am = in[3];
    const auto& g = in[1];
    const auto& h = in[4];
    const bool has_gstat = in.size() > 5 && in[5].size() == size_t(kGstatSize);
    if (has_gstat && in[5][kGsNonfinite] != 0.0f) return {p, cm, am};
    const float gmul = has_gstat ? in[5][kGsMul] : 1.0f;
    const float* qs = adam8bit_qmap(true);
    const float lr = h[kLr], wd = h[kWeightDecay], gs = h[kGradScale];
    const bool first = h[kStep] == 1.0f;
    for (size_t b0 = 0; b0 < p.size(); b0 += 256) {
        const size_t b = b0 / 256, e = std::min(p.size(), b0 + 256);
        std::vector<float> m(e - b0);
        float mx = 0;
        for (size_t i = b0; i < e; i++) {
            float gi = (g[i] * gs) * gmul;
            if (wd > 0) gi = gi + p[i] * wd;
            const float s = first ? gi : (qs[int(cm[i])] * am[b]) * kMomentum + gi;
            p[i] = p[i] - lr * s;
            m[i - b0] = s;
            mx = std::max(mx, std::fabs(s));
        }
        for (size_t i = b0; i < e; i++) {
            const float mi = m[i - b0], r = mx > 0 ? 1.0f / mx : 0.0f;
            const float x = !(mx > 0) ? 0.0f : std::isinf(r) ? mi / mx : mi * r;
            int best = 0;
            for (int k = 1; k < 256; k++)
                if (std::fabs(x - qs[k]) < std::fabs(x - qs[best])) best = k;
            if (std::signbit(qs[best]) != std::signbit(mi)) best += mi > 0 ? 1 : -1;  // bitsandbytes keeps the sign
            cm[i] = float(best);
        }
        am[b] = mx;
    }
    return {p, cm, am};
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
    ValueId gs = kNoValue;
    if (gate > 0) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.25f, gate == 2 ? 1.0f : 0.0f, 3.0f, 4.0f});
    }
    sgd8bit_step(b.g, {p}, {g}, {m}, {am}, h, kMomentum, gs);
    for (ValueId x : {p, m, am}) b.out(x);
}

void build_sgd8bit_multi(CaseBuilder& b) {
    b.compute = DType::f32;
    std::vector<ValueId> ps, gs, ms, ams;
    for (int64_t n : {4096 + 300, 4096}) {
        ps.push_back(b.c("param", {n}));
        gs.push_back(b.c("grad", {n}, -0.05f, 0.05f));
        ms.push_back(b.c("buf", {n}, 0.0f, 255.0f, DType::u8));
        ams.push_back(b.c("absmax", {(n + 255) / 256}, 0.001f, 0.01f));
    }
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper(3.0f, 0.01f));
    sgd8bit_step(b.g, ps, gs, ms, ams, h, kMomentum);
    for (size_t k = 0; k < ps.size(); k++)
        for (ValueId x : {ps[k], ms[k], ams[k]}) b.out(x);
}

std::vector<std::vector<float>> sgd8bit_multi_reference(const std::vector<std::vector<float>>& in) {
    std::vector<std::vector<float>> out;
    for (size_t k = 0; k < 2; k++) {
        std::vector<std::vector<float>> one(in.begin() + long(4 * k), in.begin() + long(4 * k + 4));
        one.push_back(in[8]);
        for (auto& t : sgd8bit_reference(one)) out.push_back(std::move(t));
    }
    return out;
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
