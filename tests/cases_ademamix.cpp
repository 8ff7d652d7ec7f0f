// AdEMAMix op cases (bitsandbytes' AdEMAMix / AdEMAMix8bit kernels): the references are the kernels'
// element updates written out here with the warm-ups in double (fp32), and a scalar port of the 8-bit
// block-wise step with an exhaustive nearest-code search (codes must match exactly).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ggml-lite/ops/optim_ademamix.h"
#include "q8_fixtures.h"

namespace gltest {
namespace {

using namespace gl;

// hyper: lr, beta1, beta2, eps, weight_decay, step, grad_scale.
std::vector<float> hyper(float step, float wd) { return {1e-2f, 0.9f, 0.99f, 1e-6f, wd, step, 0.5f, 0.0f}; }

struct Step {
    double lr, alpha, b1, b2, b3, c1, c2, eps, wd;
};
Step consts(const std::vector<float>& h, const AdemamixOptions& o) {
    Step k{h[kLr], o.alpha, h[kBeta1], h[kBeta2], o.beta3, 0, 0, h[kEps], h[kWeightDecay]};
    const double t = h[kStep];
    if (o.t_alpha > 0) k.alpha = std::min(t * k.alpha / o.t_alpha, k.alpha);
    if (o.t_beta3 > 0) {
        const double l1 = std::log(k.b1), l3 = std::log(k.b3), s = t / o.t_beta3;
        k.b3 = std::min(std::exp(l1 * l3 / ((1 - s) * l3 + s * l1)), k.b3);
    }
    k.b3 = float(k.b3);  // the kernels take it as a float
    k.c1 = 1 - std::pow(k.b1, t);
    k.c2 = std::sqrt(1 - std::pow(k.b2, t));
    return k;
}
// One element in double: the moments, then the parameter.
void element(const Step& k, double g, float& p, float& m1, float& m2, float& nu) {
    m1 = float(m1 * k.b1 + (1 - k.b1) * g);
    m2 = float(m2 * k.b3 + (1 - k.b3) * g);
    nu = float(nu * k.b2 + (1 - k.b2) * g * g);
    double q = p - k.lr * ((m1 / k.c1 + k.alpha * m2) / (std::sqrt(double(nu)) / k.c2 + k.eps));
    if (k.wd > 0) q *= 1 - k.lr * k.wd;
    p = float(q);
}

// fp32: leaves p, g, m1, m2, nu, hyper[, gstat].
std::vector<std::vector<float>> fp32_reference(const std::vector<std::vector<float>>& in, const AdemamixOptions& o) {
    std::vector<float> p = in[0], m1 = in[2], m2 = in[3], nu = in[4];
    const bool gate = in.size() > 6 && in[6].size() == size_t(kGstatSize);
    if (gate && in[6][kGsNonfinite] != 0.0f) return {p, m1, m2, nu};
    const double mul = gate ? in[6][kGsMul] : 1.0;
    const Step k = consts(in[5], o);
    for (size_t i = 0; i < p.size(); i++) element(k, double(in[1][i]) * in[5][kGradScale] * mul, p[i], m1[i], m2[i], nu[i]);
    return {p, m1, m2, nu};
}

void build_fp32(CaseBuilder& b, const AdemamixOptions& o, float step, float wd, int gate) {
    const int64_t n = 700;
    ValueId p = b.c("param", {n});
    ValueId g = b.c("grad", {n}, -0.05f, 0.05f);
    ValueId m1 = b.c("m1", {n}, -0.02f, 0.02f), m2 = b.c("m2", {n}, -0.02f, 0.02f), nu = b.c("nu", {n}, 0.0f, 1e-3f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper(step, wd));
    ValueId gs = q8::gate_leaf(b, gate);
    ademamix_step(b.g, p, g, m1, m2, nu, h, o, gs);
    for (ValueId x : {p, m1, m2, nu}) b.out(x);
}

// 8-bit, one tensor: leaves p, g, m1, m2, nu codes, their absmax, hyper[, gstat].
std::vector<std::vector<float>> q8_reference(const std::vector<std::vector<float>>& in, const AdemamixOptions& o) {
    std::vector<float> p = in[0], c1 = in[2], c3 = in[3], c2 = in[4], a1 = in[5], a3 = in[6], a2 = in[7];
    const auto& g = in[1];
    const auto& h = in[8];
    const bool gate = in.size() > 9 && in[9].size() == size_t(kGstatSize);
    if (gate && in[9][kGsNonfinite] != 0.0f) return {p, c1, c3, c2, a1, a3, a2};
    const float gmul = gate ? in[9][kGsMul] : 1.0f;
    const float* qs = adam8bit_qmap(true);
    const float* qu = adam8bit_qmap(false);
    const float f[4] = {o.alpha, o.beta3, o.t_alpha, o.t_beta3};
    const AdemamixConsts k = ademamix_consts(h.data(), f);  // the f32 arithmetic is the kernel's, as the fp32 case checks
    auto nearest = [](const float* q, float x) {
        int best = 0;
        for (int j = 1; j < 256; j++)
            if (std::fabs(x - q[j]) < std::fabs(x - q[best])) best = j;
        return best;
    };
    for (size_t b0 = 0; b0 < p.size(); b0 += 256) {
        const size_t b = b0 / 256, e = std::min(p.size(), b0 + 256);
        std::vector<float> s1(e - b0), s2(e - b0), s3(e - b0);
        float x1 = 0, x2 = 0, x3 = 0;
        for (size_t i = b0; i < e; i++) {
            const size_t j = i - b0;
            const float gi = (g[i] * h[kGradScale]) * gmul;
            if (std::isfinite(gi)) {
                s1[j] = qs[int(c1[i])] * a1[b];
                s2[j] = qu[int(c2[i])] * a2[b];
                s3[j] = qs[int(c3[i])] * a3[b];
                s1[j] = s1[j] * k.b1 + k.c1m * gi;
                s3[j] = s3[j] * k.b3 + k.c3m * gi;
                s2[j] = s2[j] * k.b2 + (k.c2m * gi) * gi;
                float q = p[i] - k.lr * ((s1[j] / k.corr1 + k.alpha * s3[j]) / (std::sqrt(s2[j]) / k.corr2 + k.eps));
                p[i] = k.decays ? q * k.decay : q;
            } else {
                s1[j] = s2[j] = s3[j] = 0.0f;
            }
            x1 = std::max(x1, std::fabs(s1[j]));
            x2 = std::max(x2, std::fabs(s2[j]));
            x3 = std::max(x3, std::fabs(s3[j]));
        }
        auto scaled = [](float v, float mx) {
            const float r = mx > 0 ? 1.0f / mx : 0.0f;
            return !(mx > 0) ? 0.0f : std::isinf(r) ? v / mx : v * r;
        };
        for (size_t i = b0; i < e; i++) {
            const size_t j = i - b0;
            for (auto [s, mx, c] : {std::tuple{s1[j], x1, &c1}, {s3[j], x3, &c3}}) {
                int best = nearest(qs, scaled(s, mx));
                if (std::signbit(qs[best]) != std::signbit(s)) best += s > 0 ? 1 : -1;  // bitsandbytes keeps the sign
                (*c)[i] = float(best);
            }
            c2[i] = float(nearest(qu, scaled(s2[j], x2)));
        }
        a1[b] = x1, a2[b] = x2, a3[b] = x3;
    }
    return {p, c1, c3, c2, a1, a3, a2};
}

void build_q8(CaseBuilder& b, const AdemamixOptions& o, int64_t n, float step, int gate, bool poison = false) {
    b.compute = DType::f32;
    const int64_t blocks = (n + 255) / 256;
    ValueId p = b.c("param", {n});
    ValueId g = b.c("grad", {n}, -0.05f, 0.05f);
    if (poison) {
        std::vector<float> gd = b.random(n, -0.05f, 0.05f);
        gd[3] = NAN;
        gd[300] = INFINITY;
        b.set(g, gd);
    }
    std::vector<ValueId> codes;
    for (const char* name : {"m1", "m2", "nu"}) {
        ValueId c = b.c(name, {n}, 0.0f, 255.0f, DType::u8);
        std::vector<float> d = b.random(n, 0.0f, 255.0f);
        for (float& x : d) x = std::floor(x);
        b.set(c, d);
        codes.push_back(c);
    }
    ValueId a1 = b.c("absmax_m1", {blocks}, 0.001f, 0.01f), a2 = b.c("absmax_m2", {blocks}, 0.001f, 0.01f);
    ValueId an = b.c("absmax_nu", {blocks}, 1e-5f, 1e-4f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper(step, 0.01f));
    ValueId gs = q8::gate_leaf(b, gate);
    ademamix8bit_step(b.g, {p}, {g}, {codes[0]}, {codes[1]}, {codes[2]}, {a1}, {a2}, {an}, h, o, gs);
    for (ValueId x : {p, codes[0], codes[1], codes[2], a1, a2, an}) b.out(x);
}

AdemamixOptions opts(float t_alpha, float t_beta3) {
    AdemamixOptions o;
    o.alpha = 6.0f;
    o.beta3 = 0.999f;
    o.t_alpha = t_alpha;
    o.t_beta3 = t_beta3;
    return o;
}

void bad_fp32(Graph& g, int64_t nu_size, AdemamixOptions o = {}) {
    ValueId p = g.param("p", DType::f32, {64});
    ademamix_step(g, p, g.input("g", DType::f32, {64}), g.state("m1", DType::f32, {64}), g.state("m2", DType::f32, {64}),
                  g.state("nu", DType::f32, {nu_size}), g.input("h", DType::f32, {8}), o);
}
void bad_q8(Graph& g, DType codes, int64_t blocks) {
    ValueId p = g.param("p", DType::f32, {512});
    auto c = [&](const char* n) { return g.state(n, codes, {512}); };
    auto a = [&](const char* n) { return g.state(n, DType::f32, {blocks}); };
    ademamix8bit_step(g, {p}, {g.input("g", DType::f32, {512})}, {c("m1")}, {c("m2")}, {c("nu")}, {a("a1")}, {a("a2")},
                      {a("a3")}, g.input("h", DType::f32, {8}), {});
}

Register r({
    {"ademamix_step", "fp32 state, weight decay, no warm-ups", [](CaseBuilder& b) { build_fp32(b, opts(0, 0), 7, 0.01f, 0); },
     [](Graph& g) { bad_fp32(g, 63); }, [](const std::vector<std::vector<float>>& in) { return fp32_reference(in, opts(0, 0)); },
     1e-5},
    {"ademamix_step", "fp32 state, alpha and beta3 warm-ups mid-way, gstat multiplier",
     [](CaseBuilder& b) { build_fp32(b, opts(20, 50), 9, 0.0f, 1); },
     [](Graph& g) { bad_fp32(g, 64, opts(-1, 0)); },
     [](const std::vector<std::vector<float>>& in) { return fp32_reference(in, opts(20, 50)); }, 1e-5},
    {"ademamix8bit_step", "ragged last block, warm-ups, weight decay",
     [](CaseBuilder& b) { build_q8(b, opts(20, 50), 4096 + 300, 7, 0); }, [](Graph& g) { bad_q8(g, DType::f32, 2); },
     [](const std::vector<std::vector<float>>& in) { return q8_reference(in, opts(20, 50)); }, 1e-6},
    {"ademamix8bit_step", "inf / NaN gradients: the param kept, zero moments; gstat multiplier",
     [](CaseBuilder& b) { build_q8(b, opts(0, 0), 4096, 3, 1, true); }, [](Graph& g) { bad_q8(g, DType::u8, 3); },
     [](const std::vector<std::vector<float>>& in) { return q8_reference(in, opts(0, 0)); }, 1e-6},
    {"ademamix8bit_step", "gstat's non-finite flag skips the step",
     [](CaseBuilder& b) { build_q8(b, opts(0, 0), 4096, 3, 2); }, [](Graph& g) { bad_q8(g, DType::u8, 1); },
     [](const std::vector<std::vector<float>>& in) { return q8_reference(in, opts(0, 0)); }, 0.0},
});

}  // namespace
}  // namespace gltest
