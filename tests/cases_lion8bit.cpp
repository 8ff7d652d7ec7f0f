// 8-bit Lion op cases: the reference is a plain scalar port of bitsandbytes' 1-state block-wise LION
// step with an exhaustive nearest-code search, so codes must match exactly.
#include <algorithm>
#include <cmath>
#include <vector>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

// hyper: lr, beta1, beta2, (eps), weight_decay, step, grad_scale.
const std::vector<float> kHyper = {1e-3f, 0.9f, 0.99f, 0.0f, 0.1f, 7.0f, 0.5f, 0.0f};

// One tensor: leaves p, g, m codes, absmax, then hyper and the optional gstat.
std::vector<std::vector<float>> lion8bit_reference(const std::vector<std::vector<float>>& in) {
    std::vector<float> p = in[0], cm = in[2], am = in[3];
    const auto& g = in[1];
    const auto& h = in[4];
    const bool has_gstat = in.size() > 5 && in[5].size() == size_t(kGstatSize);
    if (has_gstat && in[5][kGsNonfinite] != 0.0f) return {p, cm, am};
    const float gmul = has_gstat ? in[5][kGsMul] : 1.0f;
    const float* qs = adam8bit_qmap(true);
    const float lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], gs = h[6];
    for (size_t b0 = 0; b0 < p.size(); b0 += 256) {
        const size_t b = b0 / 256, e = std::min(p.size(), b0 + 256);
        std::vector<float> m(e - b0);
        float mx = 0;
        for (size_t i = b0; i < e; i++) {
            const float gi = (g[i] * gs) * gmul, mi = qs[int(cm[i])] * am[b];
            const float c = mi * b1 + (1.0f - b1) * gi;
            p[i] = p[i] * (1.0f - lr * wd) - lr * (c > 0 ? 1.0f : c < 0 ? -1.0f : 0.0f);
            m[i - b0] = mi * b2 + (1.0f - b2) * gi;
            mx = std::max(mx, std::fabs(m[i - b0]));
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
    ValueId gs = kNoValue;
    if (gate > 0) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.25f, gate == 2 ? 1.0f : 0.0f, 3.0f, 4.0f});
    }
    lion8bit_step(b.g, {p}, {g}, {m}, {am}, h, gs);
    for (ValueId x : {p, m, am}) b.out(x);
}

// Two tensors of one group in one node, each checked as the single-tensor reference sees it.
void build_lion8bit_multi(CaseBuilder& b) {
    b.compute = DType::f32;
    std::vector<ValueId> ps, gs, ms, ams;
    for (int64_t n : {4096 + 300, 4096}) {
        ps.push_back(b.c("param", {n}));
        gs.push_back(b.c("grad", {n}, -0.05f, 0.05f));
        ms.push_back(b.c("m", {n}, 0.0f, 255.0f, DType::u8));
        ams.push_back(b.c("absmax_m", {(n + 255) / 256}, 0.001f, 0.01f));
    }
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, kHyper);
    lion8bit_step(b.g, ps, gs, ms, ams, h);
    for (size_t k = 0; k < ps.size(); k++)
        for (ValueId x : {ps[k], ms[k], ams[k]}) b.out(x);
}

std::vector<std::vector<float>> lion8bit_multi_reference(const std::vector<std::vector<float>>& in) {
    std::vector<std::vector<float>> out;
    for (size_t k = 0; k < 2; k++) {
        std::vector<std::vector<float>> one(in.begin() + long(4 * k), in.begin() + long(4 * k + 4));
        one.push_back(in[8]);
        for (auto& t : lion8bit_reference(one)) out.push_back(std::move(t));
    }
    return out;
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
