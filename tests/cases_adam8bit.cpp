// 8-bit AdamW op cases: the reference is a plain scalar port with an exhaustive nearest-code search.
#include <algorithm>
#include <cmath>
#include <vector>

#include "q8_fixtures.h"

namespace gltest {
namespace {

using namespace gl;

std::vector<float> hyper_values(float step) { return {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, step, 0.5f, 0.0f}; }

// Block-wise 8-bit AdamW, one step, written as plainly as possible.
std::vector<std::vector<float>> adamw8bit_reference(const std::vector<std::vector<float>>& in) {
    std::vector<float> p = in[0], cm = in[2], cv = in[3], am = in[4], av = in[5];
    const auto& g = in[1];
    const auto& h = in[6];
    const float* qs = adam8bit_qmap(true);
    const float* qu = adam8bit_qmap(false);
    float lr = h[0], b1 = h[1], b2 = h[2], eps = h[3], wd = h[4], gs = h[6];
    // optional gstat (multiplier, non-finite flag): a set flag leaves everything as it was
    // (the harness appends its projection leaves after the case's own)
    const bool has_gstat = in.size() > 7 && in[7].size() == size_t(kGstatSize);
    const float gmul = has_gstat ? in[7][kGsMul] : 1.0f;
    if (has_gstat && in[7][kGsNonfinite] != 0.0f) return {p, cm, cv, am, av};
    double t = h[5];
    float corr2 = float(std::sqrt(1.0 - std::pow(double(b2), t)));
    float step = float(-double(lr) * corr2 / (1.0 - std::pow(double(b1), t)));
    size_t n = p.size();
    for (size_t b0 = 0; b0 < n; b0 += 256) {
        size_t b = b0 / 256, e = std::min(n, b0 + 256);
        std::vector<float> m(e - b0), v(e - b0);
        std::vector<bool> ok(e - b0);
        float nm = 0, nv = 0;
        for (size_t i = b0; i < e; i++) {
            float gi = (g[i] * gs) * gmul;
            float mi = qs[int(cm[i])] * am[b], vi = qu[int(cv[i])] * av[b];
            ok[i - b0] = std::isfinite(gi);
            if (ok[i - b0]) {
                vi = b2 * vi + (1.0f - b2) * (gi * gi);
                mi = b1 * mi + (1.0f - b1) * gi;
            }
            m[i - b0] = mi;
            v[i - b0] = vi;
            nm = std::max(nm, std::fabs(mi));
            nv = std::max(nv, vi);
        }
        for (size_t i = b0; i < e; i++) {
            float mi = m[i - b0], vi = v[i - b0];
            if (ok[i - b0]) p[i] = (p[i] + step * (mi / (std::sqrt(vi) + corr2 * eps))) * (1.0f - lr * wd);
            // nearest code by exhaustive search (ties to the lower index)
            auto nearest = [](const float* q, float x) {
                int best = 0;
                for (int k = 1; k < 256; k++)
                    if (std::fabs(x - q[k]) < std::fabs(x - q[best])) best = k;
                return best;
            };
            // scaled by the reciprocal of the new absmax (divided when that reciprocal overflows)
            auto scaled = [](float x, float mx) {
                if (!(mx > 0)) return 0.0f;
                float r = 1.0f / mx;
                return std::isinf(r) ? x / mx : x * r;
            };
            cm[i] = float(nearest(qs, scaled(mi, nm)));
            cv[i] = float(nearest(qu, scaled(vi, nv)));
        }
        am[b] = nm;
        av[b] = nv;
    }
    return {p, cm, cv, am, av};
}

// gate: 0 no gstat, 1 gstat scaling the gradient, 2 gstat with its non-finite flag set.
void build_adamw8bit(CaseBuilder& b, int64_t n, bool with_nan, int gate = 0) {
    b.compute = DType::f32;
    int64_t blocks = (n + 255) / 256;
    ValueId p = b.c("param", {n});
    ValueId g = b.c("grad", {n}, -0.05f, 0.05f);
    ValueId m = b.c("m", {n}, 0.0f, 255.0f, DType::u8);
    ValueId v = b.c("v", {n}, 0.0f, 255.0f, DType::u8);
    ValueId am = b.c("absmax_m", {blocks}, 0.001f, 0.01f);
    ValueId av = b.c("absmax_v", {blocks}, 1e-6f, 1e-5f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper_values(7.0f));
    if (with_nan) {
        std::vector<float> gd = b.random(n, -0.05f, 0.05f);
        gd[3] = NAN;
        gd[300] = INFINITY;
        b.set(g, gd);
    }
    ValueId gs = q8::gate_leaf(b, gate);
    adamw8bit_step(b.g, p, g, m, v, am, av, h, gs);
    for (ValueId x : {p, m, v, am, av}) b.out(x);
}

// Two tensors of one group in one node (17 and 16 blocks), leaves tensor by tensor, then hyper;
// each checked as the single-tensor reference sees it.
void build_adamw8bit_multi(CaseBuilder& b) {
    b.compute = DType::f32;
    std::vector<ValueId> ps, gs, ms, vs, ams, avs;
    for (int64_t n : {4096 + 300, 4096}) {
        const int64_t blocks = (n + 255) / 256;
        ps.push_back(b.c("param", {n}));
        gs.push_back(b.c("grad", {n}, -0.05f, 0.05f));
        ms.push_back(b.c("m", {n}, 0.0f, 255.0f, DType::u8));
        vs.push_back(b.c("v", {n}, 0.0f, 255.0f, DType::u8));
        ams.push_back(b.c("absmax_m", {blocks}, 0.001f, 0.01f));
        avs.push_back(b.c("absmax_v", {blocks}, 1e-6f, 1e-5f));
    }
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper_values(7.0f));
    adamw8bit_step(b.g, ps, gs, ms, vs, ams, avs, h);
    for (size_t k = 0; k < ps.size(); k++)
        for (ValueId x : {ps[k], ms[k], vs[k], ams[k], avs[k]}) b.out(x);
}

std::vector<std::vector<float>> adamw8bit_multi_reference(const std::vector<std::vector<float>>& in) {
    std::vector<std::vector<float>> out;
    for (size_t k = 0; k < 2; k++) {
        std::vector<std::vector<float>> one(in.begin() + long(6 * k), in.begin() + long(6 * k + 6));
        one.push_back(in[12]);
        for (auto& t : adamw8bit_reference(one)) out.push_back(std::move(t));
    }
    return out;
}

Register r({
    {"adamw8bit_step", "two tensors of one group in one node, each with its own blocks",
     [](CaseBuilder& b) { build_adamw8bit_multi(b); },
     [](Graph& g) {
         const ValueId p = g.param("p", DType::f32, {512}), q = g.param("q", DType::f32, {256});
         adamw8bit_step(g, {p, q}, {g.input("g", DType::f32, {512}), g.input("gq", DType::f32, {256})},
                        {g.state("m", DType::u8, {512}), g.state("mq", DType::u8, {256})},
                        {g.state("v", DType::u8, {512}), g.state("vq", DType::u8, {256})},
                        {g.state("am", DType::f32, {2}), g.state("amq", DType::f32, {2})},
                        {g.state("av", DType::f32, {2}), g.state("avq", DType::f32, {1})}, g.input("h", DType::f32, {8}));
     },
     adamw8bit_multi_reference, 1e-6},
    {"adamw8bit_step", "ragged last block, NaN/Inf gradients skipped",
     [](CaseBuilder& b) { build_adamw8bit(b, 4096 + 300, true); },
     [](Graph& g) {
         ValueId p = g.param("p", DType::f32, {512});
         adamw8bit_step(g, p, g.input("g", DType::f32, {512}), g.state("m", DType::u8, {512}), g.state("v", DType::u8, {512}),
                        g.state("am", DType::f32, {1}), g.state("av", DType::f32, {2}), g.input("h", DType::f32, {8}));
     },
     adamw8bit_reference, 1e-6},
    {"adamw8bit_step", "gstat multiplies the gradient",
     [](CaseBuilder& b) { build_adamw8bit(b, 4096 + 77, false, 1); },
     [](Graph& g) {
         ValueId p = g.param("p", DType::f32, {512});
         adamw8bit_step(g, p, g.input("g", DType::f32, {512}), g.state("m", DType::u8, {512}), g.state("v", DType::u8, {512}),
                        g.state("am", DType::f32, {2}), g.state("av", DType::f32, {2}), g.input("h", DType::f32, {8}),
                        g.input("gstat", DType::f32, {3}));
     },
     adamw8bit_reference, 1e-6},
    {"adamw8bit_step", "gstat's non-finite flag skips the step",
     [](CaseBuilder& b) { build_adamw8bit(b, 4096, true, 2); },
     [](Graph& g) {
         ValueId p = g.param("p", DType::f32, {512});
         adamw8bit_step(g, p, g.input("g", DType::f32, {512}), g.state("m", DType::u8, {512}), g.state("v", DType::u8, {512}),
                        g.state("am", DType::f32, {2}), g.state("av", DType::f32, {2}), g.input("h", DType::f32, {8}),
                        g.input("gstat", DType::i32, {kGstatSize}));
     },
     adamw8bit_reference, 1e-6},
});

}  // namespace
}  // namespace gltest
